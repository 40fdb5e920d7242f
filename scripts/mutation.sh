#!/usr/bin/env bash
# Mutation testing of the decision code with cosmic-ray: each module below is mutated one
# change at a time (in place, restored after each), the tests that cover it run against
# every mutant, and the mutants no test kills are listed. Not part of `./kw test` (a full run
# takes hours on two cores); docs/TESTING.md holds the latest scores and explains survivors.
#
#   scripts/mutation.sh                       every module below
#   scripts/mutation.sh analysis/verdict.py   the modules named
#   scripts/mutation.sh --quick [BASE]        the modules below this branch changed since BASE (main)
#   MUTATION_SAMPLE=N scripts/mutation.sh     a seeded random N mutants of each module (0: all)
#   scripts/mutation.sh --survivors           judge again the survivors of mutation/'s sessions
#                                             (after new tests; the modules must be unchanged)
#
# Results: mutation/<module>.sqlite (cosmic-ray sessions) and mutation/summary.md, a score
# per module and per package and each surviving mutant's diff. Needs the venv (./kw --help);
# installs cosmic-ray into it when missing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${KERNELWATCH_VENV:-$root/.venv}"
out="$root/mutation"

# Module -> the fast tests that cover it. The decision parts outside analysis/: correctness
# verdicts, sampling's stopping rule, throttle flagging, and what opens, closes and
# announces a regression.
declare -A TESTS=(
  [analysis/verdict.py]="tests/test_verdict.py"
  [analysis/changepoints.py]="tests/test_changepoints.py tests/test_history.py"
  [analysis/shift_test.py]="tests/test_shift_test.py tests/test_changepoints.py tests/test_history.py"
  [analysis/noise.py]="tests/test_noise.py tests/test_changepoints.py"
  [analysis/tail.py]="tests/test_tail.py tests/test_changepoints.py tests/test_suspicion.py"
  [analysis/record_changes.py]="tests/test_history.py"
  [analysis/static_diff.py]="tests/test_static_diff.py"
  [analysis/suspicion.py]="tests/test_suspicion.py"
  [analysis/grouping.py]="tests/test_grouping.py"
  [analysis/triage_rules.py]="tests/test_triage.py"
  [analysis/bisect_search.py]="tests/test_bisect.py"
  [analysis/thresholds.py]="tests/test_thresholds.py tests/test_config_reference.py"
  [analysis/trust.py]="tests/test_trust.py tests/test_selfcheck.py"
  [analysis/settling.py]="tests/test_settling.py tests/test_report.py"
  [harness/correctness.py]="tests/test_correctness.py"
  [harness/timing/sampling.py]="tests/test_sampling.py"
  [harness/timing/telemetry.py]="tests/test_telemetry.py"
  [flows/detection.py]="tests/test_detection_plan.py tests/test_regressions.py"
  [flows/notify.py]="tests/test_notify.py tests/test_alerts.py tests/test_security_secrets.py tests/test_flows_cli.py::test_notifications_reach_webhooks_and_slack tests/test_flows_cli.py::test_an_unreachable_target_is_reported_not_fatal"
)

# Mutants left out: every `|` here but two set unions in analysis/triage_rules.py is a type
# annotation, which `from __future__ import annotations` never evaluates, so its bitwise
# mutants cannot fail anything.
EXCLUDE='core/ReplaceBinaryOperator_BitOr_.*'

