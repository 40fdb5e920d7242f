"""What the device time costs (issue 49): GPU-hours and their price per pool, per night and
per PR check, from the device seconds each run stored (``report_device_time``,
``report_pr_device_time``) and the ``[cost]`` prices of kernelwatch.toml.

A run on a pool whose nodes have several GPUs holds them all, so its device seconds count
once per GPU of the pool's node. The prices are compiled into the panels' SQL when the
dashboards are built: history is shown at the configured price, and a price change takes
effect with the next ``kernelwatch dashboards push``."""

from __future__ import annotations

from dataclasses import dataclass

from grafana_foundation_sdk.builders import table

from kernelwatch.config.settings import LOCAL_POOL, Config
from kernelwatch.dashboards import common

NIGHTS = "GPU-hours and cost per pool and night"
PRS = "GPU-hours and cost per PR check"


@dataclass(frozen=True)
class PoolPrice:
    """One pool as the cost panels price it: GPUs a run holds, the price of a GPU-hour
    (None: not priced)."""

    pool: str
    gpus: int = 1
    gpu_hour: float | None = None


@dataclass(frozen=True)
class Prices:
    """Every configured pool's price, and the currency they are in."""

    pools: tuple[PoolPrice, ...] = (PoolPrice(LOCAL_POOL),)
    currency: str = "USD"

    def __post_init__(self) -> None:
        if not self.pools:  # the panels' price table would be an empty VALUES list
            raise ValueError("prices name at least one pool")

    @classmethod
    def from_config(cls, config: Config) -> Prices:
        """The pools of ``config`` (``local`` included) with their ``[cost]`` prices."""
        gpus = {LOCAL_POOL: 1, **{name: p.gpus_per_node for name, p in config.pools.items()}}
        return cls(
            tuple(PoolPrice(name, n, config.cost.of(name).gpu_hour) for name, n in gpus.items()),
            config.cost.currency,
        )


#: No ``[cost]``: the local pool, unpriced.
UNPRICED = Prices()


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _price_table(prices: Prices) -> str:
    """The pools' GPUs and prices as a table ``price(pool, gpus, gpu_hour)``."""
    rows = ", ".join(
        f"({_quoted(p.pool)}, {p.gpus}, "
        f"{'NULL' if p.gpu_hour is None else repr(float(p.gpu_hour))}::float8)"
        for p in prices.pools
    )
    return f"price AS (SELECT * FROM (VALUES {rows}) AS v (pool, gpus, gpu_hour))"


def nights_sql(prices: Prices) -> str:
    """Per repository, pool and night (the day the runs started), the GPU-hours every run
    but the PR checks held (nightly, its A/B, its bisections, manual runs) and their cost."""
    return f"""
WITH {_price_table(prices)}
SELECT date_trunc('day', t.started_at) AS night, t.repository, t.pool,
  sum(t.device_s * coalesce(p.gpus, 1)) / 3600.0 AS gpu_hours,
  sum(t.device_s * coalesce(p.gpus, 1) * p.gpu_hour) / 3600.0 AS cost,
  {_quoted(prices.currency)} AS currency
FROM report_device_time t LEFT JOIN price p ON p.pool = t.pool
WHERE t.trigger <> 'pr' AND $__timeFilter(t.started_at)
GROUP BY 1, 2, 3
ORDER BY 1 DESC, 2, 3
"""


def prs_sql(prices: Prices) -> str:
    """Per PR check, the GPU-hours both its sides held and their cost."""
    return f"""
WITH {_price_table(prices)}
SELECT t.started_at, t.repository, t.pr, t.head_sha, t.pool, t.outcome,
  t.device_s * coalesce(p.gpus, 1) / 3600.0 AS gpu_hours,
  t.device_s * coalesce(p.gpus, 1) * p.gpu_hour / 3600.0 AS cost,
  {_quoted(prices.currency)} AS currency
FROM report_pr_device_time t LEFT JOIN price p ON p.pool = t.pool
WHERE $__timeFilter(t.started_at)
ORDER BY 1 DESC
"""


def panels(prices: Prices) -> list[table.Panel]:
    """The two cost tables."""
    return [
        common.table_panel(NIGHTS, nights_sql(prices), w=12, h=8)
        .description(
            "Per pool and night: the GPU-hours its runs held (device seconds by each stage's "
            "clock, times the pool's GPUs a node), PR checks aside, and their cost at the "
            "configured price per GPU-hour ([cost] in kernelwatch.toml; empty where the "
            "pool has none)."
        )
        .decimals(3),
        common.table_panel(PRS, prs_sql(prices), w=12, h=8)
        .description(
            "Per PR check, newest first: the GPU-hours both its sides held (the checks and "
            "the A/B with its settling rounds) and their cost at the pool's configured price."
        )
        .decimals(3),
    ]
