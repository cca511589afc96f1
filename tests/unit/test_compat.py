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
                            timeout=datetime.timedelta(seconds=60))
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
    assert hasattr(importlib.import_module(module), name), f"{module}.{name} is gone: revisit compat.py"


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
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    line = next(ln for ln in outs[0][0].splitlines() if ln.startswith("LISTEN"))
    return ast.literal_eval(line.split(" ", 1)[1])


def test_rank_zero_store_listens_on_master_addr_only(tmp_path):
    assert _store_listens_on(True, tmp_path) == ["127.0.0.1"]
    # what the patch is for: unpatched, the store takes every interface
    assert _store_listens_on(False, tmp_path) in (["::"], ["0.0.0.0"])
