"""Speed-of-light and speedup over the stock library, from the latest nightly run on each
GPU: "how far is attention from speed-of-light on H200" is the bar chart with
kernel = flash_attention and GPU = H200."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as sdk

from kernelwatch.dashboards import common

UID = "kw-sol"

_FILTER = """repository = '$repository' AND device_model = ANY(ARRAY[$gpu]::text[])
  AND kernel = ANY(ARRAY[$kernel]::text[])
  AND dtype = ANY(ARRAY[$dtype]::text[]) AND status = 'ok' AND $__timeFilter(measured_at)"""
#: Bars drawn, and table rows listed, for the cases furthest from speed-of-light.
BARS = 40
TABLE_ROWS = 500


def dashboard() -> sdk.Dashboard:
    """The speed-of-light dashboard."""
    return (
        common.new_dashboard(
            UID,
            "kernelwatch: speed-of-light and speedup",
            "Latest nightly run per GPU: %SOL (the larger of compute and memory throughput "
            "against the GPU's peak), the bound, and speedup over the stock library.",
            since="30d",
        )
        .with_variable(common.repository_variable())
        .with_variable(common.gpu_variable(multi=True))
        .with_variable(common.kernel_variable(multi=True))
        .with_variable(
            common.variable(
                "dtype",
                "dtype",
                "SELECT DISTINCT dtype FROM report_series "
                "WHERE repository = '$repository' AND kernel = ANY(ARRAY[$kernel]::text[]) "
                "ORDER BY 1",
                multi=True,
                include_all=True,
            )
        )
        .with_panel(
            common.bar_panel(
                f"Furthest from speed-of-light: the {BARS} lowest %SOL",
                f"""
SELECT kernel || ' ' || dtype || ' ' || case_label || ' on ' || device_model
  || CASE WHEN run_status = 'partial' THEN ' (partial run)' ELSE '' END AS "case", pct_sol
FROM report_nightly_latest
WHERE {_FILTER} AND pct_sol IS NOT NULL
ORDER BY pct_sol
LIMIT {BARS}
""",
                w=12,
                h=14,
                unit="percent",
            )
            .description(
                "The cases of the latest nightly in the time range furthest from speed-of-light, "
                "for the chosen GPUs, kernels and dtypes (percent of the GPU's datasheet peak)."
            )
            .min(0)
            .max(100)
            .reduce_options(common.row_values(BARS))
            .thresholds(common.sol_thresholds())
        )
        .with_panel(
            common.bar_panel(
                "Speedup over the stock library (geometric mean per kernel and GPU)",
                f"""
SELECT kernel || ' on ' || device_model
  || CASE WHEN run_status = 'partial' THEN ' (partial run)' ELSE '' END AS "kernel",
  exp(avg(ln(NULLIF(speedup, 0)))) AS speedup_geomean
FROM report_nightly_latest
WHERE {_FILTER}
GROUP BY kernel, device_model, run_status
ORDER BY speedup_geomean
""",
                w=12,
                h=14,
                unit="x",
            )
            .description(
                "Geometric mean over the chosen dtypes' cases of our speedup over the stock "
                "library in the latest nightly in the time range (x; red below 1: slower than the "
                "library)."
            )
            .reduce_options(common.row_values(BARS))
            .thresholds(common.thresholds((None, "red"), (1.0, "green")))
        )
        .with_panel(
            common.table_panel(
                f"The {TABLE_ROWS} cases furthest from speed-of-light: throughput, bound, speedup",
                f"""
SELECT kernel, dtype, case_label, device_model, median_ns, tflops, gbps, pct_compute,
  pct_memory, pct_sol, bound, baseline, baseline_median_ns, speedup, config, commit_sha,
  run_status
FROM report_nightly_latest
WHERE {_FILTER}
ORDER BY pct_sol
LIMIT {TABLE_ROWS}
""",
                w=24,
                h=12,
            )
            .description(
                "The latest nightly's cases in the time range with median (ns), TFLOP/s, GB/s, % "
                "of compute and memory peak, %SOL, the bound, the baseline library with its median"
                " and our speedup, and whether the run was partial."
            )
            .override_by_name("pct_sol", [common.unit("percent"), *common.cell_colors()])
            .override_by_name("speedup", [common.unit("x")])
            .thresholds(common.sol_thresholds())
        )
    )
