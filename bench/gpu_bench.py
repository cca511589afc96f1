"""GPU figures for a ~1B-parameter Llama-shaped model built from its config (no download): bf16 LoRA (padded and
packed rows) and QLoRA 4-bit, each with tokens/s, MFU, GPU utilisation and the peak memory beside the runtime's plan
(memory.per_worker), then a DDP-vs-one-process loss parity check. Called by bench/gpu.sh.

`--dry-run` (bench/gpu.sh --dry-run) takes the same path with a tiny model on CPU in seconds: MFU against the CPU's
measured matmul rate, the parity check over gloo, no NVML. tests/unit/test_bench_dry.py runs it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))

from cleverthis_runtime import memory  # noqa: E402
from cleverthis_runtime.spec import TrainingConfig  # noqa: E402

DRY = "--dry-run" in sys.argv
DEVICE = "cpu" if DRY else "cuda"
PEAK_BF16_FLOPS = 989e12  # H100/H200 SXM dense bf16, datasheet
SEQ, BATCH, STEPS, WARMUP = (64, 2, 2, 1) if DRY else (1024, 8, 30, 5)
VOCAB = 512 if DRY else 32000
DTYPE = torch.float32 if DRY else torch.bfloat16  # bf16 matmuls on a 2-core CPU would take minutes
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def config():
    from transformers import LlamaConfig

    if DRY:
        return LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)
    return LlamaConfig(vocab_size=VOCAB, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                       num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=4096)


def build(quant: str | None = None):
    """The model on the bench's device: in bf16 (fp32 on the dry run), or loaded 4-bit through bitsandbytes from a
    saved copy (how the runtime loads QLoRA's base)."""
    from transformers import BitsAndBytesConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if quant is None:
        return LlamaForCausalLM(config()).to(DTYPE).to(DEVICE)
    tmp = Path(tempfile.gettempdir()) / ("bench-tiny" if DRY else "gpu-bench-1b")
    if not (tmp / "config.json").exists():
        LlamaForCausalLM(config()).to(DTYPE).save_pretrained(tmp)
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=DTYPE)
    return LlamaForCausalLM.from_pretrained(tmp, quantization_config=bnb, dtype=DTYPE, device_map={"": DEVICE})


def lora(model, kbit: bool = False):
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if kbit:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    return get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS, task_type="CAUSAL_LM"))


