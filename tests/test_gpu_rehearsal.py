"""The GPU self-check rehearsed the way the GPU host runs it: ``scripts/gpu-selfcheck.sh`` from a
checkout holding only the script and the wheels ``scripts/gpu-wheels.sh`` built, under a Python
that has only the host image's packages (no store, Prefect or Grafana), as root, through the
real sandbox, with a simulated H200 in the sandboxed children (``tests/gpusim/``).

What the GPU host has that this cannot give: its Python 3.12 (the image venv here is this
venv's Python, whose compiled packages it borrows), a GPU, ncu.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from kernelwatch.analysis.trust import QUESTIONS

ROOT = Path(__file__).resolve().parent.parent
GPUSIM = ROOT / "tests" / "gpusim"
SCRIPT = ROOT / "scripts" / "gpu-selfcheck.sh"
#: What the GPU host's image brings for kernelwatch (scripts/gpu-wheels.sh).
IMAGE = ("torch", "triton", "numpy", "scipy", "typer", "rich", "nvidia-ml-py", "jinja2",
         "markupsafe")  # fmt: skip
#: Import names of the packages only the platform's own machines have (docs/ARCHITECTURE.md).
NOT_ON_THE_HOST = ("psycopg", "prefect", "alembic", "pgserver", "grafana_foundation_sdk",
                   "grafana_client")  # fmt: skip
#: The device tool returns at most this many files from $OUT.
RETURNED_FILES = 8
STATUSES = ("PASS", "FAIL", "INCOMPLETE")

pytestmark = pytest.mark.timeout(900)


def distributions(names: tuple[str, ...]) -> dict[str, metadata.Distribution]:
    """``names`` and everything they require at run time (no extras), from this venv."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in found:
            continue
        dist = found[key] = metadata.distribution(name)
        for line in dist.requires or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def _link(source: Path, target: Path) -> None:
    """``target`` holding ``source``'s files as hard links, where both are on one filesystem:
    the sandbox user then reads them through the folder the jail exposes (a symlink would
    lead it into this venv, which a private clone's 0700 parent hides); else a symlink."""
    try:
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, copy_function=os.link)
        else:
            os.link(source, target)
    except OSError:
        shutil.rmtree(target, ignore_errors=True)
        target.symlink_to(source)


def image_venv(root: Path) -> Path:
    """A fresh venv whose only packages are :data:`IMAGE` and their dependencies: symlinks to
    this venv's copies in one folder, which a ``.pth`` line puts on its path. Returns its
    ``bin``."""
    deps = root / "deps"
    deps.mkdir(parents=True)
    site = Path(sysconfig.get_paths()["purelib"])
    for dist in distributions(IMAGE).values():
        if dist.files is None:
            raise RuntimeError(f"{dist.name} has no RECORD: reinstall it with pip")
        for top in {f.parts[0] for f in dist.files} - {"..", "__pycache__"}:
            _link(site / top, deps / top)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # A path line: the folder's own .pth files (setuptools') are not processed.
    (Path(purelib) / "gpu-image.pth").write_text(f"{deps}\n")
    return venv / "bin"


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return image_venv(tmp_path_factory.mktemp("image"))


