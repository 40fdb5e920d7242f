"""What ships is what is tested: the wheel, built exactly as ``scripts/gpu-wheels.sh`` builds
it, installed without dependencies into a fresh virtual environment, imports every module of
the tree from there. The dependencies come from this venv's site-packages as a plain path,
so its editable finder (which would hide a package missing from the wheel) never runs."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "wheel_imports.py"

pytestmark = pytest.mark.timeout(600)


def build_wheel(root: Path, out: Path) -> Path:
    """The wheel of the tree at ``root``, built by ``root``'s own scripts/gpu-wheels.sh (which
    also runs the import check on its Python 3.12 install)."""
    env = {**os.environ, "KERNELWATCH_WHEELS": str(out), "KERNELWATCH_PYTHON": sys.executable}
    built = subprocess.run(
        ["bash", str(root / "scripts" / "gpu-wheels.sh")], env=env, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = out.glob("kernelwatch-*.whl")
    return wheel


def fresh_venv(wheel: Path, venv: Path) -> Path:
    """A new venv holding only the wheel; returns its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # A path line, not an import line: the test venv's own .pth files (the editable finder
    # among them) are not processed for a directory added this way.
    (site / "test-venv-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    subprocess.run([*pip, "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True)
    return site


def imports_from_wheel(wheels: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    """The import check from the wheel in ``wheels`` (what ``build_wheel`` left)."""
    (wheel,) = wheels.glob("kernelwatch-*.whl")
    site = fresh_venv(wheel, tmp / "venv")
    return subprocess.run(
        [str(tmp / "venv" / "bin" / "python"), str(SCRIPT), str(site), str(ROOT)],
        capture_output=True,
        text=True,
        cwd=tmp,
    )


def test_every_module_of_the_tree_imports_from_the_built_wheel(gpu_wheels, tmp_path):
    result = imports_from_wheel(gpu_wheels, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "modules import from" in result.stdout
    # The wheel's venv holds no optional extra: the CuTe DSL kernels are named, not failed.
    assert (
        "not imported, an optional extra is missing: "
        "kernelwatch.kernels.cute_dsl.silu_and_mul (kernelwatch[cute])"
    ) in result.stdout
    cli = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "python"), "-m", "kernelwatch.cli", "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert cli.returncode == 0, cli.stderr
    assert "selfcheck" in cli.stdout
    # data files ship too: every reporting view's definition, which `db upgrade` applies
    views = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "python"), "-c",
         "from kernelwatch.store import migrate; print(len(migrate.definitions()))"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert views.stdout.strip() == str(len(list((ROOT / "store" / "views").glob("*.sql"))))


def test_a_package_left_out_of_the_wheel_is_named(tmp_path):
    """The check itself: a tree module the installed copy lacks is reported, not skipped."""
    site = tmp_path / "site"
    (site / "kernelwatch" / "harness").mkdir(parents=True)
    (site / "kernelwatch" / "harness" / "__init__.py").write_text("")
    tree = tmp_path / "tree"
    (tree / "harness" / "distributed").mkdir(parents=True)
    (tree / "harness" / "__init__.py").write_text("")
    (tree / "harness" / "distributed" / "__init__.py").write_text("")
    (tree / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"kernelwatch.harness" = "harness"\n'
    )
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(site), str(tree)], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "kernelwatch.harness.distributed: not in the installed copy" in result.stderr


def test_no_tracked_file_is_ignored():
    """An ignore rule that matches a source folder (``build/`` once matched ``harness/build/``)
    hides new files from ``git add`` and every file from ruff, which respects .gitignore."""
    ignored = subprocess.run(
        ["git", "ls-files", "-ci", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert ignored == []
    probe = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", "harness/build/new_module.py"], cwd=ROOT
    )
    assert probe.returncode == 1, "a new file under harness/build/ would be ignored"


def test_the_self_check_script_unpacks_the_wheel_where_the_sandbox_user_can_read_it(tmp_path):
    """gpu-selfcheck.sh unpacks the wheel into a mktemp folder (0700, root's); the sandboxed
    children, another user, import kernelwatch from there. A stand-in ``python3`` records
    what the self-check command would have been started with."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "wheels").mkdir()
    (checkout / "scripts" / "gpu-selfcheck.sh").write_text(
        (ROOT / "scripts" / "gpu-selfcheck.sh").read_text()
    )
    with zipfile.ZipFile(checkout / "wheels" / "kernelwatch-0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("kernelwatch/__init__.py", "")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    probe = tmp_path / "probe"
    (bin_dir / "python3").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-m" ]; then\n'
        f'  site="${{PYTHONPATH%%:*}}"\n'
        f'  echo "$(stat -c %a "$site") $KERNELWATCH_CUBIN_DIR" > {probe}\n'
        f"  exit 0\n"
        f"fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        ["bash", "scripts/gpu-selfcheck.sh"], cwd=checkout, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    mode, cubins = probe.read_text().split()
    assert mode == "755"
    assert cubins == str(checkout / "wheels" / "cubins")
