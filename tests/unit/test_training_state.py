"""Exact resume, cancel checkpoints and checkpoint-write faults of the real training loop, run in this process.

`cleverthis_runtime.train.run` is the same code a Ray worker runs (world size 1, no control state), so these
checks take seconds; tests/integration/test_resume.py and test_faults.py do the same through real Ray jobs.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from cleverthis_runtime import checkpoints
from cleverthis_runtime.control import WorkerControl, is_fatal
from cleverthis_runtime.data import read_training_config
from cleverthis_runtime.spec import JobSpec, TrainingConfig

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data"
STEPS_PER_EPOCH = 20  # 158 examples, batch size 8


class StopAfter(WorkerControl):
    """Asks for a stop at the n-th step end, as the driver's SIGTERM does through the job's control state."""

    def __init__(self, n: int) -> None:
        super().__init__(None, 0)
        self.n, self.calls = n, 0

    def stop_requested(self) -> bool:
        self.calls += 1
        return self.calls >= self.n


def _job(name: str, out: Path, epochs: int, base: str, control: WorkerControl | None = None, attempt: int = 1,
         **tc_overrides) -> dict:
    from cleverthis_runtime.train import run

    cfg, _ = read_training_config(str(DATA))
    tc = TrainingConfig.model_validate({**cfg, **tc_overrides})
    spec = JobSpec(name=name, base_model=base, dataset_path=str(DATA), epochs=epochs, batch_size=8, workers=1,
                   output_dir=str(out))
    meta = checkpoints.read_meta(base) if os.path.isdir(base) else None
    checkpoints.claim(str(out), name, resuming_from=base if meta else None)
    config = {"spec": spec.model_dump(mode="json"), "training_config": tc.model_dump(mode="json"),
              "checkpoint_dir": str(out), "job": name, "resume_from": base if meta else None}
    return run(config, control=control, attempt=attempt)


def _max_diff(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    x, y = load_file(str(a)), load_file(str(b))
    assert x.keys() == y.keys()
    return max(float((x[k] - y[k]).abs().max()) for k in x)


ADAPTER = "adapter_model/adapter_model.safetensors"


@pytest.fixture(scope="module")
def tiny(tiny_model) -> str:
    # the run's tiny models (tests/conftest.py: built once per run, shared with the integration tests)
    return tiny_model


@pytest.fixture(scope="module")
def straight(tiny, tmp_path_factory) -> Path:
    """The reference: 2 epochs without interruption."""
    out = tmp_path_factory.mktemp("straight") / "checkpoints"
    _job("straight", out, 2, tiny)
    return out


def test_checkpoint_holds_the_trainers_resume_state(straight):
    ep1 = straight / "epoch-1"
    state = ep1 / checkpoints.STATE_DIR
    assert {"optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"} <= set(os.listdir(state))
    assert json.loads((state / "trainer_state.json").read_text())["global_step"] == STEPS_PER_EPOCH
    meta = checkpoints.read_meta(str(ep1))
    assert meta["epoch"] == 1 and meta["global_step"] == STEPS_PER_EPOCH and meta["partial"] is False
    assert meta["total_batch"] == 8 and meta["examples"] == 158 and meta["planned_epochs"] == 2
    # an epoch that is neither best nor final is its adapter (also at its root, for from_pretrained)
    assert (ep1 / ADAPTER).exists() and (ep1 / "adapter_config.json").exists()
    assert not (ep1 / "model.safetensors").exists() and meta["merged"] is False
    assert os.readlink(straight / "epoch-final") == "epoch-2"
    assert (straight / "epoch-2" / "model.safetensors").exists() and not (straight / "epoch-2" / "adapter_config.json").exists()


def test_one_epoch_then_resume_equals_two_epochs(straight, tiny, tmp_path):
    out = tmp_path / "checkpoints"
    r = _job("resumed", out, 1, str(straight / "epoch-1"))
    assert r["resume"] == "exact" and r["global_step"] == 2 * STEPS_PER_EPOCH
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["epoch-2", "epoch-final", "latest", "runs"]
    assert _max_diff(straight / "epoch-2" / ADAPTER, out / "epoch-2" / ADAPTER) <= 1e-4
    assert _max_diff(straight / "epoch-2" / "model.safetensors", out / "epoch-2" / "model.safetensors") <= 1e-4
    assert checkpoints.read_meta(str(out / "epoch-2"))["base_model"] == tiny  # the original, not the checkpoint


def test_mid_epoch_stop_saves_the_exact_position_and_resumes_exactly(straight, tiny, tmp_path):
    out = tmp_path / "checkpoints"
    r = _job("cancelled", out, 2, tiny, control=StopAfter(STEPS_PER_EPOCH + 7))
    assert r["stopped"] and r["last_checkpoint"] == str(out / "epoch-2-step-27")
    meta = checkpoints.read_meta(str(out / "epoch-2-step-27"))
    assert meta["partial"] is True and meta["global_step"] == 27 and meta["epoch"] == 1
    assert not (out / "epoch-final").exists() and os.readlink(out / "latest") == "epoch-2-step-27"
    # Intact and loadable as the page shows.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(str(out / "epoch-2-step-27"))
    AutoTokenizer.from_pretrained(str(out / "epoch-2-step-27"))

    r2 = _job("cancelled-resume-1", out, 1, str(out / "epoch-2-step-27"))
    assert r2["resume"] == "exact" and r2["global_step"] == 40
    assert _max_diff(straight / "epoch-2" / ADAPTER, out / "epoch-2" / ADAPTER) <= 1e-4
    assert os.readlink(out / "epoch-final") == "epoch-2"


def test_restarted_workers_continue_from_the_jobs_newest_checkpoint(straight, tiny, tmp_path, capsys):
    """What the workers do after a failure (attempt 2): keep the job's plan, continue from its newest checkpoint."""
    out = tmp_path / "checkpoints"
    _job("rec", out, 2, tiny, control=StopAfter(STEPS_PER_EPOCH + 5))  # leaves epoch-1 and epoch-2-step-25
    (out / ".tmp-epoch-2-deadbeef").mkdir()  # a write cut short by the failure
    capsys.readouterr()
    r = _job("rec", out, 2, tiny, attempt=2)
    assert r["resume"] == "exact" and r["global_step"] == 2 * STEPS_PER_EPOCH
    log = capsys.readouterr().out
    assert '"type":"recovery"' in log and '"checkpoint_name":"epoch-2-step-25"' in log
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "epoch-1", "epoch-2", "epoch-2-step-25", "epoch-final", "latest", "runs"]
    assert _max_diff(straight / "epoch-2" / ADAPTER, out / "epoch-2" / ADAPTER) <= 1e-4


