"""A job's control state (control_state.JobState): keys in the shared head's GCS, written by a real job's driver
and read and written by a Ray worker process of that job, as a Ray Train worker does."""

from __future__ import annotations

import json
import sys
import time
import uuid

import pytest
from ray.job_submission import JobStatus as RayStatus
from ray.job_submission import JobSubmissionClient

pytestmark = pytest.mark.integration

SCRIPT = """
import json, ray
from cleverthis_runtime import compat
from cleverthis_runtime.control_state import JobState
ray.init()
compat.kv_put("job/JOB/killed-run/stop", b"{}")  # left by a driver of this name that was killed
compat.kv_put("job/JOB-resume-1/run/stop", b"{}")  # the key of another job whose name starts the same
state = JobState.for_driver("JOB")
left = {"killed": compat.kv_keys("job/JOB/"), "other": compat.kv_keys("job/JOB-resume-1/")}
compat.kv_delete("job/JOB-resume-1/")
fresh = state.snapshot()

@ray.remote(num_cpus=0.01)
def worker(state):  # another process of the job, as a Ray Train worker is
    seen = state.stop_requested()
    attempts = [state.join(0), state.join(0), state.join(1)]
    state.set_phase("training")
    state.set_fatal({"kind": "disk_full", "message": "first"})
    state.set_fatal({"kind": "other", "message": "second"})
    state.acknowledge({"path": "/ckpt/epoch-1-step-3"})
    return {"seen_stop": seen, "attempts": attempts}

state.request_stop("cancel")
state.request_stop("later")  # the first request stays
out = ray.get(worker.remote(state))
snap = state.snapshot()
again = JobState("JOB")  # the same name submitted again (after a delete): a run of its own
out.update(left=left, fresh=fresh, snap=snap, again_stop=again.stop_requested(), keys=len(compat.kv_keys(state.prefix)))
state.clear()
out["keys_after_clear"] = len(compat.kv_keys(state.prefix))
print("RESULT" + " " + json.dumps(out), flush=True)
"""


def test_stop_attempts_fatal_and_ack_travel_between_driver_and_worker(ray_cluster):
    client = JobSubmissionClient(ray_cluster.address, headers=ray_cluster.sdk_headers())
    sid = f"control-state-{uuid.uuid4().hex[:8]}"
    client.submit_job(entrypoint=f"{sys.executable} -c '{SCRIPT.replace('JOB', sid)}'", submission_id=sid)
    end = time.time() + 300
    while client.get_job_status(sid) not in (RayStatus.SUCCEEDED, RayStatus.FAILED, RayStatus.STOPPED):
        assert time.time() < end, client.get_job_logs(sid)[-2000:]
        time.sleep(1.0)
    logs = client.get_job_logs(sid)
    assert client.get_job_status(sid) == RayStatus.SUCCEEDED, logs[-3000:]
    out = json.loads(next(ln for ln in logs.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])
    assert out["fresh"] == {"job": sid, "stop": None, "phase": "starting", "attempts": {}, "ack": None,
                            "fatal": None}
    assert out["left"] == {"killed": [], "other": [f"job/{sid}-resume-1/run/stop"]}  # only its own name's
    assert out["seen_stop"] is True  # the driver's flag, read by the worker
    assert out["attempts"] == [1, 2, 1]  # per rank: a restarted rank 0 knows it is attempt 2
    snap = out["snap"]
    assert snap["stop"]["reason"] == "cancel"
    assert snap["attempts"] == {"0": 2, "1": 1}
    assert snap["phase"] == "training" and snap["ack"] == {"path": "/ckpt/epoch-1-step-3"}
    assert snap["fatal"] == {"kind": "disk_full", "message": "first"}  # the first fatal error wins
    assert out["again_stop"] is False
    assert out["keys"] == 6 and out["keys_after_clear"] == 0  # attempts/0, attempts/1, stop, phase, fatal, ack
