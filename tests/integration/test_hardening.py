"""Faults and load around the server: Jupyter restarted mid-run, the Ray head stopped and back, 50 websocket
tails at once, a job flooding its log.

The jobs here are small real Ray jobs that print the runtime's event lines at a set rate (no training: what is
under test is the path from a job's log to the user), submitted as ours so that the service lists them.
Figures are printed (`-s`) and quoted in docs/development.md, "What the suites prove".
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import requests

from cleverthis_runtime.events import PREFIX, parse_events
from jupyter_cleverthis import cli
from jupyter_cleverthis.service import jobs, log_stream
from jupyter_cleverthis.service.clusters import ClusterRegistry, LocalCluster, free_port
from jupyter_cleverthis.service.jobs import MARK, JobService
from jupyter_cleverthis.service.store import EventStore

pytestmark = pytest.mark.integration

EMITTER = textwrap.dedent(f'''
    """Prints N step events at RATE per second (plus FILLER plain lines per second), framed by phase events; with a
    GATE path, the steps start once that file exists (the test is ready to watch)."""
    import json, os, sys, time
    n, rate, filler = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    gate = sys.argv[4] if len(sys.argv) > 4 else None
    seq = 0
    def emit(**kw):
        global seq
        seq += 1
        sys.stdout.write({PREFIX!r} + json.dumps({{"src": "emitter", "seq": seq, "t": time.time(), **kw}}) + "\\n")
        sys.stdout.flush()
    emit(type="phase", phase="running")
    deadline = time.time() + 600
    while gate and not os.path.exists(gate) and time.time() < deadline:
        time.sleep(0.1)
    t0 = time.time()
    chunk = "x" * 60 + "\\n"
    sent = 0
    for k in range(n):
        emit(type="step", step=k + 1, loss=1.0 / (k + 1))
        due = t0 + (k + 1) / rate
        while True:  # plain lines in chunks of 1/100 s until the next event is due
            now = time.time()
            want = int((now - t0) * filler) - sent
            if want > 0:
                sys.stdout.write(chunk * want)
                sys.stdout.flush()
                sent += want
            if now >= due:
                break
            time.sleep(min(0.01, due - now))
    emit(type="phase", phase="succeeded", filler_lines=sent, seconds=round(time.time() - t0, 2))
''')


@pytest.fixture(scope="module")
def emitter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("emitter") / "emitter.py"
    path.write_text(EMITTER)
    return path


def submit(svc: JobService, cluster: str, name: str, emitter: Path, n: int, rate: float, filler: int = 0,
           gate: Path | None = None) -> None:
    jobs.submit(
        svc.client(cluster), entrypoint=f"{sys.executable} {emitter} {n} {rate} {filler}" + (f" {gate}" if gate else ""),
        submission_id=name,
        metadata={MARK: "1", "owner": "hardening", "job_type": "train", "framework": "torch"},
        runtime_env={"env_vars": {"PYTHONUNBUFFERED": "1"}},
    )


def wait_status(svc: JobService, cluster: str, name: str, done: set[str], timeout: float = 180) -> str:
    end = time.time() + timeout
    while time.time() < end:
        st = str(svc.client(cluster).get_job_status(name).value)
        if st in done:
            return st
        time.sleep(0.5)
    raise AssertionError(f"{name} still not in {done} after {timeout}s")


def seqs(evs: list[dict]) -> list[int]:
    return [e["seq"] for e in evs if e.get("src") == "emitter"]


# -- Jupyter restarted mid-run ------------------------------------------------------------------------------
class Server:
    """A real `jupyter server` with the extension, as a user starts it; restartable on the same port."""

    def __init__(self, root: Path) -> None:
        self.root, self.port, self.token, self.proc = root, free_port(), "hardening-" + os.urandom(8).hex(), None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [str(Path(sys.executable).with_name("jupyter")), "server", "--no-browser", "--allow-root",
               f"--port={self.port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root}", "--ServerApp.jpserver_extensions={'jupyter_cleverthis': True}"]
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        end = time.time() + 90
        while time.time() < end:
            try:
                if self.get("clusters").status_code == 200:
                    return
            except requests.RequestException:
                pass
            assert self.proc.poll() is None, (self.root / "server.log").read_text()[-2000:]
            time.sleep(0.3)
        raise AssertionError("jupyter server did not start: " + (self.root / "server.log").read_text()[-2000:])

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def get(self, *parts: str, **params: object) -> requests.Response:
        return requests.get(f"{self.url}/cleverthis/api/{'/'.join(parts)}", params=params, timeout=30,
                            headers={"Authorization": f"token {self.token}"})


def test_jupyter_restart_during_a_run_loses_no_event(ray_cluster, emitter, tmp_path, job_name):
    """Events polled with `since` across a server restart: every sequence number once, in order; then the
    websocket tail of the new server replays the whole log."""
    svc = JobService()
    n = 240
    gate = tmp_path / "go"  # the steps start once the server is up: the restart then falls mid-stream
    submit(svc, "local", job_name, emitter, n=n, rate=10, gate=gate)
    server = Server(tmp_path)
    server.start()
    gate.touch()
    got: list[dict] = []
    since, restarted_at, t0 = 0, None, time.time()
    try:
        while time.time() - t0 < 150:
            r = server.get("clusters", "local", "jobs", job_name, "events", since=since)
            assert r.status_code == 200, r.text
            body = r.json()
            got += body["events"]
            since = body["next"] or since
            if any(e.get("phase") == "succeeded" for e in body["events"]):
                break
            if restarted_at is None and len(got) > 40:
                before = len(got)
                restarted_at = time.time()
                server.stop()
                server.start()
                restarted_at = time.time() - restarted_at
            time.sleep(0.3)
        assert restarted_at is not None and 40 < before < n
        assert seqs(got) == list(range(1, n + 3)), "lost or repeated events across the restart"
        idx = [e["i"] for e in got]
        assert idx == sorted(set(idx))

        import websocket  # websocket-client: what a browser tab does when it reconnects

        ws = websocket.create_connection(
            f"ws://127.0.0.1:{server.port}/cleverthis/api/clusters/local/jobs/{job_name}/logs/tail",
            header=[f"Authorization: token {server.token}"], timeout=60)
        text = ""
        try:
            while True:
                msg = ws.recv()
                if not msg:
                    break
                text += msg
        except websocket.WebSocketConnectionClosedException:
            pass
        finally:
            ws.close()
        assert seqs(list(parse_events(text.splitlines()))) == list(range(1, n + 3))
        print(f"\njupyter restart: {restarted_at:.1f}s down, {n + 2} events before/after, none lost or repeated")
    finally:
        server.stop()


# -- 50 websocket tails at once ---------------------------------------------------------------------------------
async def test_50_websocket_tails_for_60s_drop_no_event(jp_ws_fetch, ray_cluster, emitter, job_name, monkeypatch):
    from jupyter_cleverthis.server import proxy

    upstream: list[str] = []  # the follows the server opens on Ray: one for all 50 tails (service/log_fanout.py)

    def counted(cfg, name, info=None):
        upstream.append(name)
        return follow(cfg, name, info)

    follow = proxy.follow_job_log
    monkeypatch.setattr(proxy, "follow_job_log", counted)
    svc = JobService()
    n, rate, clients = 1200, 20, 50  # 60 s of events
    submit(svc, "local", job_name, emitter, n=n, rate=rate)
    # as the sidebar does: a tail is opened on a job that runs
    await asyncio.get_running_loop().run_in_executor(None, wait_status, svc, "local", job_name, {"RUNNING"})

    async def tail() -> tuple[str, float]:
        ws = await jp_ws_fetch("cleverthis", "api", "clusters", "local", "jobs", job_name, "logs", "tail")
        text, last = "", time.time()
        while True:
            msg = await asyncio.wait_for(ws.read_message(), timeout=60)
            if msg is None:
                break
            text += msg
            last = time.time()
        return text, last

    t0 = time.time()
    results = await asyncio.wait_for(asyncio.gather(*(tail() for _ in range(clients))), timeout=240)
    took = time.time() - t0
    complete = [seqs(list(parse_events(text.splitlines()))) == list(range(1, n + 3)) for text, _ in results]
    assert all(complete), f"{complete.count(False)} of {clients} tails missed events"
    assert took >= n / rate * 0.9  # they really tailed a live job for the whole minute
    assert upstream == [job_name], upstream
    print(f"\n{clients} websocket tails x {took:.0f}s: {clients * (n + 2)} events delivered, 0 dropped")


async def test_a_log_follow_sends_every_line_ends_with_the_job_and_falls_back_to_rays_tail(
        ray_cluster, emitter, job_name, tmp_path, monkeypatch, caplog):
    """The live log (service/log_stream.py): Ray's state API stream while the job runs, every line, ending once
    the job is over; and Ray's own job tail where that stream cannot be had (here: a path the dashboard lacks)."""
    svc = JobService()
    cfg = svc.cluster("local")
    caplog.set_level(logging.INFO, logger=log_stream.__name__)
    texts = {}
    for name, api in ((job_name, log_stream.STREAM_API), (f"{job_name}-fallback", "/api/v0/logs/no-such-stream")):
        monkeypatch.setattr(log_stream, "STREAM_API", api)
        gate = tmp_path / f"{name}.go"
        submit(svc, "local", name, emitter, n=40, rate=20, gate=gate)
        await asyncio.get_running_loop().run_in_executor(None, wait_status, svc, "local", name, {"RUNNING"})

        async def follow(name: str = name) -> str:
            return "".join([text async for text in log_stream.follow_job_log(cfg, name)])

        task = asyncio.ensure_future(follow())
        # `cleverthis-train logs NAME --follow` (and `%train logs`), beside it: the same follow, line by line
        printed: list[str] = []
        cli_follow = asyncio.get_running_loop().run_in_executor(
            None, cli.execute, cli.parse(["logs", name, "--follow", "--cluster", "local"]), printed.append)
        await asyncio.sleep(1)  # following before the steps start: they arrive live
        gate.touch()
        texts[name] = await asyncio.wait_for(task, timeout=120)
        assert svc.client("local").get_job_status(name).value == "SUCCEEDED"  # it ended once the job had
        await asyncio.wait_for(cli_follow, timeout=60)
        texts[f"{name} (cli)"] = "\n".join(printed)
    for name, text in texts.items():
        assert seqs(list(parse_events(text.splitlines()))) == list(range(1, 43)), name
    fell_back = [r.getMessage() for r in caplog.records if "stream unavailable" in r.getMessage()]
    # the fallback job's two follows (ours and the CLI's) fell back, and nothing else did
    assert len(fell_back) == 2 and all(f"{job_name}-fallback:" in m for m in fell_back), fell_back


