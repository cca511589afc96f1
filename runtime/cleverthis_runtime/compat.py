"""Where this runtime leans on a private name of Ray or torch: each patch says why it exists and which versions
it was read in, and tests/unit/test_compat.py fails loudly when a patched name changes.

- **The rendezvous store listens only on the address it is given.** Ray Train's torch backend sets MASTER_ADDR
  to rank 0's node address and calls `init_process_group("env://")`; torch's `_create_c10d_store` then starts
  the TCPStore server, which binds every interface (`::`), whatever MASTER_ADDR says. On the managed `local`
  cluster that is the one socket of a job open beyond loopback (an unauthenticated key-value store). Rank 0
  binds the socket itself, on MASTER_ADDR, and hands it to the store (`master_listen_fd`, public since torch
  2.4). Read in torch 2.13 (`torch/distributed/rendezvous.py`) and Ray 2.60 (`ray/train/torch/config.py`).
"""

from __future__ import annotations

import importlib
import socket
from typing import Any

#: The private names patched or subclassed here, checked by the test: (module, attribute).
PATCHED = (
    ("torch.distributed.rendezvous", "_create_c10d_store"),
    ("torch.distributed.rendezvous", "_torchelastic_use_agent_store"),
    ("ray.train.torch.config", "_TorchBackend"),
)


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=1024)


def bind_store_to_master_addr() -> None:
    """In a worker process: rank 0's TCPStore listens on MASTER_ADDR only. Idempotent."""
    # `import torch.distributed.rendezvous as ...` would give the function torch.distributed.rendezvous
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    original = rdzv._create_c10d_store
    if getattr(original, "_cleverthis", False):
        return

    def create_store(hostname: str, port: int, rank: int, world_size: int, timeout: Any,
                     use_libuv: bool = True) -> Any:
        if rank != 0 or rdzv._torchelastic_use_agent_store() or not 0 < port < 2**16:
            return original(hostname, port, rank, world_size, timeout, use_libuv)
        sock = _listening_socket(hostname, port)
        return rdzv.TCPStore(host_name=hostname, port=port, world_size=world_size, is_master=True,
                             timeout=timeout, multi_tenant=True, master_listen_fd=sock.detach(),
                             use_libuv=use_libuv)

    create_store._cleverthis = True  # type: ignore[attr-defined]
    rdzv._create_c10d_store = create_store


def torch_config(**kwargs: Any) -> Any:
    """Ray Train's `TorchConfig`, whose backend installs `bind_store_to_master_addr` on every worker before
    Ray sets up the process group (`TorchTrainer(torch_config=...)`)."""
    from ray.train.torch import TorchConfig
    from ray.train.torch.config import _TorchBackend

    class Backend(_TorchBackend):
        def on_start(self, worker_group: Any, backend_config: Any) -> None:
            worker_group.execute(bind_store_to_master_addr)
            super().on_start(worker_group, backend_config)

    class Config(TorchConfig):
        @property
        def backend_cls(self) -> type:
            return Backend

    return Config(**kwargs)