def test_a_warm_start_is_not_exact(straight, tiny, tmp_path):
    """The control for the two tests above: without the training state the result differs."""
    src = tmp_path / "src"
    shutil.copytree(straight / "epoch-1", src)
    shutil.rmtree(src / checkpoints.STATE_DIR)
    out = tmp_path / "checkpoints"
    r = _job("warm", out, 1, str(src))
    assert r["resume"] == "weights"
    assert _max_diff(straight / "epoch-2" / ADAPTER, out / "epoch-2" / ADAPTER) > 1e-3


def _step_losses(log: str) -> dict[int, float]:
    out = {}
    for line in log.splitlines():
        if '"type":"step"' in line:
            ev = json.loads(line.split(" ", 1)[1])
            out[ev["step"]] = ev["loss"]
    return out


def test_lora_resume_without_the_base_recovers_it_from_the_merged_weights(straight, tiny, tmp_path, capsys):
    """The base is recovered from the checkpoint's merged weights minus the adapter's delta: equal to the original
    base up to fp32 rounding, so the resumed steps are the exact resume's. (Later steps drift by that rounding,
    amplified by this tiny model's learning rate of 0.01: the adapters after 20 more steps differ by ~1e-3.)
    An epoch without merged weights (neither best nor final) cannot do that, and says what to do instead."""
    import torch
    from safetensors.torch import load_file

    from cleverthis_runtime.plan import PlanError
    from cleverthis_runtime.train import _load_model

    lone = tmp_path / "lone"
    shutil.copytree(straight / "epoch-1", lone)
    spec = JobSpec(name="nobase", base_model=str(lone), dataset_path=str(DATA))
    tc = TrainingConfig.model_validate({**read_training_config(str(DATA))[0], "method": "lora"})
    with pytest.raises(PlanError, match="holds the LoRA adapter alone.*resume from epoch-final or best"):
        _load_model(spec, tc, str(lone), {"adapter": True}, str(tmp_path / "gone"), None, torch)

    src = tmp_path / "src"
    shutil.copytree(straight / "epoch-2", src)
    meta = json.loads((src / checkpoints.META_FILE).read_text())
    meta["base_model"] = str(tmp_path / "gone")  # the base is not on this node and must not be downloaded
    (src / checkpoints.META_FILE).write_text(json.dumps(meta))
    spec = JobSpec(name="nobase", base_model=str(src), dataset_path=str(DATA))
    model, how = _load_model(spec, tc, str(src), meta, meta["base_model"], None, torch)
    assert how == "unmerged_from_checkpoint"
    original = load_file(str(Path(tiny) / "model.safetensors"))
    recovered = {k.replace("base_model.model.", "").replace(".base_layer", ""): v
                 for k, v in model.state_dict().items() if "lora_" not in k}
    assert max(float((recovered[k] - original[k]).abs().max()) for k in original) <= 1e-6

    capsys.readouterr()
    r = _job("nobase", tmp_path / "checkpoints", 1, str(src))
    assert r["resume"] == "exact"
    recovered_steps = _step_losses(capsys.readouterr().out)
    _job("withbase", tmp_path / "checkpoints-b", 1, str(straight / "epoch-2"))
    exact_steps = _step_losses(capsys.readouterr().out)
    first = sorted(exact_steps)[:5]
    assert first[0] == 2 * STEPS_PER_EPOCH + 1
    assert max(abs(recovered_steps[s] - exact_steps[s]) for s in first) <= 1e-4