# -- a job flooding its log -------------------------------------------------------------------------------------
@pytest.mark.serial  # a timing ratio: measured with nothing else running
async def test_a_job_printing_10000_lines_per_second_does_not_slow_the_job_list(jp_fetch, ray_cluster, emitter,
                                                                               job_name):
    svc = JobService()

    async def list_ms(k: int = 15) -> float:
        times = []
        for _ in range(k):
            t = time.perf_counter()
            resp = await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", params={"limit": 50})
            times.append((time.perf_counter() - t) * 1000)
            assert resp.code == 200
            await asyncio.sleep(0.1)
        return statistics.median(times)

    idle = await list_ms()
    submit(svc, "local", job_name, emitter, n=400, rate=10, filler=10_000)  # 40 s at 10,000 lines/s
    await asyncio.get_running_loop().run_in_executor(None, wait_status, svc, "local", job_name, {"RUNNING"})
    await asyncio.sleep(8)  # let the log grow (~5 MB)
    flooded = await list_ms()
    svc.cancel("local", job_name, user="hardening")  # its owner (the submit above)
    log_mb = len(svc.client("local").get_job_logs(job_name)) / 1e6
    ratio = flooded / idle
    print(f"\njob list median {idle:.1f} ms idle, {flooded:.1f} ms beside a 10,000 lines/s job "
          f"({log_mb:.1f} MB of log): {ratio:.2f}x")
    assert log_mb > 2  # the flood was real
    assert ratio <= 2.0 or flooded - idle < 15, f"the job list slowed {ratio:.2f}x"


