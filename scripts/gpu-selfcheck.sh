#!/usr/bin/env bash
# The GPU self-check: one prepared command for a machine with an NVIDIA GPU and no network
# (the device tool's H200). That image brings python3 with torch, Triton, typer, rich and
# nvidia-ml-py, so kernelwatch is installed without dependencies and without an index.
# Writes to $OUT (default out/gpu-selfcheck); copy what comes back to docs/gpu/.
set -uo pipefail
out="${OUT:-out/gpu-selfcheck}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1

if ! python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$out/install.log" 2>&1; then
  tail -20 "$out/install.log"
  exit 1
fi
{
  nvidia-smi
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} >"$out/env.txt" 2>&1

# Every kernel, every dtype (bf16 included: on a GPU nothing is unsupported), tiny shapes.
timeout 180 kernelwatch check --workload smoke --json >"$out/check-smoke.jsonl" 2>"$out/check-smoke.log"
echo "smoke: exit $? ($(wc -l <"$out/check-smoke.jsonl") cases)"
tail -1 "$out/check-smoke.log"
# Realistic LLM shapes, autotuned: the first run on a GPU also compiles every config.
timeout 360 kernelwatch check --workload llm --json >"$out/check-llm.jsonl" 2>"$out/check-llm.log"
echo "llm: exit $? ($(wc -l <"$out/check-llm.jsonl") cases)"
tail -1 "$out/check-llm.log"