@pytest.mark.parametrize("fault,kind", [("ENOSPC", "disk_full"), ("EACCES", "permission_denied")])
def test_checkpoint_write_fault_fails_readably_and_keeps_earlier_checkpoints(tiny, tmp_path, monkeypatch,
                                                                             fault, kind):
    from cleverthis_runtime.triage import classify

    monkeypatch.setenv(checkpoints.FAULT_ENV, f"epoch-2:{fault}")
    out = tmp_path / "checkpoints"
    with pytest.raises(checkpoints.CheckpointError) as e:
        _job("faulty", out, 2, tiny, lora_r=4)
    msg = str(e.value)
    assert "cannot write checkpoint epoch-2" in msg and "earlier checkpoints are intact (latest: epoch-1)" in msg
    assert classify(f"CheckpointError: {msg}")[0] == kind and is_fatal(e.value)
    assert sorted(p.name for p in out.iterdir()) == [".cleverthis-owner.json", "epoch-1", "latest", "runs"]
    assert checkpoints.read_meta(str(out / "epoch-1"))["epoch"] == 1


def test_fatal_errors_are_not_retried():
    assert is_fatal(OSError(errno.ENOSPC, "No space left on device"))
    assert not is_fatal(RuntimeError("Connection reset by peer"))


def test_qlora_resume_reloads_the_quantized_base_and_is_exact(tiny, tmp_path):
    pytest.importorskip("bitsandbytes")
    q = {"method": "qlora", "quantization": "4bit"}
    straight = tmp_path / "straight"
    _job("q", straight, 2, tiny, **q)
    out = tmp_path / "resumed"
    r = _job("q2", out, 1, str(straight / "epoch-1"), **q)
    assert r["resume"] == "exact"
    assert checkpoints.read_meta(str(out / "epoch-2"))["method"] == "qlora"
    assert _max_diff(straight / "epoch-2" / ADAPTER, out / "epoch-2" / ADAPTER) <= 1e-4


