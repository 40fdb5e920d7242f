"""Adding a built-in kernel touches the kernel's module and the suite tuple only: a throwaway
kernel built into a copy of ``kernels/`` passes the built-in suite's checks, passes its smoke
workload through ``kernelwatch check`` on the interpreter, and reaches the dashboards' kernel
picker in the family its spec declares, with no other file edited."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import psycopg
import pytest
from factories import measurement, run, run_info
from pg_roles import as_role
from test_builtin_suite import (
    check_has_a_family,
    check_llm_workload_spans_decode_to_long_prefill,
    check_smoke_workload_covers_edge_shapes,
    check_spec_is_complete,
)

from kernelwatch.dashboards import catalog
from kernelwatch.harness.records import CorrectnessResult
from kernelwatch.harness.suite import SuiteRef, import_suite
from kernelwatch.store.ingest import Ingester

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
PACKAGE = "kwcopy"
REPOSITORY = "github.com/example/kwcopy"

# The whole change a newcomer makes: this module, and its line in the suite tuple.
SCALE_ROWS = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl

    from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig


    @triton.jit
    def scale_rows_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        for start in range(0, cols, BLOCK):
            mask = start + offs < cols
            x = tl.load(x_ptr + row * cols + start + offs, mask=mask).to(tl.float32)
            tl.store(out_ptr + row * cols + start + offs,
                     (2.0 * x).to(out_ptr.dtype.element_ty), mask=mask)


    def launch(inputs, outputs, params, config):
        rows, cols = int(params["rows"]), int(params["cols"])
        scale_rows_kernel[(rows,)](inputs["x"], outputs["out"], cols, BLOCK=64)
        return LaunchConfig({"BLOCK": 64}, num_warps=4, num_stages=1)


    SCALE_ROWS = KernelSpec(
        name="scale_rows",
        summary="out = 2x, row by row",
        family="pointwise",
        make_inputs=lambda p, dtype, dev, gen: {
            "x": torch.randn(int(p["rows"]), int(p["cols"]), generator=gen).to(dev, dtype)
        },
        make_outputs=lambda t, p: {"out": torch.empty_like(t["x"])},
        launch=launch,
        reference=lambda t, p: {"out": 2.0 * t["x"]},
        baseline=Baseline("torch.mul", lambda t, p: {"out": torch.mul(t["x"], 2.0)}),
        workloads={
            "smoke": ({"rows": 1, "cols": 1}, {"rows": 3, "cols": 100}),
            "llm": ({"rows": 1, "cols": 4096}, {"rows": 8192, "cols": 4096}),
        },
        flops=lambda p: int(p["rows"]) * int(p["cols"]),
        min_bytes=lambda p, e: 2 * e * int(p["rows"]) * int(p["cols"]),
    )
    """
)


@pytest.fixture(scope="module")
def suite_copy(tmp_path_factory) -> Path:
    """A checkout holding ``kernels/`` copied as the package ``kwcopy``, with the throwaway
    kernel's module added and listed in its ``SUITE``."""
    root = tmp_path_factory.mktemp("suite-copy")
    package = root / PACKAGE
    shutil.copytree(KERNELS, package, ignore=shutil.ignore_patterns("__pycache__"))
    for module in package.rglob("*.py"):
        text = module.read_text()
        module.write_text(text.replace("kernelwatch.kernels", PACKAGE))
    (package / "scale_rows.py").write_text(SCALE_ROWS)
    init = package / "__init__.py"
    text, added = re.subn(r"(\n    kernels=\(\n(?:        \w+,\n)+)", r"\1        SCALE_ROWS,\n",
                          init.read_text())  # fmt: skip
    assert added == 1, "kernels/__init__.py no longer lists SUITE's kernels one a line"
    init.write_text(f"from {PACKAGE}.scale_rows import SCALE_ROWS\n{text}")
    return root


@pytest.fixture(scope="module")
def copied(suite_copy):
    return import_suite(SuiteRef(PACKAGE, str(suite_copy))).suite


def test_the_copy_lists_the_throwaway_kernel_in_the_family_its_spec_declares(copied):
    assert copied.names[-1] == "scale_rows"
    assert copied.kernel("scale_rows").family == "pointwise"


@pytest.mark.parametrize(
    "check",
    [
        check_spec_is_complete,
        check_smoke_workload_covers_edge_shapes,
        check_llm_workload_spans_decode_to_long_prefill,
        check_has_a_family,
    ],
)
def test_the_builtin_suite_checks_pass_on_the_copy(copied, check):
    for spec in copied.kernels:
        check(spec)


def test_no_dashboard_names_a_kernel(copied):
    """The dashboards read families from the store, so no kernel's name is in them and a new
    kernel changes none of the committed dashboard files."""
    text = json.dumps(catalog.dashboards())
    assert [name for name in copied.names if re.search(rf"\b{name}\b", text)] == []


def test_check_passes_and_the_picker_shows_the_spec_family(kernelwatch_cli, suite_copy, store_url):
    proc = kernelwatch_cli(
        "check", "--suite", PACKAGE, "--repo", str(suite_copy), "-k", "scale_rows",
        "--workload", "smoke", "--dtype", "fp32", "--json", cwd=suite_copy,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    checks = [CorrectnessResult.from_json(json.loads(line)) for line in proc.stdout.splitlines()]
    assert {c.verdict for c in checks} == {"pass"} and len(checks) == 2
    assert {c.case.family for c in checks} == {"pointwise"}
    info = run_info(repository=REPOSITORY, suite=checks[0].case.suite)
    with psycopg.connect(store_url) as conn:
        Ingester(conn).ingest(run([*checks, *(measurement(case=c.case) for c in checks)], info))
    (picker,) = [
        v["query"]
        for d in catalog.dashboards()
        if d["uid"] == "kw-history"
        for v in d["templating"]["list"]
        if v["name"] == "kernel"
    ]
    reader = as_role(store_url, "kernelwatch_reader")
    with psycopg.connect(reader) as conn:
        rows = conn.execute(picker.replace("$repository", REPOSITORY)).fetchall()
    assert rows == [("pointwise / scale_rows", "scale_rows")]
