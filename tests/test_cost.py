"""What device time costs (issue 49, item 3): ``[cost]`` in kernelwatch.toml, and the cost
panels' SQL run as the reader role on a seeded history of two pools at different prices
(one of eight GPUs a node), against GPU-hours and costs computed by hand."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from factories import commit, correctness, measurement, run, run_info
from pg_roles import as_role

from kernelwatch.config.settings import ConfigError, parse
from kernelwatch.dashboards import cost
from kernelwatch.dashboards.macros import Request, expand
from kernelwatch.harness.records import StageTime
from kernelwatch.report.markdown import device_line
from kernelwatch.store.device_time import add_stage
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.pr_findings import PrCheck, insert_pr_check

CONFIG = """
[pools.h100]
gpu = "H100"
[pools.h200x8]
gpu = "H200"
gpus_per_node = 8

[cost]
currency = "EUR"
[cost.h100]
gpu_hour = 2.0
nightly_budget_s = 5400
[cost.h200x8]
gpu_hour = 3.0
"""

NIGHT = datetime(2026, 11, 2, 3, tzinfo=UTC)


def _config(text: str = CONFIG):
    return parse(tomllib.loads(text), Path("kernelwatch.toml"))


def test_the_cost_table_prices_each_pool_and_refuses_what_it_cannot_price():
    config = _config()
    assert config.cost.currency == "EUR"
    assert (
        config.cost.of("h100").gpu_hour == 2.0 and config.cost.of("h100").nightly_budget_s == 5400
    )
    assert config.cost.of("h200x8").nightly_budget_s is None
    assert config.cost.of("local").gpu_hour is None  # unpriced: GPU-hours alone
    for text, message in (
        ("[cost.h300]\ngpu_hour = 1.0\n", "[cost.h300]: no pool 'h300' under [pools]"),
        ("[cost.h100]\ngpu_hour = -1.0\n", "[cost.h100]: gpu_hour must be at least 0"),
        ("[cost.h100]\nnightly_budget_s = 0\n", "must be more than 0 seconds"),
        ("[cost.h100]\nprice = 1.0\n", "[cost.h100]: unknown key 'price'"),
        ("[cost]\nbudget = 1.0\n", "[cost]: unknown key 'budget'"),
    ):
        with pytest.raises(ConfigError, match=r"^kernelwatch\.toml: ") as raised:
            _config(CONFIG.split("[cost]")[0] + text)
        assert message in str(raised.value) and "\n" not in str(raised.value)


def _run(pool: str, at: datetime, trigger: str, stages: tuple[StageTime, ...], sha: str):
    return run(
        [correctness(), measurement()],
        run_info(at=at, pool=pool, trigger=trigger, stages=stages, commit=commit(sha, at=at)),
    )


def test_the_cost_panels_give_the_hand_computed_gpu_hours_and_cost_as_reader(store_url):
    nights = (NIGHT, NIGHT + timedelta(days=1))
    with psycopg.connect(store_url) as conn:
        ingester = Ingester(conn)
        # Night 1, h100: a check of 360 s, a timing of 3240 s, then the same night's A/B
        # of 900 s: 1.25 GPU-hours, 2.50 EUR.
        h100 = _run(
            "h100",
            nights[0],
            "nightly",
            (StageTime("check", 360.0, 1), StageTime("bench", 3240.0, 1)),
            "a" * 40,
        )
        ingester.ingest(h100)
        assert add_stage(conn, h100.info.run_id, StageTime("ab", 900.0, 1))
        # Night 1, h200x8: 180 + 270 s on eight GPUs: 1 GPU-hour, 3 EUR.
        ingester.ingest(
            _run(
                "h200x8",
                nights[0],
                "nightly",
                (StageTime("check", 180.0, 1), StageTime("bench", 270.0, 1)),
                "b" * 40,
            )
        )
        # Night 2, h100: a bisection's probe of 1800 s: 0.5 GPU-hours, 1 EUR.
        ingester.ingest(
            _run("h100", nights[1], "bisect", (StageTime("bisect", 1800.0, 1),), "c" * 40)
        )
        # A PR check on h200x8: 90 s of check a side, 360 s of A/B: 540 s on eight GPUs,
        # 1.2 GPU-hours, 3.6 EUR; none of it in the nights' rows.
        base = _run("h200x8", nights[1], "pr", (StageTime("check", 90.0, 1),), "d" * 40)
        head = _run(
            "h200x8",
            nights[1],
            "pr",
            (StageTime("check", 90.0, 1), StageTime("ab", 360.0, 2)),
            "e" * 40,
        )
        for side in (base, head):
            ingester.ingest(side)
        insert_pr_check(conn, head.info.run_id, base.info.run_id,
                        PrCheck(1, "regression", None, 7, "feature", "alice"), [])  # fmt: skip
    prices = cost.Prices.from_config(_config())
    request = Request(NIGHT - timedelta(days=1), NIGHT + timedelta(days=3))
    with psycopg.connect(as_role(store_url, "kernelwatch_reader")) as conn:
        nightly = conn.execute(expand(cost.nights_sql(prices), request)).fetchall()
        prs = conn.execute(expand(cost.prs_sql(prices), request)).fetchall()
    got = [(night.day, pool, round(hours, 9), round(price, 9), currency)
           for night, _, pool, hours, price, currency in nightly]  # fmt: skip
    assert got == [
        (3, "h100", 0.5, 1.0, "EUR"),
        (2, "h100", 1.25, 2.5, "EUR"),
        (2, "h200x8", 1.0, 3.0, "EUR"),
    ]
    ((_, _, pr, _, pool, outcome, hours, price, currency),) = prs
    assert (pr, pool, outcome, round(hours, 9), round(price, 9), currency) == (
        "#7",
        "h200x8",
        1,
        1.2,
        3.6,
        "EUR",
    )


def test_an_unpriced_pool_shows_its_gpu_hours_and_no_cost(store_url):
    with psycopg.connect(store_url) as conn:
        Ingester(conn).ingest(
            _run("local", NIGHT, "nightly", (StageTime("bench", 7200.0, 1),), "f" * 40)
        )
    request = Request(NIGHT - timedelta(days=1), NIGHT + timedelta(days=1))
    with psycopg.connect(as_role(store_url, "kernelwatch_reader")) as conn:
        ((_, _, pool, hours, price, currency),) = conn.execute(
            expand(cost.nights_sql(cost.UNPRICED), request)
        ).fetchall()
    assert (pool, hours, price, currency) == ("local", 2.0, None, "USD")


def test_a_pr_comments_device_line_prices_every_gpu_a_run_holds():
    assert device_line(540.0, "h200x8", 8, 3.0, "EUR") == (
        "Device time: 540 s on pool h200x8, 8 GPUs a run: 1.200 GPU-hours, 3.60 EUR."
    )
    assert device_line(90.0, "local", 1, None, "USD") == (
        "Device time: 90 s on pool local: 0.025 GPU-hours."
    )
