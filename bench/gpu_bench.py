"""GPU figures for a ~1B-parameter Llama-shaped model (built from a config): LoRA bf16 tokens/s and MFU,
packed vs padded, QLoRA 4-bit, DeepSpeed ZeRO-2 (1 GPU), peak memory. Called by bench/gpu.sh."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import torch

PEAK_BF16_FLOPS = 989e12  # H100/H200 SXM dense bf16, datasheet
SEQ, BATCH, STEPS, WARMUP = 1024, 8, 30, 5


def build(quant: str | None = None):
    from transformers import BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=4096)
    torch.manual_seed(0)
    if quant is None:
        return LlamaForCausalLM(cfg).to(torch.bfloat16).cuda(), cfg
    tmp = Path("/tmp/gpu-bench-1b")
    if not (tmp / "config.json").exists():
        LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(tmp)
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
    return LlamaForCausalLM.from_pretrained(tmp, quantization_config=bnb, device_map={"": 0}), cfg


def lora(model, kbit: bool = False):
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if kbit:
        model = prepare_model_for_kbit_training(model)
    return get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj",
                                                                               "o_proj"], task_type="CAUSAL_LM"))


def batches(packed: bool):
    rng = random.Random(0)
    lengths = [min(SEQ, int(rng.paretovariate(1.2) * 64)) for _ in range(BATCH * (STEPS + WARMUP) * 3)]
    if packed:  # rows of SEQ tokens, position_ids restart per example
        rows, cur, pos = [], [], []
        for n in lengths:
            if len(cur) + n > SEQ:
                rows.append((cur, pos))
                cur, pos = [], []
            cur += [rng.randrange(32000) for _ in range(n)]
            pos += list(range(n))
        for i in range(0, len(rows) - BATCH, BATCH):
            chunk = rows[i:i + BATCH]
            w = max(len(c) for c, _ in chunk)
            ids = torch.tensor([c + [0] * (w - len(c)) for c, _ in chunk]).cuda()
            p = torch.tensor([q + list(range(w - len(q))) for _, q in chunk]).cuda()
            yield {"input_ids": ids, "position_ids": p, "labels": ids}, sum(len(c) for c, _ in chunk)
    else:
        for i in range(0, len(lengths) - BATCH, BATCH):
            chunk = lengths[i:i + BATCH]
            w = max(chunk)
            ids = torch.tensor([[rng.randrange(32000) for _ in range(n)] + [0] * (w - n) for n in chunk]).cuda()
            mask = torch.tensor([[1] * n + [0] * (w - n) for n in chunk]).cuda()
            yield {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}, sum(chunk)


def run(model, packed: bool, params: float, engine=None) -> dict:
    opt = None if engine else torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    torch.cuda.reset_peak_memory_stats()
    tokens, t0 = 0, None
    for step, (batch, real) in enumerate(batches(packed)):
        if step == WARMUP:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        out = (engine or model)(**batch, use_cache=False)
        if engine:
            engine.backward(out.loss)
            engine.step()
        else:
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if step >= WARMUP:
            tokens += real
        if step == WARMUP + STEPS - 1:
            break
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tps = tokens / dt
    # LoRA: forward + backward through the frozen base ~ 6 * params FLOPs per token (2 fwd + 4 bwd)
    return {"tokens_per_s": round(tps), "mfu": round(6 * params * tps / PEAK_BF16_FLOPS, 4),
            "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2)}


def main(out_path: str) -> None:
    results: dict = {"gpu": torch.cuda.get_device_name(0)}
    model, _ = build()
    params = float(sum(p.numel() for p in model.parameters()))
    results["params"] = params
    model = lora(model)
    results["lora_bf16_padded"] = run(model, packed=False, params=params)
    results["lora_bf16_packed"] = run(model, packed=True, params=params)
    del model
    torch.cuda.empty_cache()
    try:
        qmodel, _ = build("4bit")
        results["qlora_4bit_packed"] = run(lora(qmodel, kbit=True), packed=True, params=params)
        del qmodel
    except Exception as e:  # bitsandbytes missing on the image
        results["qlora_4bit_packed"] = {"error": str(e)[:300]}
    torch.cuda.empty_cache()
    try:
        import deepspeed

        m, _ = build()
        m = lora(m)
        ds_cfg = {"train_micro_batch_size_per_gpu": BATCH, "bf16": {"enabled": True},
                  "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
        engine, *_ = deepspeed.initialize(model=m, model_parameters=[p for p in m.parameters() if p.requires_grad],
                                          config=ds_cfg)
        results["deepspeed_zero2_lora_packed"] = run(m, packed=True, params=params, engine=engine)
    except Exception as e:
        results["deepspeed_zero2_lora_packed"] = {"error": str(e)[:300]}
    results["goal_mfu_lora"] = 0.35
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results/gpu.json")
