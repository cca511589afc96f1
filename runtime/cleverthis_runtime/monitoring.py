"""What a torch worker reports beside its events: the main figures as Ray metrics (rank 0), and each worker's
resource use (`utilisation` events)."""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from . import events

log = logging.getLogger(__name__)


class RayMetrics:
    """The main figures as Ray metrics (`ray.util.metrics` gauges tagged with the job name), so the Ray
    dashboard's metrics view and the nodes' Prometheus export show them: `ray_cleverthis_train_loss`,
    `..._learning_rate`, `..._tokens_per_s`, `..._step`, `..._epoch`. Set by rank 0 at most once per
    `interval_s` (an epoch end forces it); never lets a metrics failure reach training."""

    FIGURES = {
        "loss": "Training loss (latest logged step)",
        "learning_rate": "Learning rate",
        "tokens_per_s": "Training throughput in (non-padding) tokens per second",
        "step": "Global optimizer step",
        "epoch": "Epoch progress (fractional)",
    }

    def __init__(self, job: str, interval_s: float = 1.0) -> None:
        self.job, self.interval_s = job, interval_s
        self.gauges: dict[str, Any] | None = None
        self.last = float("-inf")
        self.failed = False

    def _make(self) -> dict[str, Any]:
        from ray.util.metrics import Gauge

        return {k: Gauge(f"cleverthis_train_{k}", description=d, tag_keys=("job",)) for k, d in self.FIGURES.items()}

    def publish(self, *, force: bool = False, now: float | None = None, **values: float | None) -> bool:
        now = time.monotonic() if now is None else now
        if self.failed or (not force and now - self.last < self.interval_s):
            return False
        try:
            if self.gauges is None:
                import ray

                if not ray.is_initialized():  # run() outside Ray (tests): nothing to export to
                    self.failed = True
                    return False
                self.gauges = self._make()
            for key, value in values.items():
                if value is not None and key in self.gauges:
                    self.gauges[key].set(float(value), tags={"job": self.job})
        except Exception as e:  # noqa: BLE001 - metrics are best effort
            self.failed = True
            log.warning("Ray metrics disabled: %s", e)
            return False
        self.last = now
        return True


class Utilisation:
    """Per-worker `utilisation` events (every worker, not only rank 0): CPU % and RSS of the worker process
    (psutil), and on CUDA the GPU's utilisation and memory through NVML (pynvml, when installed) or torch."""

    def __init__(self, rank: int, torch: Any, interval_s: float = 10.0) -> None:
        import psutil

        self.rank, self.torch, self.interval_s = rank, torch, interval_s
        self.proc = psutil.Process()
        self.proc.cpu_percent(None)  # the first call only starts the measurement
        self.last = time.monotonic()
        self.nvml: Any = None
        if torch.cuda.is_available():
            try:
                import pynvml

                pynvml.nvmlInit()
                self.nvml = pynvml
            except Exception:  # noqa: BLE001 - no NVML: torch's own figures only
                self.nvml = None

    def maybe_emit(self, *, force: bool = False, **extra: Any) -> dict[str, Any] | None:
        now = time.monotonic()
        if not force and now - self.last < self.interval_s:
            return None
        self.last = now
        return events.emit("utilisation", **self.sample(), **extra)

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": self.rank, "hostname": socket.gethostname(), "pid": os.getpid()}
        try:
            out["cpu_percent"] = round(self.proc.cpu_percent(None), 1)
            out["rss_bytes"] = int(self.proc.memory_info().rss)
        except Exception:  # noqa: BLE001
            pass
        torch = self.torch
        if torch.cuda.is_available():
            try:
                dev = torch.cuda.current_device()
                out["gpu_index"] = dev
                out["gpu_memory_allocated_bytes"] = int(torch.cuda.memory_allocated(dev))
                free, total = torch.cuda.mem_get_info(dev)
                out["gpu_memory_used_bytes"], out["gpu_memory_total_bytes"] = int(total - free), int(total)
                if self.nvml is not None:
                    handle = self._nvml_handle(dev)
                    out["gpu_util_percent"] = float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                    mem = self.nvml.nvmlDeviceGetMemoryInfo(handle)
                    out["gpu_memory_used_bytes"], out["gpu_memory_total_bytes"] = int(mem.used), int(mem.total)
            except Exception as e:  # noqa: BLE001 - a figure missing is better than a failed job
                out["gpu_error"] = f"{type(e).__name__}: {e}"[:200]
        return out

    def _nvml_handle(self, dev: int) -> Any:
        """NVML counts physical GPUs; CUDA counts the visible ones (CUDA_VISIBLE_DEVICES, set by Ray)."""
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        if dev < len(visible):
            v = visible[dev]
            if v.startswith(("GPU-", "MIG-")):
                return self.nvml.nvmlDeviceGetHandleByUUID(v)
            if v.isdigit():
                return self.nvml.nvmlDeviceGetHandleByIndex(int(v))
        return self.nvml.nvmlDeviceGetHandleByIndex(dev)


