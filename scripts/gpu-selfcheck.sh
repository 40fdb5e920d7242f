#!/usr/bin/env bash
# The GPU self-check in one command, on a GPU host with the pool's image (Python 3.12, torch,
# Triton, nvidia-ml-py, typer, rich, numpy, scipy) and no network. It runs kernelwatch from the
# wheel scripts/gpu-wheels.sh prepared in wheels/ (unpacked into a temporary folder, so the
# host's Python is left as it was), with the CUDA C++ kernels' prebuilt cubins for a host
# without nvcc, then `kernelwatch selfcheck`, all within 480 s (docs/TIMING.md's budget table;
# a rerun still fits the device tool's 15-minute lease): the self-check's own deadline is what
# is left after the set-up, and `timeout` kills whatever outlives it.
#
# The report goes to docs/gpu/<gpu>-<date>/ ($OUT/<gpu>-<date>/ when $OUT is set, as on the
# device tool): selfcheck.json (every stage's data and finding) and summary.md, rewritten as
# each stage finishes; summary.md is printed last, so the command's output tail carries it.
# Exit status: the self-check's (0 every question passed, 1 not settled, 2 bad input), 124
# when the hard limit hit (137 when it then had to be killed). Extra arguments go to
# `kernelwatch selfcheck`.
set -uo pipefail
limit=480
cd "$(dirname "${BASH_SOURCE[0]}")/.."
wheels=(wheels/kernelwatch-*.whl)
if [[ ! -f "${wheels[0]}" ]]; then
  echo "gpu-selfcheck: no wheels/kernelwatch-*.whl; run scripts/gpu-wheels.sh first" >&2
  exit 2
fi
site="$(mktemp -d)"
trap 'rm -rf "$site"' EXIT
# mktemp makes it 0700 and root's: the sandboxed children run as another user and must
# import kernelwatch from it too.
chmod 0755 "$site"
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "${wheels[0]}" "$site" || exit 1
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KERNELWATCH_CUBIN_DIR="$PWD/wheels/cubins"
# The sandboxed children cannot run the setuid helper that creates /dev/nvidia-uvm on first
# use (no_new_privs): create the device nodes here, as root, where the helper exists.
if command -v nvidia-modprobe >/dev/null 2>&1; then
  nvidia-modprobe -u -c=0 >/dev/null 2>&1 || true
fi
out="${OUT:-docs/gpu}"
left=$((limit - SECONDS))
timeout -k 5 $((left - 5)) python3 -m kernelwatch.cli selfcheck --out "$out" \
  --deadline $((left - 30)) "$@"
code=$?
summary="$(ls -td "$out"/*/ 2>/dev/null | head -1)summary.md"
[[ -f "$summary" ]] && cat "$summary"
exit "$code"
