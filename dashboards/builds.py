"""Static build metrics over commits, from the cross-compiled sm_90a/sm_100a builds: registers
per thread, spilled bytes and the tensor-core path of every function, and the latest
builds in full. A lost wgmma/tcgen05 path or new spills show without a GPU."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.builders import statetimeline, timeseries
from grafana_foundation_sdk.models.dashboard import ValueMap, ValueMappingResult

from kernelwatch.dashboards import common
from kernelwatch.harness.build.sass import TENSOR_CORE_RANK

UID = "kw-builds"

_FILTER = """repository = '$repository' AND kernel = '$kernel'
  AND arch = ANY(ARRAY[$arch]::text[])
  AND dtype = ANY(ARRAY[$dtype]::text[])"""
#: Builds over the tracked branch's commits: a PR's or a bisection's builds are not on it.
_BRANCH = "trigger IN ('nightly', 'manual')"
_LINE = "function || ' ' || arch || ' ' || dtype || ' ' || case_label"
_TENSOR_CORE_LABELS = {
    "HMMA": "HMMA (mma.sync)",
    "HGMMA": "wgmma (HGMMA)",
    "QGMMA": "fp8 wgmma (QGMMA)",
    "UTCQMMA": "fp8 tcgen05 (UTCQMMA)",
    "UTCOMMA": "fp4 tcgen05 (UTCOMMA)",
}
#: report_build_history.tensor_core_rank's values, named.
TENSOR_CORE_NAMES = {rank: _TENSOR_CORE_LABELS.get(c, c) for c, rank in TENSOR_CORE_RANK.items()}


def _over_commits(title: str, column: str, unit: str, description: str) -> timeseries.Panel:
    return common.timeseries_panel(
        title,
        f"""
SELECT at AS "time", {_LINE} AS metric, {column}
FROM report_build_history
WHERE {_FILTER} AND status = 'ok' AND {_BRANCH} AND $__timeFilter(at)
ORDER BY 1
""",
        w=12,
        h=8,
        unit=unit,
    ).description(description)


def dashboard() -> sdk.Dashboard:
    """The static build metrics dashboard."""
    tensor_cores = ValueMap(
        options={
            str(rank): ValueMappingResult(text=name, index=rank)
            for rank, name in TENSOR_CORE_NAMES.items()
        }
    )
    return (
        common.new_dashboard(
            UID,
            "kernelwatch: static build metrics",
            "Registers, spills and tensor-core path of every compiled function over commits "
            "(cross-compiled, no GPU needed), and the latest builds.",
            since="90d",
        )
        .with_variable(common.repository_variable())
        .with_variable(common.kernel_variable(multi=False, source="report_latest_builds"))
        .with_variable(
            common.variable(
                "arch",
                "Arch",
                "SELECT DISTINCT arch FROM report_latest_builds "
                "WHERE repository = '$repository' AND kernel = '$kernel' ORDER BY 1",
                multi=True,
                include_all=True,
            )
        )
        .with_variable(
            common.variable(
                "dtype",
                "dtype",
                "SELECT DISTINCT dtype FROM report_latest_builds "
                "WHERE repository = '$repository' AND kernel = '$kernel' ORDER BY 1",
                multi=True,
                include_all=True,
            )
        )
        .with_panel(
            _over_commits(
                "Registers per thread",
                "registers",
                "none",
                "Registers per thread of each function x arch x dtype x case over the tracked "
                "branch's nightly builds: a jump means lower occupancy.",
            )
        )
        .with_panel(
            _over_commits(
                "Spilled bytes (stores + loads)",
                "spill_bytes",
                "bytes",
                "Local-memory spill bytes (stores plus loads) per build over the nightly "
                "builds: anything above 0 is a spill.",
            )
        )
        .with_panel(
            common.sql_panel(
                statetimeline.Panel(),
                "Tensor-core path",
                f"""
SELECT at AS "time", {_LINE} AS metric, tensor_core_rank
FROM report_build_history
WHERE {_FILTER} AND status = 'ok' AND {_BRANCH} AND $__timeFilter(at)
ORDER BY 1
""",
                w=24,
                h=8,
                format="time_series",
            )
            .description(
                "The tensor-core instructions each build uses, ranked none < HMMA < wgmma < fp8 "
                "wgmma < tcgen05 < fp8 tcgen05: a step down is a lost fast path."
            )
            .mappings([tensor_cores])
        )
        .with_panel(
            common.table_panel(
                "Builds of the latest nightly",
                f"""
SELECT function, arch, dtype, case_label, config, status, reason, registers,
  spill_store_bytes, spill_load_bytes, shared_static_bytes, shared_dynamic_bytes, num_warps,
  num_stages, tensor_core, tma_loads, global_load_bits, instructions, cubin_sha256,
  commit_sha, at
FROM report_latest_builds
WHERE {_FILTER}
ORDER BY function, arch, dtype, case_label
""",
                w=24,
                h=10,
            ).description(
                "Every build of the latest nightly in full: registers, spills, stack, shared "
                "memory, warps, stages, tensor-core path, TMA loads, instruction count."
            )
        )
    )