modules=()
survivors=0
if [[ "${1:-}" == "--survivors" ]]; then
  # After new tests: judge again only the mutants that survived the sessions in mutation/.
  survivors=1
  shift
  for session in "$out"/*.sqlite; do
    [[ -e "$session" ]] || break
    name="$(basename "$session" .sqlite)"
    for module in "${!TESTS[@]}"; do
      [[ "${module//\//.}" == "$name" ]] && modules+=("$module")
    done
  done
  if ((${#modules[@]} == 0)); then
    echo "mutation: no session in $out to re-run the survivors of" >&2
    exit 2
  fi
elif [[ "${1:-}" == "--quick" ]]; then
  base="${2:-main}"
  # What this branch changed since it left BASE (and is not committed yet), not what BASE
  # gained meanwhile.
  changed="$(git diff --name-only "$(git merge-base "$base" HEAD)" -- '*.py')"
  for module in "${!TESTS[@]}"; do
    grep -qx "$module" <<<"$changed" && modules+=("$module")
  done
  if ((${#modules[@]} == 0)); then
    echo "mutation: no mutated module differs from $base" >&2
    exit 0
  fi
elif (($#)); then
  for module in "$@"; do
    [[ -n "${TESTS[$module]:-}" ]] || {
      echo "mutation: $module has no tests listed in scripts/mutation.sh; add it to TESTS" >&2
      exit 2
    }
    modules+=("$module")
  done
else
  modules=("${!TESTS[@]}")
fi
mapfile -t modules < <(printf '%s\n' "${modules[@]}" | sort)

"$venv/bin/python" -c "import cosmic_ray, pytest_cov" 2>/dev/null ||
  "$venv/bin/pip" install -q cosmic-ray==8.7.0 pytest-cov==7.1.0
if ! git diff --quiet -- "${modules[@]}"; then
  echo "mutation: commit or stash your changes to ${modules[*]} first (mutants are applied in place)" >&2
  exit 2
fi
mkdir -p "$out"

# The store tests of every mutant share one PostgreSQL (tests/conftest.py's pg_server), left
# running for the whole run: starting one per mutant cost about 30 s of each.
pg_root="$(mktemp -d /tmp/kw-mut-pg.XXXXXX)"
pg() {
  "$venv/bin/python" -c 'import sys
from pathlib import Path
from kernelwatch.store.embedded import EmbeddedServer
server = EmbeddedServer(Path(sys.argv[1]))
server.ensure_running() if sys.argv[2] == "start" else server.stop(mode="immediate")' "$pg_root" "$1"
}
export KERNELWATCH_TEST_PG_ROOT="$pg_root"

# Each mutant's tests run in a fork of one warm interpreter (scripts/pytest_forkserver.py):
# a fresh one per mutant spends most of its time importing torch.
socket="$out/forkserver.$$.sock"
"$venv/bin/python" "$root/scripts/pytest_forkserver.py" serve "$socket" &
server=$!
trap 'kill "$server" 2>/dev/null; pg stop; rm -rf "$pg_root"; git checkout -- "${modules[@]}"' EXIT
pg start
for _ in $(seq 100); do [[ -S "$socket" ]] && break; sleep 0.2; done
[[ -S "$socket" ]] || { echo "mutation: the pytest fork server did not start" >&2; exit 2; }
warm=("$venv/bin/python" "$root/scripts/pytest_forkserver.py" run "$socket")

for module in "${modules[@]}"; do
  name="${module//\//.}"
  session="$out/$name.sqlite"
  config="$out/$name.toml"
  tests="${TESTS[$module]}"
  # A mutant that hangs counts as killed; the limit is three times the unmutated run.
  start=$(date +%s)
  "${warm[@]}" -- -x -q -pno:cacheprovider $tests || {
    echo "mutation: $tests fail on the unmutated $module; fix them first" >&2
    exit 2
  }
  baseline=$(($(date +%s) - start))
  # Each mutant runs only the tests that execute the statement it changes.
  coverage="$out/$name.coverage.json"
  "$venv/bin/python" "$root/scripts/mutation_coverage.py" map "$module" "$coverage" -- $tests
  cat >"$config" <<EOF
[cosmic-ray]
module-path = "$module"
timeout = $((3 * baseline + 20))
excluded-modules = []
test-command = "${warm[*]} --timeout $((3 * baseline + 10)) --select $coverage -- -x -q -pno:cacheprovider $tests"

[cosmic-ray.distributor]
name = "local"

[cosmic-ray.filters.operators-filter]
exclude-operators = ["$EXCLUDE"]
EOF
  if ((survivors)); then
    "$venv/bin/python" -c 'import sqlite3, sys
with sqlite3.connect(sys.argv[1]) as db:
    db.execute("DELETE FROM work_results WHERE test_outcome = ?", ("SURVIVED",))' "$session"
  else
    rm -f "$session"
    "$venv/bin/cosmic-ray" init "$config" "$session"
    "$venv/bin/cr-filter-operators" "$session" "$config"
    "$venv/bin/python" "$root/scripts/mutation_sample.py" "$session" "${MUTATION_SAMPLE:-0}"
  fi
  echo "mutation: $module against $tests" >&2
  "$venv/bin/cosmic-ray" exec "$config" "$session"
  git checkout -- "$module"  # cosmic-ray restores each file; this is belt and braces
done

"$venv/bin/python" "$root/scripts/mutation_report.py" "$out" "$EXCLUDE" --json "$out/mutation.json" \
  >"$out/summary.md"
cat "$out/summary.md"
