#!/usr/bin/env bash
# Prepare, here (network, nvcc), what the GPU self-check needs on a GPU host that has neither,
# in wheels/ (gitignored; it travels with the working tree):
#   wheels/kernelwatch-*.whl   kernelwatch itself, without dependencies: the GPU hosts' image
#                              brings torch, Triton, numpy, scipy, typer, rich and
#                              nvidia-ml-py, which is all that check, bench and selfcheck import
#   wheels/cubins/             the CUDA C++ kernels built with nvcc for sm_90a and sm_100a, with
#                              the build stage's flags, for a host without nvcc
# Then checks that the wheel installs offline for Python 3.12 (the hosts' Python).
# Usage: scripts/gpu-wheels.sh   (then, on the GPU host: scripts/gpu-selfcheck.sh)
# KERNELWATCH_WHEELS names another output folder (the wheel test builds into its own).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${KERNELWATCH_PYTHON:-$root/.venv/bin/python}"
out="${KERNELWATCH_WHEELS:-$root/wheels}"
rm -rf "$out"
mkdir -p "$out/cubins"
check="$(mktemp -d)" tree="$(mktemp -d)"
trap 'rm -rf "$check" "$tree"' EXIT

# Built from a copy of the files git tracks or would track: setuptools' build/ folder in the
# checkout keeps modules that were deleted since, and they would ship again.
git -C "$root" ls-files -z -co --exclude-standard | tar -C "$root" --null --ignore-failed-read -T - -cf - 2>/dev/null \
  | tar -C "$tree" -xf -
if ! "$python" -m pip wheel -q --no-deps --no-build-isolation -w "$out" "$tree" \
  >"$out/build.log" 2>&1; then
  tail -20 "$out/build.log" >&2
  exit 1
fi
rm "$out/build.log"
"$python" - "$root" "$out/cubins" <<'PY'
import sys
from pathlib import Path

from kernelwatch.harness.cuda_kernel import prebuild_cubins

root, out = Path(sys.argv[1]), Path(sys.argv[2])
for path in prebuild_cubins(sorted((root / "kernels" / "cuda").glob("*.cu")), ("sm_90a", "sm_100a"), out):
    print(f"gpu-wheels: cubins/{path.name}")
PY

# The hosts run Python 3.12: install the wheel for it, offline, and read it back.
"$python" -m pip install -q --no-index --no-deps --only-binary=:all: --python-version 3.12 \
  --target "$check" "$out"/kernelwatch-*.whl
[[ -f "$check/kernelwatch/kernels/cuda/silu_and_mul.cu" ]] \
  || { echo "gpu-wheels: the wheel lacks the CUDA C++ sources" >&2; exit 1; }
# Every module of the tree imports from the installed copy (not from this checkout's editable
# install): a package left out of the wheel fails here, not on the GPU host.
PYTHONPATH="$check" "$python" "$root/scripts/wheel_imports.py" "$check" "$root"
for py312 in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 \
  /usr/local/bin/python3.12; do
  if [[ -x "$py312" ]] && "$py312" --version >/dev/null 2>&1; then
    "$py312" -m compileall -q "$check/kernelwatch" >/dev/null
    echo "gpu-wheels: the wheel compiles under $("$py312" --version)"
    break
  fi
done
du -sh "$out" | sed 's/^/gpu-wheels: /'
