"""Serving: one deployment over time beside the kernels it served. TTFT, TPOT and ITL (median
and p99), output throughput and its cost per million tokens at a GPU-hour price, the judged
changes and serving regressions, and as marks on every chart the kernel commits deployed and
the kernel regressions each deploy shipped."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.models.dashboard import DashboardLinkType, VariableOption

from kernelwatch.dashboards import common, links

UID = links.SERVING_UID

_DEPLOYMENT = "deployment = '$deployment'"
#: The latencies charted, each at the two statistics judged (serving/results.py's JUDGED).
LATENCY_PANELS = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"))


def _latency_panel(title: str, latency: str) -> sdk.Panel:
    return common.timeseries_panel(
        f"{title} (ms)",
        f"""
SELECT started_at AS "time", metric, value
FROM report_serving_metrics
WHERE {_DEPLOYMENT} AND metric IN ('median_{latency}_ms', 'p99_{latency}_ms')
  AND $__timeFilter(started_at)
ORDER BY 1
""",
        w=8,
        h=8,
        unit="ms",
    ).description(f"Median and p99 {title} of each ok run, in ms; failed runs are left out.")


def _serving_link() -> list[sdk.DashboardLink]:
    return [
        sdk.DashboardLink("This deployment around the change")
        .type(DashboardLinkType.LINK)
        .url(links.serving_link_template())
    ]


def dashboard() -> sdk.Dashboard:
    """The serving dashboard."""
    board = (
        common.new_dashboard(
            UID,
            "kernelwatch: serving",
            "One deployment's serving benchmark results over time (docs/SERVING.md): latency "
            "median and p99, output throughput and its cost, the changes detection found and "
            "the serving regressions they opened, with the kernel commits deployed and the "
            "kernel regressions they shipped marked on every chart.",
            since="90d",
        )
        .with_variable(
            common.variable(
                "deployment",
                "Deployment",
                "SELECT deployment FROM report_serving_deployments ORDER BY 1",
            )
        )
        .with_variable(
            sdk.TextBoxVariable("gpu_hour_price")
            .label("GPU-hour price")
            .default_value("")
            .current(VariableOption(text="", value="", selected=True))
        )
        .with_panel(
            common.table_panel(
                "Deployment",
                f"""
SELECT deployment, model, engine, gpu, gpu_count, tp, ep, load, dataset, ok_runs,
  failed_runs, first_run_at, last_run_at, simulated
FROM report_serving_deployments
WHERE {_DEPLOYMENT}
""",
                w=24,
                h=4,
            ).description(
                "What is served, on what, under which load; its ok and failed runs (a failed "
                "run, nothing completed or every metric zero, is never in a chart or a "
                "baseline); simulated: results a tool made up, such as the demo's."
            )
        )
    )
    for title, latency in LATENCY_PANELS:
        board = board.with_panel(_latency_panel(title, latency))
    return (
        board.with_panel(
            common.timeseries_panel(
                "Output throughput (tokens/s)",
                f"""
SELECT started_at AS "time", value AS output_throughput
FROM report_serving_metrics
WHERE {_DEPLOYMENT} AND metric = 'output_throughput' AND $__timeFilter(started_at)
ORDER BY 1
""",
                w=12,
                h=8,
                unit="short",
            ).description("Output tokens per second of each ok run: lower is worse.")
        )
        .with_panel(
            common.timeseries_panel(
                "Cost per million output tokens",
                f"""
SELECT started_at AS "time",
  NULLIF(${{gpu_hour_price:sqlstring}}, '')::float8 * gpu_count * 1e6 / (value * 3600)
    AS cost_per_million_tokens
FROM report_serving_metrics
WHERE {_DEPLOYMENT} AND metric = 'output_throughput' AND value > 0
  AND $__timeFilter(started_at)
ORDER BY 1
""",
                w=12,
                h=8,
                unit="currencyUSD",
            ).description(
                "What a million output tokens cost at the benchmark's throughput: the "
                "GPU-hour price (the variable above: the price of one GPU-hour in the "
                "deployment's pool) times the deployment's GPUs, over the tokens those GPUs "
                "produced in that hour. Empty until a price is set."
            )
        )
        .with_panel(
            common.table_panel(
                "Serving changes",
                f"""
SELECT at, metric, direction, rel_change, provisional, kernel_commit, previous_kernel_commit,
  regression_id, state, explanation, deployment, {links.window_columns("at")}
FROM report_serving_changes
WHERE {_DEPLOYMENT} AND (open OR $__timeFilter(at))
ORDER BY at DESC, abs(rel_change) DESC
""",
                w=12,
                h=8,
            )
            .description(
                "Every change detection found in a judged metric (kernelwatch serving "
                "detect), at the first run of the new level: which way (a latency up, a "
                "throughput down is a regression), by how much, provisional until enough "
                "runs follow it, the kernel commits served before and after, the serving "
                "regression it belongs to with its triage state, and what its kernels "
                "explain of it when a run either side was traced (kernelwatch serving "
                "explain)."
            )
            .data_links(_serving_link())
            .override_by_name("rel_change", [common.unit("percentunit")])
        )
        .with_panel(
            common.table_panel(
                "Kernel regressions each deploy shipped",
                f"""
SELECT started_at, kernel_commit, regression_id, kind, title, state, magnitude, commit_sha,
  repository, deployment, {links.window_columns("started_at")}
FROM report_serving_kernel_regressions
WHERE {_DEPLOYMENT} AND $__timeFilter(started_at)
ORDER BY started_at DESC
""",
                w=12,
                h=8,
            )
            .description(
                "kernelwatch's kernel regressions each deploy shipped: their culprit (before "
                "bisection finds one, their range's bad commit: commit_sha) lies after the "
                "kernel commit served before and at or before the one served from then on "
                "(both measured by kernelwatch). Click a row for the deployment around the "
                "deploy."
            )
            .data_links(_serving_link())
            .override_by_name("magnitude", [common.unit("percentunit")])
        )
        .annotation(
            common.sql_annotation(
                "Kernel commits deployed",
                f"""
SELECT started_at AS "time",
  'kernel ' || left(kernel_commit, 12) || coalesce(' (was ' || left(previous_kernel_commit, 12)
    || ')', '') AS text,
  'deploy' AS tags
FROM report_serving_deploys
WHERE {_DEPLOYMENT} AND $__timeFilter(started_at)
""",
                "blue",
            )
        )
        .annotation(
            common.sql_annotation(
                "Kernel regressions shipped",
                f"""
SELECT started_at AS "time",
  'kernel regression #' || regression_id || ': ' || title AS text,
  'kernel-regression,' || state AS tags
FROM report_serving_kernel_regressions
WHERE {_DEPLOYMENT} AND $__timeFilter(started_at)
""",
                "red",
            )
        )
    )