# What a training step reaches of the device's own matrix-multiply rate when it is well fed (a fair MFU against
# the measured rate, not the datasheet's): the plan's expected tokens/s, which the service's hint compares with.
EXPECTED_SHARE = 0.4


def _matmul_flops(torch: Any, device: Any) -> float:
    """FLOP/s of one square matrix multiply on `device`, in the dtype training uses there (bf16 or fp16 on a
    GPU, fp32 on CPU), with the threads training has; about 0.2 s."""
    gpu = getattr(device, "type", "cpu") == "cuda"
    n = 4096 if gpu else 1024
    dtype = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if gpu else torch.float32
    # constant operands: drawing random ones would move the seeded RNG, and so the training's dropout and data order
    a = torch.full((n, n), 0.5, device=device, dtype=dtype)
    b = torch.full((n, n), 0.25, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    a @ b
    sync()
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.2:
        a @ b
        reps += 1
    sync()
    return 2.0 * n**3 * reps / (time.perf_counter() - t0)


def expected_speed(model: Any, args: Any, world: int, torch: Any) -> dict[str, float]:
    """The tokens/s the plan expects: each worker at EXPECTED_SHARE of its measured matmul rate, over the
    model's FLOPs per token: 2N forward, 2N backward through the activations, 2 per trainable weight for its
    gradients, and 2N more when gradient checkpointing recomputes the forward (N: the weights, a 4-bit weight
    counted once however it is packed)."""
    if model is None:
        return {}
    total = trainable = 0
    for p in model.parameters():
        n = getattr(p, "ds_numel", None) or p.numel()  # (ZeRO-3 keeps a shard: ds_numel is the whole)
        n *= 2 if type(p).__name__ == "Params4bit" else 1  # two 4-bit weights per stored byte
        total += n
        trainable += n if p.requires_grad else 0
    per_token = 4.0 * total + 2.0 * trainable + (2.0 * total if getattr(args, "gradient_checkpointing", False) else 0)
    per_token *= getattr(model, "pp", 1)  # a pipeline stage holds about 1/pp of the weights (pipeline.py)
    flops = _matmul_flops(torch, next(model.parameters()).device)
    return {"device_flops": round(flops), "flops_per_token": per_token,
            "expected_tokens_per_s": round(world * EXPECTED_SHARE * flops / per_token, 1)}


class StepTiming:
    """Where a step's time goes: `data_s`, from one step's end to the next one's begin (the Trainer fetches the
    batch there, and also logs, evaluates and saves: the service reads the median over many steps, which the
    occasional evaluation or checkpoint does not move), and `compute_s`, from a step's begin to its end (forward,
    backward, optimizer), averaged over the steps since the last `step` event. The first step's wait (set-up) is
    not counted."""

    def __init__(self) -> None:
        self._ended: float | None = None
        self._began = 0.0
        self._data = self._compute = 0.0
        self._n = 0

    def begin(self) -> None:
        self._began = time.perf_counter()
        if self._ended is not None:
            self._data += self._began - self._ended

    def end(self) -> None:
        self._ended = time.perf_counter()
        self._compute += self._ended - self._began
        self._n += 1

    def take(self) -> dict[str, float]:
        if not self._n:
            return {}
        out = {"data_s": round(self._data / self._n, 4), "compute_s": round(self._compute / self._n, 4)}
        self._data = self._compute = 0.0
        self._n = 0
        return out
