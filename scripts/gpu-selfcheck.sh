#!/usr/bin/env bash
# The GPU self-check: one prepared command for a machine with an NVIDIA GPU and no network
# (the device tool's H200). That image brings python3 with torch, Triton, typer, rich and
# nvidia-ml-py, so kernelwatch is installed without dependencies and without an index.
# Writes to $OUT (default out/gpu-selfcheck); copy what comes back to docs/gpu/.
#
# Stages, all by default, or name some: check-smoke selfcheck bench-smoke check-llm (and
# comm-smoke, named only: the communication suite, which needs two GPUs or more). The
# device tool allows 10 minutes a command, and all four can take longer on a cold machine
# (check-llm compiles every autotune config): run `selfcheck bench-smoke` and
# `check-smoke check-llm` as two calls when time is short.
set -uo pipefail
stages="${*:-check-smoke selfcheck bench-smoke check-llm}"
want() { [[ " $stages " == *" $1 "* ]]; }
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
if want check-smoke; then
  timeout 180 kernelwatch check --workload smoke --json >"$out/check-smoke.jsonl" 2>"$out/check-smoke.log"
  echo "check-smoke: exit $? ($(wc -l <"$out/check-smoke.jsonl") cases)"
  tail -1 "$out/check-smoke.log"
fi
# The timing harness next to do_bench and torch.utils.benchmark, A/A noise, ceilings
# (docs/TIMING.md); under 5 minutes on one H200. Writes $out/selfcheck.md.
if want selfcheck; then
  timeout 330 kernelwatch selfcheck --out "$out" 2>"$out/selfcheck.log"
  echo "selfcheck: exit $?"
  tail -3 "$out/selfcheck.log"
  cat "$out/selfcheck.md" 2>/dev/null
fi
# Every timing path on tiny shapes: events/cold with ceilings, then CUDA graphs.
if want bench-smoke; then
  timeout 150 kernelwatch bench --workload smoke --json --measure-ceilings \
    >"$out/bench-smoke.jsonl" 2>"$out/bench-smoke.log"
  echo "bench-smoke: exit $? ($(wc -l <"$out/bench-smoke.jsonl") cases)"
  tail -2 "$out/bench-smoke.log"
  timeout 90 kernelwatch bench --workload smoke --dtype bf16 --timer cuda-graph --json \
    >"$out/bench-smoke-graph.jsonl" 2>"$out/bench-smoke-graph.log"
  echo "bench-smoke (cuda-graph): exit $? ($(wc -l <"$out/bench-smoke-graph.jsonl") cases)"
  tail -1 "$out/bench-smoke-graph.log"
fi
# Realistic LLM shapes, autotuned: the first run on a GPU also compiles every config.
if want check-llm; then
  timeout 360 kernelwatch check --workload llm --json >"$out/check-llm.jsonl" 2>"$out/check-llm.log"
  echo "check-llm: exit $? ($(wc -l <"$out/check-llm.jsonl") cases)"
  tail -1 "$out/check-llm.log"
fi
# The communication suite on this node's GPUs (NCCL, the one-shot all-reduce over symmetric
# memory): cases needing more GPUs than the node has are reported unsupported.
if want comm-smoke; then
  timeout 240 kernelwatch check --suite kernelwatch.kernels.collectives --workload smoke --json \
    >"$out/comm-check.jsonl" 2>"$out/comm-check.log"
  echo "comm-smoke check: exit $? ($(wc -l <"$out/comm-check.jsonl") cases)"
  timeout 240 kernelwatch bench --suite kernelwatch.kernels.collectives --workload smoke --json \
    >"$out/comm-bench.jsonl" 2>"$out/comm-bench.log"
  echo "comm-smoke bench: exit $? ($(wc -l <"$out/comm-bench.jsonl") cases)"
  tail -2 "$out/comm-bench.log"
fi