def test_with_validation_best_and_final_links_and_exact_resume(tiny, tmp_path):
    v = {"validation_split": 0.1}
    straight = tmp_path / "straight"
    _job("v", straight, 2, tiny, **v)
    assert os.readlink(straight / "epoch-final") == "epoch-2"
    best = checkpoints.read_meta(str(straight / "best"))
    assert best["eval_loss"] is not None and os.readlink(straight / "best") in ("epoch-1", "epoch-2")
    # merged weights where they are loaded from, and only there (a former best gave them up)
    linked = {os.readlink(straight / "best"), os.readlink(straight / "epoch-final")}
    for name in ("epoch-1", "epoch-2"):
        assert checkpoints.has_merged(straight / name) == (name in linked), name
        assert checkpoints.read_meta(str(straight / name))["merged"] == (name in linked), name
    out = tmp_path / "resumed"
    _job("v2", out, 1, str(straight / "epoch-1"), **v)
    assert _max_diff(straight / "epoch-2" / ADAPTER, out / "epoch-2" / ADAPTER) <= 1e-4
    assert checkpoints.read_meta(str(out / "epoch-2"))["eval_loss"] == checkpoints.read_meta(
        str(straight / "epoch-2"))["eval_loss"]


def test_patience_counts_validations_without_improvement_beyond_the_threshold():
    from cleverthis_runtime.train import Patience

    p = Patience(2, threshold=0.1)
    assert not p.update(3.0, 1)             # the first is the best
    assert not p.update(2.95, 2)            # lower, but not by more than 0.1: no improvement (1)
    assert not p.update(2.5, 3)             # improved: the count starts again
    assert not p.update(2.6, 4)             # (1)
    assert p.update(2.45, 5)                # (2): stop
    assert p.best == 2.5 and p.best_step == 3 and p.lowest == 2.45 and p.lowest_step == 5
    assert "did not improve by more than 0.1 in 2 validations" in p.reason() and "lowest 2.4500, at step 5" in p.reason()
    assert not any(Patience(None).update(x, i) for i, x in enumerate([1.0, 2.0, 3.0, 4.0]))  # unset: never


def test_eval_steps_and_early_stopping(tiny, tmp_path, capsys):
    """A learning rate too high to improve: validations every 3 steps and at epoch ends, a stop after 2 without
    improvement, its checkpoint written, `best` at the lowest validation loss, `epoch-final` where it stopped."""
    from cleverthis_runtime import events

    out = tmp_path / "checkpoints"
    capsys.readouterr()
    r = _job("es", out, 3, tiny, validation_split=0.2, eval_steps=3, early_stopping_patience=2,
             early_stopping_threshold=0.01, learning_rate=0.5, report_to=["none"])
    evs = list(events.parse_events(capsys.readouterr().out.splitlines()))
    val = [e for e in evs if e["type"] == "validation"]
    stop = next(e for e in evs if e["type"] == "early_stop")
    per_epoch = next(e for e in evs if e["type"] == "step")["total_steps"] // 3
    assert r["stopped_early"] and r["global_step"] == stop["step"] < 3 * per_epoch
    assert [v["step"] for v in val] == [s for s in range(1, stop["step"] + 1) if s % 3 == 0 or s % per_epoch == 0], str((per_epoch, stop["step"], [(v["step"], v["epoch"], round(v["eval_loss"], 3)) for v in val]))
    losses = [v["eval_loss"] for v in val]
    assert all(x >= min(losses[:-2]) - 0.01 for x in losses[-2:]), losses
    final = out / os.readlink(out / "epoch-final")
    assert str(final) == stop["checkpoint"]
    assert checkpoints.read_meta(str(final))["eval_loss"] == pytest.approx(losses[-1])
    assert checkpoints.read_meta(str(out / "best"))["eval_loss"] == pytest.approx(min(losses))


