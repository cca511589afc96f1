"""The private names cleverthis_runtime.compat patches are still there with the shape it was written for, and the
patch does what it says: a two-process gloo group whose rendezvous store listens on MASTER_ADDR only (without
it, torch's store listens on every interface)."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
import textwrap

import pytest

from cleverthis_runtime import compat
from jupyter_cleverthis.service.clusters import free_port

GROUP = textwrap.dedent("""
    import datetime, os, sys, time
    import psutil, torch, torch.distributed as dist
    rank, port, patched = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
    if patched:
        from cleverthis_runtime.compat import bind_store_to_master_addr
        bind_store_to_master_addr()
        bind_store_to_master_addr()  # twice: once is what happens
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=300))
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
    if rank == 0:
        print("LISTEN", [c.laddr.ip for c in psutil.Process().net_connections("inet")
                         if c.status == "LISTEN" and c.laddr.port == port], flush=True)
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.parametrize(("module", "name"), compat.PATCHED)
def test_the_patched_names_exist(module, name):
    obj = importlib.import_module(module)
    for part in name.split("."):
        assert hasattr(obj, part), f"{module}.{name} is gone: revisit compat.py"
        obj = getattr(obj, part)


def test_the_transformers_and_accelerate_names_have_the_shape_the_patches_use():
    from accelerate import Accelerator
    from transformers import Trainer

    assert list(inspect.signature(Trainer._load_from_checkpoint).parameters) == \
        ["self", "resume_from_checkpoint", "model"]
    assert issubclass(compat.trainer_class(), Trainer)
    rng = inspect.getsource(Trainer._load_rng_state)
    assert all(f'checkpoint_rng_state["{k}"]' in rng for k in ("python", "numpy", "cpu"))
    assert '"rng_state.pth"' in rng and 'f"rng_state_{process_index}.pth"' in rng
    assert list(inspect.signature(Accelerator.prepare_model).parameters) == \
        ["self", "model", "device_placement", "evaluation_mode"]
    assert "self._models" in inspect.getsource(Accelerator.__init__)


def test_the_rng_state_round_trips_and_transformers_reads_it(tmp_path):
    import random

    import torch
    from transformers import Trainer

    st = compat.rng_state(torch)
    torch.save(st, tmp_path / "rng_state.pth")
    expected = (random.random(), torch.rand(1).item())
    compat.set_rng_state(torch, st)
    assert (random.random(), torch.rand(1).item()) == expected

    class Args:  # what _load_rng_state reads of TrainingArguments
        world_size, process_index, parallel_mode = 1, 0, None

    fake = type("T", (), {"args": Args()})()
    Trainer._load_rng_state(fake, str(tmp_path))  # transformers' own reader
    assert (random.random(), torch.rand(1).item()) == expected


def test_the_store_factory_has_the_signature_the_patch_wraps():
    from ray.train.torch.config import TorchConfig, _TorchBackend

    rdzv = importlib.import_module("torch.distributed.rendezvous")
    params = list(inspect.signature(rdzv._create_c10d_store).parameters)
    assert params == ["hostname", "port", "rank", "world_size", "timeout", "use_libuv"], params
    assert "master_listen_fd" in rdzv.TCPStore.__init__.__doc__
    assert TorchConfig().backend_cls is _TorchBackend
    assert issubclass(compat.torch_config().backend_cls, _TorchBackend)