def host_env(image: Path, **extra: str) -> dict[str, str]:
    """This environment with the image venv's ``python3`` first and no Python of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    return {**env, "PATH": f"{image}:{env['PATH']}", **extra}


def test_the_image_venv_has_the_hosts_packages_and_none_of_the_platforms(image):
    probe = (
        "import importlib.util, sys\n"
        "import torch, triton, numpy, scipy, typer, rich, pynvml, jinja2, markupsafe\n"
        "print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n)))\n"
    )
    names = [*NOT_ON_THE_HOST, "kernelwatch"]
    found = subprocess.run(
        ["python3", "-c", probe, *names],
        env=host_env(image),
        capture_output=True,
        text=True,
        cwd=image,
    )
    assert found.returncode == 0, found.stderr
    # kernelwatch too comes from the wheel the script unpacks, never from this checkout.
    assert found.stdout.split() == []


def test_the_simulation_stays_out_of_every_process_but_the_runner():
    """The self-check's parent must not import torch: the simulated GPU is installed only in
    a kernel child, which the jail's command line names too (as the command it executes)."""
    spec = importlib.util.spec_from_file_location("gpusim_site", GPUSIM / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    gpusim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpusim)
    runner = [sys.executable, "-m", "kernelwatch.harness.isolation.kernel_child"]
    assert gpusim.is_runner(runner)
    assert gpusim.is_runner(
        [sys.executable, "-m", "kernelwatch.harness.isolation.preload", runner[-1], "5"]
    )
    assert not gpusim.is_runner(
        [sys.executable, "-m", "kernelwatch.harness.isolation.jail", "{}", "--", *runner]
    )
    parent = subprocess.run(
        [sys.executable, "-c", "import sys, kernelwatch.harness.selfcheck.stages\n"
         "print(sorted({'torch', 'fakegpu', 'pynvml'} & set(sys.modules)))"],
        env={**os.environ, "PYTHONPATH": str(GPUSIM)},
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert parent.returncode == 0, parent.stderr
    assert parent.stdout.strip() == "[]"


AS_ROOT = "the GPU host runs the self-check as root (sandbox user, namespaces): run this as root"


@pytest.mark.skipif(os.geteuid() != 0, reason=AS_ROOT)
def test_the_self_check_runs_from_the_wheel_on_the_hosts_image(image, gpu_wheels, tmp_path):
    checkout = tmp_path / "checkout"
    for path in ("scripts/gpu-selfcheck.sh", "tests/fakegpu.py", "tests/gpusim/sitecustomize.py"):
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, checkout / path)
    shutil.copytree(gpu_wheels, checkout / "wheels")  # scripts/gpu-wheels.sh's, as the host gets
    limit = int(re.search(r"^limit=(\d+)$", SCRIPT.read_text(), re.MULTILINE).group(1))
    out = tmp_path / "out"
    env = host_env(image, OUT=str(out), PYTHONPATH=str(checkout / "tests" / "gpusim"))
    began = time.monotonic()
    run = subprocess.run(
        ["bash", "scripts/gpu-selfcheck.sh"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=limit + 60,
    )
    took_s = time.monotonic() - began
    stages = [line.strip() for line in run.stdout.splitlines() if line.startswith("  - ")]
    print(f"\ngpu rehearsal: self-check {took_s:.0f} s of {limit} s, "
          f"exit {run.returncode}: " + "; ".join(stages))  # fmt: skip
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stdout + run.stderr, run.stderr[-3000:]
    # The children believed in the simulated H200: CUDA events, not the CPU's perf counter.
    assert "# kernelwatch GPU self-check: NVIDIA H200" in run.stdout
    assert "our method: cuda-events" in run.stdout
    for key, question in QUESTIONS:
        row = re.search(rf"^\| {re.escape(question)} \| \*\*(\w+)\*\* \|", run.stdout, re.MULTILINE)
        assert row is not None, f"no line for {question!r} in the summary:\n{run.stdout}"
        # ncu is not on this machine: its question alone may not apply.
        allowed = (*STATUSES, "SKIPPED") if key == "ncu" else STATUSES
        assert row.group(1) in allowed, row.group(0)
    # The traced decode step went through the real child, profiler tool and trace reader:
    # every kernel the simulated H200 launched is in its trace under its own name.
    assert re.search(r"^\| A traced decode step read as a serving trace \| \*\*PASS\*\* \|",
                     run.stdout, re.MULTILINE), run.stdout[-3000:]  # fmt: skip
    assert "## Traced decode step" in run.stdout
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert len(files) <= RETURNED_FILES, files
    assert took_s < limit
