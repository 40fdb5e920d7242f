"""Communication: the bus bandwidth of every collective a multi-GPU pool runs, by message
size and world size, against the interconnect's peak, from the nightly history
(``report_comm_bandwidth`` over migration 0007's columns; docs/DISTRIBUTED.md)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as sdk

from kernelwatch.dashboards import common

UID = "kw-comm"

_FILTER = """repository = '$repository' AND device_model = ANY(ARRAY[$gpu]::text[])
  AND kernel = ANY(ARRAY[$kernel]::text[])
  AND $__timeFilter(measured_at)"""


def dashboard() -> sdk.Dashboard:
    """The communication dashboard."""
    return (
        common.new_dashboard(
            UID,
            "kernelwatch: communication",
            "Collectives and MoE dispatch/combine on several GPUs: nccl-tests bus bandwidth by "
            "message size and world size, against the interconnect's per-GPU peak.",
            since="30d",
        )
        .with_variable(
            common.variable(
                "repository",
                "Repository",
                "SELECT DISTINCT repository FROM report_comm_bandwidth ORDER BY 1",
            )
        )
        .with_variable(
            common.variable(
                "gpu",
                "GPU",
                "SELECT DISTINCT device_model FROM report_comm_bandwidth "
                "WHERE repository = '$repository' ORDER BY 1",
                multi=True,
                include_all=True,
            )
        )
        .with_variable(
            common.variable(
                "kernel",
                "Collective",
                "SELECT DISTINCT kernel FROM report_comm_bandwidth "
                "WHERE repository = '$repository' ORDER BY 1",
                multi=True,
                include_all=True,
            )
        )
        .with_panel(
            common.table_panel(
                "Bus bandwidth by message size and world size (latest nightly), against the "
                "interconnect's peak",
                f"""
SELECT DISTINCT ON (kernel, device_model, fabric, dtype, world_size, message_bytes)
  kernel, device_model, fabric, dtype, world_size, nodes, message_bytes, median_ns,
  algbw_gbps, busbw_gbps, busbw_peak_gbps, pct_peak
FROM report_comm_bandwidth
WHERE {_FILTER}
ORDER BY kernel, device_model, fabric, dtype, world_size, message_bytes, measured_at DESC
""",
                w=24,
                h=12,
            ).description(
                "Per collective, world size and message size in the latest nightly: algorithm and "
                "bus bandwidth (GB/s) against the interconnect's per-GPU peak (pct_peak)."
            )
        )
        .with_panel(
            common.timeseries_panel(
                "Bus bandwidth over the nightlies, per collective, world size and message size",
                f"""
SELECT measured_at AS time,
  kernel || ' ' || dtype || ' x' || world_size || ' ' || message_bytes || ' B' AS metric,
  busbw_gbps
FROM report_comm_bandwidth
WHERE {_FILTER}
ORDER BY 1
""",
                w=24,
                h=10,
                unit="GBs",
            ).description(
                "Bus bandwidth (GB/s) per collective, world size and message size over the "
                "nightlies in the time range."
            )
        )
    )
