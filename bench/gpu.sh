#!/usr/bin/env bash
# One prepared GPU benchmark for a lent NVIDIA H200 (run through the device tool; no network there).
# It runs under the machine image's python3 and packages; bitsandbytes/deepspeed wheels, if the image lacks
# them, are carried as wheels in bench/wheels/ (pip download them here first: see README, Performance).
# Writes $OUT/gpu.json (or bench/results/gpu.json) and prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."
if compgen -G "bench/wheels/*.whl" >/dev/null; then pip install --no-index --find-links bench/wheels bench/wheels/*.whl -q || true; fi
export PYTHONPATH="$PWD:$PWD/runtime${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv || true
python3 bench/gpu_bench.py "${OUT:-bench/results}/gpu.json"
