#!/usr/bin/env bash
# Check that `kernelwatch build --arch sm_90a` compiles the built-in suite under each Triton
# version kernelwatch supports, each in a throwaway virtual environment of its own:
#   torch==2.13.0 (the CPU build; a build records launches on the meta device and compiles
#   with Triton's bundled ptxas, so no CUDA torch or GPU is needed), triton==VERSION, and what
#   the GPU hosts' image brings beside them (numpy, scipy, typer, rich, nvidia-ml-py, jinja2),
#   then kernelwatch's wheel, without dependencies, built from this working tree.
# Every build is compiled (no kernelwatch cache, an empty Triton cache), with the same workers.
# Writes a summary per version (builds, ok / error, per family, the reasons of the errors,
# wall time) and how the versions' builds compare, to docs/results/triton_versions.json.
# Usage: scripts/triton_versions.sh [VERSION...]   (default: 3.6.0 3.9.0)
# Environment: KERNELWATCH_PYTHON (default python3.11: the CPU torch wheel is for 3.11),
# KERNELWATCH_TORCH (default torch==2.13.0), KERNELWATCH_BUILD_WORKERS (default 2),
# KERNELWATCH_RESULTS (default docs/results/triton_versions.json), KERNELWATCH_BUILD_ARGS (more
# arguments for kernelwatch build, e.g. "-k softmax" for a quick try; the committed result has none).
# Exit 1 when any build of any version failed (the summary is written all the same).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${KERNELWATCH_PYTHON:-python3.11}"
torch_spec="${KERNELWATCH_TORCH:-torch==2.13.0}"
workers="${KERNELWATCH_BUILD_WORKERS:-2}"
results="${KERNELWATCH_RESULTS:-$root/docs/results/triton_versions.json}"
read -ra extra <<<"${KERNELWATCH_BUILD_ARGS:-}"
versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || versions=(3.6.0 3.9.0)
command -v "$python" >/dev/null || { echo "triton_versions: $python not found; set KERNELWATCH_PYTHON" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The wheel is built from a copy of the files git tracks or would track (as scripts/gpu-wheels.sh
# does): what is tested is this working tree, not whatever setuptools' build/ folder keeps.
mkdir -p "$work/tree" "$work/wheel"
git -C "$root" ls-files -z -co --exclude-standard | tar -C "$root" --null --ignore-failed-read -T - -cf - 2>/dev/null \
  | tar -C "$work/tree" -xf -
if ! "$python" -m pip wheel -q --no-deps -w "$work/wheel" "$work/tree" >"$work/wheel.log" 2>&1; then
  tail -20 "$work/wheel.log" >&2
  exit 1
fi
wheel="$(ls "$work"/wheel/kernelwatch-*.whl)"

for version in "${versions[@]}"; do
  venv="$work/venv-$version"
  echo "triton_versions: Triton $version: setting up a virtual environment" >&2
  "$python" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install -q "$torch_spec" "triton==$version" numpy scipy typer rich \
    nvidia-ml-py jinja2 >"$work/pip-$version.log" 2>&1 \
    || ! "$venv/bin/python" -m pip install -q --no-deps "$wheel" >>"$work/pip-$version.log" 2>&1; then
    grep -v "is ignored" "$work/pip-$version.log" | tail -20 >&2
    exit 1
  fi
  echo "triton_versions: Triton $version: kernelwatch build --arch sm_90a (--workers $workers)" >&2
  mkdir -p "$work/run-$version"
  start="$(date +%s.%N)"
  # From an empty folder, so the suite is the built-in one whatever kernelwatch.toml is near.
  set +e
  (cd "$work/run-$version" && KERNELWATCH_BUILD_CACHE="$work/cache-$version" \
    TRITON_CACHE_DIR="$work/triton-cache-$version" \
    "$venv/bin/kernelwatch" build --arch sm_90a --no-cache --json --workers "$workers" "${extra[@]}" \
    >"$work/builds-$version.jsonl" 2>"$work/build-$version.log")
  code=$?
  set -e
  end="$(date +%s.%N)"
  tail -1 "$work/build-$version.log" >&2
  "$venv/bin/python" - "$work/builds-$version.jsonl" "$code" "$start" "$end" "$workers" "${extra[*]}" \
    >"$work/summary-$version.json" <<'PY'
import json
import os
import platform
import sys
from collections import Counter, defaultdict
from importlib import metadata

path, code, start, end, workers, extra = sys.argv[1:]
records = [json.loads(line) for line in open(path) if line.strip()]
families: dict[str, Counter] = defaultdict(Counter)
for r in records:
    families[r["family"] or "(none)"][r["status"]] += 1
status = Counter(r["status"] for r in records)
toolchains = sorted({json.dumps(r["toolchain"], sort_keys=True) for r in records if r["toolchain"]})
errors = Counter(f'{r["kernel"]}: {r["reason"]}' for r in records if r["status"] != "ok")
print(json.dumps({
    "triton": metadata.version("triton"),
    "torch": metadata.version("torch"),
    "python": platform.python_version(),
    "toolchains": [json.loads(t) for t in toolchains],
    "command": f"kernelwatch build --arch sm_90a --no-cache --json --workers {workers} {extra}".strip(),
    "exit_code": int(code),
    "builds": len(records),
    "ok": status["ok"],
    "error": len(records) - status["ok"],
    "families": {f: {"builds": sum(c.values()), "ok": c["ok"]} for f, c in sorted(families.items())},
    "errors": dict(errors.most_common(20)),
    "wall_s": round(float(end) - float(start), 1),
    "workers": int(workers),
    "cpus": os.cpu_count(),
    "records": [
        {k: r[k] for k in ("kernel", "function", "dtype", "config", "case", "status",
                           "registers", "tensor_core", "instructions", "global_load_bits",
                           "spill_store_bytes", "spill_load_bytes")}
        for r in records
    ],
}))
PY
done

"$python" - "$results" "$work" "${versions[@]}" <<'PY'
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

out, work, *versions = sys.argv[1:]
runs = [json.loads(Path(work, f"summary-{v}.json").read_text()) for v in versions]


def keyed(run: dict) -> dict:
    """The ok builds of a run by what they build. One kernel may launch one function twice
    with the same config and case label (fused MoE's gate/up and down GEMMs), so the n-th
    of those is matched with the n-th: the plan is the same list in every version."""
    seen: Counter = Counter()
    found = {}
    for r in run["records"]:
        key = json.dumps([r[k] for k in ("kernel", "function", "dtype", "config", "case")])
        if r["status"] == "ok":
            found[key, seen[key]] = r
        seen[key] += 1
    return found


def compare(a: dict, b: dict) -> dict:
    """How two versions' ok builds of the same specialisation differ (second minus first)."""
    left, right = keyed(a), keyed(b)
    both = sorted(left.keys() & right.keys())
    numbers = {}
    for field in ("registers", "instructions", "global_load_bits") if both else ():
        deltas = sorted((right[k][field] or 0) - (left[k][field] or 0) for k in both)
        numbers[field] = {
            "same": deltas.count(0),
            "min_delta": deltas[0],
            "median_delta": statistics.median(deltas),
            "max_delta": deltas[-1],
        }
    moves = Counter(f"{left[k]['tensor_core']} -> {right[k]['tensor_core']}" for k in both)
    spill = ("spill_store_bytes", "spill_load_bytes")
    return {
        "versions": [a["triton"], b["triton"]],
        "ok_in_both": len(both),
        "only_first": len(left.keys() - right.keys()),
        "only_second": len(right.keys() - left.keys()),
        "tensor_core": dict(sorted(moves.items())),
        "spilling_builds": [
            sum(any(run[k][f] for f in spill) for k in both) for run in (left, right)
        ],
        **numbers,
    }


comparisons = [compare(a, b) for i, a in enumerate(runs) for b in runs[i + 1 :]]
for run in runs:
    del run["records"]
summary = {
    "what": "kernelwatch build --arch sm_90a over the built-in suite, one fresh venv per "
    "Triton version (scripts/triton_versions.sh)",
    "runs": runs,
    "comparisons": comparisons,
}
# No machine paths in the committed file: a reason that names a file names it inside the venv.
text = json.dumps(summary, indent=2) + "\n"
Path(out).write_text(text.replace(work, "<work>"))
for run in runs:
    print(
        f"Triton {run['triton']}: {run['builds']} builds, {run['ok']} ok, {run['error']} error, "
        f"{run['wall_s']} s ({run['workers']} workers)"
    )
for c in comparisons:
    fields = ("registers", "instructions", "global_load_bits")
    same = ", ".join(f"{f} {c[f]['same']}" for f in fields if f in c)
    print(
        f"{c['versions'][0]} vs {c['versions'][1]}: {c['ok_in_both']} ok in both; the same "
        f"{same}; tensor cores {c['tensor_core']}"
    )
if any(run["error"] or run["exit_code"] for run in runs):
    sys.exit(1)
PY