def _store_listens_on(patched: bool, tmp_path) -> list[str]:
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", GROUP, str(rank), str(port), "1" if patched else "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
             for rank in (0, 1)]
    # generous: two processes importing torch at once take 60-137 s for this test's two calls on a loaded
    # machine (load 16), more than 120 s per call at worst
    outs = [p.communicate(timeout=400) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    line = next(ln for ln in outs[0][0].splitlines() if ln.startswith("LISTEN"))
    return ast.literal_eval(line.split(" ", 1)[1])


def test_rank_zero_store_listens_on_master_addr_only(tmp_path):
    assert _store_listens_on(True, tmp_path) == ["127.0.0.1"]
    # what the patch is for: unpatched, the store takes every interface
    assert _store_listens_on(False, tmp_path) in (["::"], ["0.0.0.0"])


def test_tensor_parallel_on_cpu_passes_accelerates_check_and_its_other_checks_remain(monkeypatch):
    from types import SimpleNamespace

    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import DistributedType

    # accelerate's own check again at teardown (the patch is process-wide once a TP job installs it)
    monkeypatch.setattr(ParallelismConfig, "_validate_accelerator", ParallelismConfig._validate_accelerator)

    cpu = SimpleNamespace(distributed_type=DistributedType.MULTI_CPU, num_processes=2, is_fsdp2=False,
                          multi_device=False)
    pc = ParallelismConfig(tp_size=2)
    with pytest.raises(ValueError, match="only compatible .* but got DistributedType.MULTI_CPU"):
        pc._validate_accelerator(cpu)  # accelerate as shipped
    compat.allow_cpu_tensor_parallel()
    compat.allow_cpu_tensor_parallel()  # idempotent: one wrapper
    assert getattr(ParallelismConfig._validate_accelerator, "_cleverthis", False)
    pc._validate_accelerator(cpu)
    with pytest.raises(ValueError, match=r"total_size \(2\) does not match num_processes \(4\)"):
        pc._validate_accelerator(SimpleNamespace(**{**vars(cpu), "num_processes": 4}))


def test_a_trainer_without_datasets_starts_no_dataset_manager():
    """lean_trainer leaves out Ray Data's DatasetsCallback (a DatasetManager actor per run) only when the trainer
    has no datasets; every other default callback stays (the real job: test_finetune lists the job's actors)."""
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback

    def loop(config):  # noqa: ANN001 - never run
        pass

    lean = compat.lean_trainer(TorchTrainer)
    assert issubclass(lean, TorchTrainer) and lean.__name__ == "TorchTrainer"
    plain = [type(c).__name__ for c in TorchTrainer(loop)._create_default_callbacks()]
    kept = [type(c).__name__ for c in lean(loop)._create_default_callbacks()]
    assert "DatasetsCallback" in plain and "PlacementGroupCleanerCallback" in plain
    assert kept == [n for n in plain if n != "DatasetsCallback"]
    # a job's own run leaves out the PlacementGroupCleaner too (its placement group ends with the job); a
    # sweep's trials keep it
    job_run = [type(c).__name__ for c in compat.lean_trainer(TorchTrainer, pg_cleaner=False)(loop)
               ._create_default_callbacks()]
    assert job_run == [n for n in plain if n not in ("DatasetsCallback", "PlacementGroupCleanerCallback")]
    import ray

    # A dataset factory (Ray's GenDataset allows a callable) is never called here, so no cluster starts: a
    # `ray.data.from_items` would ray.init() a second local cluster inside the unit run.
    with_data = lean(loop, datasets={"train": lambda: None})._create_default_callbacks()
    assert any(isinstance(c, DatasetsCallback) for c in with_data)
    assert not ray.is_initialized()


def _peft_warnings(model_dir: str, quiet: bool) -> list[str]:
    import warnings

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings(record=True) as seen:  # the filters come back as they were on exit
        warnings.simplefilter("always")
        if quiet:
            compat.quiet_peft_checkpointing_warning()
        get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir),
                       LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
        warnings.warn("another FutureWarning", FutureWarning, stacklevel=1)
    return [str(w.message) for w in seen if issubclass(w.category, FutureWarning)]


def test_only_peft_s_read_of_the_deprecated_checkpointing_name_is_quieted(tiny_model):
    """peft still reads `is_gradient_checkpointing` and transformers still warns in these words (else the filter is
    dead: remove it); with the filter that warning is gone and any other FutureWarning still shows."""
    loud = _peft_warnings(tiny_model, quiet=False)
    assert any(m.startswith(compat.PEFT_CHECKPOINTING_WARNING) for m in loud), loud
    assert _peft_warnings(tiny_model, quiet=True) == ["another FutureWarning"]