def test_eval_steps_and_early_stopping_need_validation_data(tiny, tmp_path):
    from cleverthis_runtime.preflight import preflight

    data = tmp_path / "training"
    shutil.copytree(DATA, data, ignore=shutil.ignore_patterns("checkpoints"))
    spec = JobSpec(name="es", base_model=tiny, dataset_path=str(data), workers=1,
                   training_config={"eval_steps": 5, "early_stopping_patience": 3})
    fields = {e["field"]: e["message"] for e in preflight(spec, quick=True)["errors"]}
    assert "eval_steps needs validation data: set validation_split" in fields["training_config.eval_steps"]
    assert "early_stopping_patience needs validation data" in fields["training_config.early_stopping_patience"]
    spec = JobSpec(name="es", base_model=tiny, dataset_path=str(data), workers=1,
                   training_config={"eval_steps": 5, "early_stopping_patience": 3, "validation_split": 0.1})
    assert preflight(spec, quick=True)["errors"] == []
    with pytest.raises(ValueError, match="early_stopping_patience"):
        TrainingConfig(early_stopping_patience=0)


def test_bf16_lora_loads_a_bf16_base_writes_adapter_sized_epochs_and_a_bf16_final(tiny, tmp_path, capsys):
    """A bf16 LoRA job on CPU: the frozen base loads in bf16 (read from the job's weights), the epoch that is
    neither best nor final is the adapter alone, epoch-final holds bf16 merged weights that load as bf16, the
    oldest checkpoint beyond keep_checkpoints goes, and every file follows the umask."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out = tmp_path / "checkpoints"
    old = os.umask(0o007)
    try:
        _job("bf16", out, 3, tiny, mixed_precision="bf16", keep_checkpoints=2)
    finally:
        os.umask(old)
    log = capsys.readouterr().out
    plan = next(json.loads(line.split(" ", 1)[1]) for line in log.splitlines() if '"type":"plan"' in line)
    assert plan["weights_dtype"] == "bf16" and plan["precision"] == "bf16"
    assert "best and epoch-final add the merged weights" in plan["reasons"]["checkpoints"]
    assert '"deleted":true' in log and not (out / "epoch-1").exists()  # keep 2: epoch-1 went when epoch-3 came
    ep2, final = out / "epoch-2", out / "epoch-final"
    assert os.readlink(final) == "epoch-3"
    assert not (ep2 / "model.safetensors").exists() and (ep2 / "adapter_config.json").exists()
    # the same folder as the final one but for the merged weights (this tiny model's adapter is half its size;
    # a 7B model's is 0.6 %)
    merged_bytes = os.path.getsize(final / "model.safetensors")
    adapter_bytes = os.path.getsize(ep2 / ADAPTER)
    assert checkpoints.size_of(str(ep2)) < checkpoints.size_of(str(final)) - merged_bytes + adapter_bytes + 4096
    weights = load_file(str(final / "model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}
    assert next(AutoModelForCausalLM.from_pretrained(str(final)).parameters()).dtype == torch.bfloat16
    # an adapter-only epoch loads too: transformers reads its adapter_config.json and puts it on the base
    assert hasattr(AutoModelForCausalLM.from_pretrained(str(ep2)), "peft_config")
    for d, dirs, files in os.walk(out / "epoch-3"):
        for f in files:
            assert os.stat(os.path.join(d, f)).st_mode & 0o777 == 0o660, f
        for x in dirs:
            assert os.stat(os.path.join(d, x)).st_mode & 0o777 == 0o770, x
