"""Planned against measured memory, one fresh process per method without paying the imports each time.

Run as a script (test_memory_peaks.py does): this process imports torch, transformers, peft, datasets and the runtime
and runs no tensor operation itself; a forked child builds a ~21M-parameter Llama, then one forked child per method
trains it with the workers' code (`train.run`, world size 1). A forked child's peak resident size (getrusage) starts
from its own size at the fork, so each child measures its own run. Prints one JSON line per method: the plan's
per-worker estimate and the `memory` event's measured peak.
"""

from __future__ import annotations

import json
import os
import random
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORDS = "the quick brown fox jumps over a lazy dog while the model learns every token of memory".split()


def _in_child(fn) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn()
        except BaseException:  # noqa: BLE001 - the parent reports the child's exit status
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def main(work: str, methods: list[str]) -> int:
    import bitsandbytes  # noqa: F401 - imported before the fork, like the rest
    import datasets  # noqa: F401
    import peft  # noqa: F401
    import transformers  # noqa: F401

    from cleverthis_runtime import checkpoints, events
    from cleverthis_runtime.spec import JobSpec, TrainingConfig
    from cleverthis_runtime.tiny import build_tiny_model
    from cleverthis_runtime.train import run

    root = Path(work)
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    with open(data / "train.jsonl", "w") as f:  # every example longer than max_seq_length: full rows of 128
        for _ in range(16):
            f.write(json.dumps({"instruction": " ".join(rng.choice(WORDS) for _ in range(30)), "input": "",
                                "output": " ".join(rng.choice(WORDS) for _ in range(150))}) + "\n")
    model = root / "llama-21m"
    if _in_child(lambda: build_tiny_model(str(model), [str(ROOT / "examples" / "data")], hidden=512, layers=8)):
        return 1

    def train(method: str) -> None:
        seen: dict[str, dict] = {}
        emit = events.emit

        def keep(type_: str, **kw):
            seen[type_] = kw
            return emit(type_, **kw)

        events.emit = keep
        tc = {"method": method, "max_seq_length": 128, "report_to": ["none"], "learning_rate": 1e-3}
        if method == "qlora":
            tc["quantization"] = "4bit"
        out = root / f"out-{method}"
        spec = JobSpec(name=f"mem-{method}", base_model=str(model), dataset_path=str(data), epochs=1, batch_size=8,
                       workers=1, cpus_per_worker=2, output_dir=str(out))
        checkpoints.claim(str(out), spec.name)
        run({"spec": spec.model_dump(mode="json"), "training_config": TrainingConfig.model_validate(tc).model_dump(),
             "checkpoint_dir": str(out), "job": spec.name})
        print("MEMORY " + json.dumps({"method": method, "plan": seen["plan"]["memory_per_worker_gb"],
                                      "parameters": seen["plan"]["parameters"], "peak": seen["memory"]}), flush=True)

    failed = 0
    for method in methods:
        failed += _in_child(lambda m=method: train(m)) != 0
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2].split(",")))