# -- the Ray head stopped and back ------------------------------------------------------------------------------
@pytest.mark.serial  # a second Ray head of its own, stopped and started again
def test_ray_head_stopped_gives_clear_errors_keeps_the_store_and_recovers(ray_cluster, emitter, tmp_path, job_name):
    """A head of its own (the session's one is shared): stopped by its pid mid-list, then started again."""
    root = tmp_path / "home2"
    head = LocalCluster("local", root)
    head.up(num_cpus=1)
    svc = JobService(ClusterRegistry(root), EventStore(root / "events.sqlite"))
    try:
        submit(svc, "local", job_name, emitter, n=20, rate=50)
        assert wait_status(svc, "local", job_name, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
        assert seqs(svc.events("local", job_name)) == list(range(1, 23))

        head.down()
        for call in (lambda: svc.query("local"), lambda: svc.events("local", job_name),
                     lambda: svc.get("local", job_name)):
            t = time.time()
            with pytest.raises(Exception) as err:
                call()
            assert time.time() - t < 15, "a call hung on a stopped head"
            assert type(err.value).__name__ in ("ClusterNotRunning", "ClusterError"), repr(err.value)
            assert str(err.value) == "cluster 'local' is not running (start it with `%train cluster up`)"
        # nothing lost: the store still holds every event of the job
        assert seqs(svc.store.events("local", job_name)) == list(range(1, 23))

        head.up(num_cpus=1)
        svc2 = JobService(ClusterRegistry(root), svc.store)
        assert svc2.query("local")[1] >= 0  # the list answers again
        again = job_name + "-again"
        submit(svc2, "local", again, emitter, n=5, rate=50)
        assert wait_status(svc2, "local", again, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
        assert seqs(svc2.events("local", again)) == list(range(1, 8))
        assert seqs(svc2.store.events("local", job_name)) == list(range(1, 23))
        print(f"\nRay head stopped and back: errors were clear, {22} stored events kept, new jobs run")
    finally:
        head.down()


# -- a job agent that cannot start -----------------------------------------------------------------------------
@pytest.mark.serial  # a Ray head of its own, started twice: beside the browser tests, off the main stage
def test_cluster_up_starts_again_when_the_job_agent_cannot_bind(tmp_path, monkeypatch):
    """Another program holds the port picked for the head's job agent (a race with anything binding ports at the
    same moment): Ray's agent dies and every submit would answer "No available agent". `cluster up` notices that
    the agent does not answer, starts again on fresh ports, and returns a cluster whose Job API takes a job."""
    import socket

    from ray.job_submission import JobSubmissionClient

    from jupyter_cleverthis.service import clusters

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    picks: list[int] = []

    def agent_port(self, free: int) -> int:
        picks.append(taken if not picks else free)
        return picks[-1]

    monkeypatch.setattr(clusters.LocalCluster, "_agent_port", agent_port)
    head = LocalCluster("local", tmp_path / "home")
    try:
        cfg = head.up(num_cpus=1)
        assert len(picks) == 2 and picks[0] == taken, picks  # the first start lost its agent, the second has one
        assert head._agent_ready()
        client = JobSubmissionClient(cfg.address, headers=cfg.sdk_headers())
        sid = client.submit_job(entrypoint="python -c 'print(1)'")
        assert sid
    finally:
        head.down()
        squatter.close()
