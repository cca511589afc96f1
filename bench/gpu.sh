#!/usr/bin/env bash
# One prepared GPU benchmark for a lent NVIDIA H100/H200 (run through the device tool; no network there), in about
# 5 minutes: bf16 LoRA and QLoRA 4-bit on a ~1B Llama built from its config (tokens/s, MFU, GPU utilisation, peak
# memory beside the runtime's plan) and a DDP-vs-one-process loss parity check.
# It runs under the machine image's python3 and packages ($PYTHON to choose another); bitsandbytes wheels, if the
# image lacks them, are carried as wheels in bench/wheels/ (pip download them here first: see docs/performance.md).
# Writes $OUT/gpu.json (or bench/results/gpu.json) and prints the figures.
#   bench/gpu.sh --dry-run   the same path with a tiny model on CPU in seconds ($OUT/gpu-dry.json, or a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$PWD:$PWD/runtime${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [[ "${1:-}" == "--dry-run" ]]; then
  exec "$PYTHON" bench/gpu_bench.py --dry-run "${OUT:-$(mktemp -d)}/gpu-dry.json"
fi
if compgen -G "bench/wheels/*.whl" >/dev/null; then
  "$PYTHON" -m pip install --no-index --find-links bench/wheels bench/wheels/*.whl -q || true
fi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv || true
# 8 minutes at most: a hung step or collective ends the run instead of the machine's time
timeout 480 "$PYTHON" bench/gpu_bench.py "${OUT:-bench/results}/gpu.json"
