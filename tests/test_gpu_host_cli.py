"""The command line on a GPU host's image: no psycopg, Prefect, Alembic, pgserver or Grafana
packages. ``check``, ``bench`` and ``selfcheck`` must start and run there; only the commands
that use the store, the flows or Grafana need them, and import them when they run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

#: What the GPU hosts' image lacks (issue 16).
ABSENT_ON_GPU_HOSTS = (
    "psycopg",
    "prefect",
    "alembic",
    "pgserver",
    "grafana_foundation_sdk",
    "grafana_client",
)

BLOCKER = textwrap.dedent(
    f"""
    import sys

    BLOCKED = {ABSENT_ON_GPU_HOSTS!r}


    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
            return None


    sys.meta_path.insert(0, Blocker())
    """
)


@pytest.fixture(scope="module")
def blocked_env(tmp_path_factory) -> dict[str, str]:
    """An environment whose Python processes (the kernel child included: it inherits
    ``PYTHONPATH``) cannot import what the GPU hosts' image lacks."""
    site = tmp_path_factory.mktemp("blocked-site")
    (site / "sitecustomize.py").write_text(BLOCKER)
    return {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "200"}


@pytest.fixture(scope="module")
def gpu_image_cli(blocked_env):
    """Run the real console script as it would run on a GPU host."""
    exe = Path(sys.executable).with_name("kernelwatch")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(exe), *args], capture_output=True, text=True, env=blocked_env, timeout=300
        )

    return run


def test_the_blocker_blocks(blocked_env):
    probe = subprocess.run(
        [sys.executable, "-c", "import psycopg.rows"],
        capture_output=True,
        text=True,
        env=blocked_env,
    )
    assert probe.returncode != 0 and "blocked" in probe.stderr


def test_the_entry_point_starts_and_lists_every_command(gpu_image_cli):
    proc = gpu_image_cli("--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("check", "bench", "selfcheck", "db", "nightly", "dashboards"):
        assert command in proc.stdout
    assert gpu_image_cli("selfcheck", "--help").returncode == 0


def test_a_command_that_needs_the_store_says_so_in_one_line(gpu_image_cli):
    proc = gpu_image_cli("db", "status")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "needs psycopg, which is not installed here" in proc.stderr


def test_check_and_bench_run_without_the_store_prefect_or_grafana(gpu_image_cli):
    selection = ("-k", "rms_norm", "--dtype", "fp32", "--json")
    check = gpu_image_cli("check", *selection)
    assert check.returncode == 0, check.stderr
    verdicts = [json.loads(line)["verdict"] for line in check.stdout.splitlines()]
    assert verdicts and set(verdicts) == {"pass"}
    bench = gpu_image_cli("bench", *selection, "--no-baseline", "--budget", "0.05")
    assert bench.returncode == 0, bench.stderr
    statuses = [json.loads(line)["status"] for line in bench.stdout.splitlines()]
    assert statuses and set(statuses) == {"ok"}


HANGING_SUITE = textwrap.dedent(
    """
    import time

    import torch

    from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Suite


    def spec(name, hangs):
        def launch(t, o, p, cfg):
            if hangs:
                time.sleep(3600)
            o["y"].copy_(2.0 * t["x"])
            return LaunchConfig({}, 1, 1)

        return KernelSpec(
            name=name,
            summary="y = 2 x",
            make_inputs=lambda p, dtype, dev, gen: {
                "x": torch.randn(8, generator=gen, device=dev).to(dtype)
            },
            make_outputs=lambda t, p: {"y": torch.empty_like(t["x"])},
            launch=launch,
            reference=lambda t, p: {"y": 2.0 * t["x"]},
            baseline=Baseline("torch.mul", lambda t, p: {"y": 2.0 * t["x"]}),
            workloads={"smoke": ({"n": 8},)},
            flops=lambda p: 8,
            min_bytes=lambda p, e: 16 * e,
            dtypes=("fp32",),
        )


    SUITE = Suite("stopper", (spec("quick", False), spec("hangs", True)))
    """
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (the kernel child and whatever sandbox wraps it)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


@pytest.mark.parametrize("command", ["check", "bench"])
def test_sigterm_ends_the_runner_child_and_keeps_what_was_measured(command, tmp_path):
    """``timeout`` sends SIGTERM to the command, not to the kernel child, which leads its
    own process group: the command must end it, and the case measured before stays on
    stdout."""
    suite = tmp_path / "stopper_suite.py"
    suite.write_text(HANGING_SUITE)
    out, err = tmp_path / "out.jsonl", tmp_path / "err.txt"
    exe = Path(sys.executable).with_name("kernelwatch")
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [str(exe), command, "--suite", str(suite), "--json", "--timeout", "600"],
            stdout=stdout,
            stderr=stderr,
        )
    try:
        # The quick case's record is out once the hanging case has begun.
        for _ in range(2400):
            if out.read_text():
                break
            assert proc.poll() is None, err.read_text()
            time.sleep(0.05)
        children = _descendants(proc.pid)
        assert children and all(_alive(pid) for pid in children)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    for _ in range(100):
        if not any(_alive(pid) for pid in children):
            break
        time.sleep(0.05)
    survivors = [pid for pid in children if _alive(pid)]
    for pid in survivors:  # do not leave them sleeping on the machine
        os.kill(pid, signal.SIGKILL)
    assert not survivors, "the kernel child outlived the command"
    assert proc.returncode == 128 + signal.SIGTERM, err.read_text()
    assert "Traceback" not in err.read_text()
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["case"]["kernel"] for r in kept] == ["quick"]