def batches(packed: bool, seed: int = 0):
    """Long-tailed example lengths: padded batches (attention mask, padding labelled -100), or packed rows of SEQ
    tokens whose position_ids restart per example."""
    rng = random.Random(seed)
    lengths = [max(8, min(SEQ, int(rng.paretovariate(1.2) * SEQ // 16))) for _ in range(BATCH * (STEPS + WARMUP) * 8)]
    if packed:
        rows, cur, pos = [], [], []
        for n in lengths:
            if len(cur) + n > SEQ:
                rows.append((cur, pos))
                cur, pos = [], []
            cur += [rng.randrange(VOCAB) for _ in range(n)]
            pos += list(range(n))
        for i in range(0, len(rows) - BATCH, BATCH):
            chunk = rows[i:i + BATCH]
            w = max(len(c) for c, _ in chunk)
            ids = torch.tensor([c + [0] * (w - len(c)) for c, _ in chunk]).to(DEVICE)
            p = torch.tensor([q + list(range(w - len(q))) for _, q in chunk]).to(DEVICE)
            yield {"input_ids": ids, "position_ids": p, "labels": ids}, sum(len(c) for c, _ in chunk)
    else:
        for i in range(0, len(lengths) - BATCH, BATCH):
            chunk = lengths[i:i + BATCH]
            w = max(chunk)
            ids = torch.tensor([[rng.randrange(VOCAB) for _ in range(n)] + [0] * (w - n) for n in chunk]).to(DEVICE)
            mask = torch.tensor([[1] * n + [0] * (w - n) for n in chunk]).to(DEVICE)
            yield {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}, sum(chunk)


class GpuUtil:
    """NVML's GPU utilisation sampled every 0.2 s while the timed steps run (None without NVML or a GPU)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.handle = None
        if not DRY:
            try:
                import pynvml

                pynvml.nvmlInit()
                self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            except Exception:  # noqa: BLE001 - the figure is left out
                self.handle = None

    def __enter__(self) -> GpuUtil:
        if self.handle is not None:
            threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            self.samples.append(float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu))

    def __exit__(self, *exc) -> None:
        self.stop.set()

    def mean(self) -> float | None:
        return round(sum(self.samples) / len(self.samples), 1) if self.samples else None


def planned(model, method: str, weights: str) -> dict[str, float]:
    """The runtime's per-worker estimate for this model and batch (memory.per_worker)."""
    tc = TrainingConfig(method=method, quantization="4bit" if method == "qlora" else None, max_seq_length=SEQ,
                        target_modules=TARGETS, lora_r=16)
    params = float(sum(p.numel() * (2 if type(p).__name__ == "Params4bit" else 1) for p in model.parameters()))
    return memory.per_worker(params=params, method=method, weights=weights, precision="no" if DRY else "bf16",
                             optim="adamw_torch", gradient_checkpointing=False, on_gpu=not DRY,
                             work=memory.workload(model, tc, BATCH), attention="sdpa")


def run(model, packed: bool, params: float, flops: float, plan: dict[str, float]) -> dict:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    sync = torch.cuda.synchronize if not DRY else (lambda: None)
    if not DRY:
        torch.cuda.reset_peak_memory_stats()
    tokens, t0 = 0, None
    with GpuUtil() as util:
        for step, (batch, real) in enumerate(batches(packed)):
            if step == WARMUP:
                sync()
                t0 = time.perf_counter()
            out = model(**batch, use_cache=False)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step >= WARMUP:
                tokens += real
            if step == WARMUP + STEPS - 1:
                break
        sync()
    dt = time.perf_counter() - t0
    tps = tokens / dt
    peak = memory.peak(torch)
    # LoRA: forward + backward through the frozen base ~ 6 x params FLOPs per token (2 forward, 4 backward)
    return {"tokens_per_s": round(tps, 1), "mfu": round(6 * params * tps / flops, 4), "gpu_util_percent": util.mean(),
            "peak_mem_gb": round(peak["peak_bytes"] / 1e9, 3), "planned_mem_gb": plan["total"], "plan": plan,
            "planned_over_peak": round(plan["total"] / (peak["peak_bytes"] / 1e9), 3)}


def _parity_worker(rank: int, world: int, port: int, out: str) -> None:
    """One rank of the DDP run: half the global batch each, gradients averaged by DDP."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    gpus = torch.cuda.device_count() if not DRY else 0
    backend = "nccl" if gpus >= world else "gloo"  # one GPU: both ranks on it, over gloo
    dist.init_process_group(backend, rank=rank, world_size=world)
    device = torch.device(f"cuda:{rank % gpus}") if gpus else torch.device("cpu")
    if gpus:
        torch.cuda.set_device(device)
    model = _parity_model().to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if gpus else None)
    losses = _parity_steps(ddp, device, rank, world)
    if rank == 0:
        Path(out).write_text(json.dumps(losses))
    dist.barrier()
    dist.destroy_process_group()


def _parity_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)
    return LlamaForCausalLM(cfg)


def _parity_steps(model, device, rank: int, world: int, steps: int = 5) -> list[float]:
    """fp32 (TF32 off), full rows of equal length: the mean loss of the global batch equals the mean of the ranks'
    losses, so the per-step global losses must agree."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    per_rank, losses = 4 // world, []
    for _ in range(steps):
        ids = torch.randint(0, 512, (4, 64), generator=g)
        mine = ids[rank * per_rank:(rank + 1) * per_rank].to(device)
        loss = model(input_ids=mine, labels=mine, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if world > 1:
            import torch.distributed as dist

            total = loss.detach().clone()
            dist.all_reduce(total)
            losses.append(float(total) / world)
        else:
            losses.append(float(loss.detach()))
    return losses


def parity() -> dict:
    """The same 5 steps on one process (global batch 4) and DDP over 2 processes (2 each): per-step losses."""
    import socket

    import torch.multiprocessing as mp

    device = torch.device("cuda:0" if not DRY else "cpu")
    single = _parity_steps(_parity_model().to(device), device, 0, 1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = Path(tempfile.mkdtemp(prefix="bench-parity-")) / "ddp.json"
    mp.spawn(_parity_worker, args=(2, port, str(out)), nprocs=2, join=True)
    ddp = json.loads(out.read_text())
    diff = max(abs(a - b) for a, b in zip(single, ddp, strict=True))
    return {"single": [round(x, 6) for x in single], "ddp_2": [round(x, 6) for x in ddp],
            "max_abs_diff": diff, "ok": diff < 1e-3}


def main(out_path: str) -> dict:
    t_start = time.perf_counter()
    if DRY:
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        from cleverthis_runtime.monitoring import _matmul_flops

        flops, flops_source = _matmul_flops(torch, torch.device("cpu")), "measured fp32 matmul rate of this CPU"
    else:
        flops, flops_source = PEAK_BF16_FLOPS, "H100/H200 SXM dense bf16 datasheet"
    results: dict = {"device": torch.cuda.get_device_name(0) if not DRY else "cpu (dry run)", "dry_run": DRY,
                     "peak_flops": flops, "peak_flops_source": flops_source, "seq": SEQ, "batch": BATCH,
                     "steps": STEPS}
    model = build()
    params = float(sum(p.numel() for p in model.parameters()))
    results["params"] = params
    model = lora(model)
    plan = planned(model, "lora", "bf16" if not DRY else "fp32")
    results["lora_bf16_padded"] = run(model, packed=False, params=params, flops=flops, plan=plan)
    results["lora_bf16_packed"] = run(model, packed=True, params=params, flops=flops, plan=plan)
    del model
    if not DRY:
        torch.cuda.empty_cache()
    try:
        qmodel = lora(build("4bit"), kbit=True)
        results["qlora_4bit_packed"] = run(qmodel, packed=True, params=params, flops=flops,
                                           plan=planned(qmodel, "qlora", "4bit"))
        del qmodel
    except Exception as e:  # bitsandbytes missing on the image: the rest still reports
        results["qlora_4bit_packed"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    if not DRY:
        torch.cuda.empty_cache()
    results["ddp_parity"] = parity()
    results["goal_mfu_lora"] = 0.35
    results["seconds"] = round(time.perf_counter() - t_start, 1)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--dry-run"]
    main(args[0] if args else "bench/results/gpu.json")
