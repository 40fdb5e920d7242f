"""Kernel families in the store: each kernel keeps the family its latest nightly run's records
declared, kernels stored before families were declared take the one their name gives, and
the reader role sees them in ``report_kernels``."""

from __future__ import annotations

import importlib
import re
from dataclasses import replace
from datetime import timedelta

import psycopg
from factories import CASE, WHEN, build, measurement, run, run_info
from pg_roles import as_role

from kernelwatch.harness.records import FAMILY_WORDS, default_family
from kernelwatch.store import migrate
from kernelwatch.store.ingest import Ingester

MIGRATION = importlib.import_module("kernelwatch.store.migrations.versions.0010_kernel_families")


def test_the_migration_freezes_the_default_family_rule():
    """Migration 0010 gives the kernels stored before it the family ``default_family`` gives
    their name; a rule changed since would label old and new kernels differently."""
    frozen = re.findall(r"WHEN words && ARRAY\[([^\]]*)\] THEN '(\w+)'", MIGRATION._DEFAULT_FAMILY)
    rule = tuple((family, tuple(re.findall(r"'(\w+)'", words))) for words, family in frozen)
    assert rule == FAMILY_WORDS


def test_kernels_stored_before_families_take_the_family_their_name_gives(pg_server):
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS t_families")
        conn.execute("CREATE DATABASE t_families")
    url = pg_server.url("t_families")
    migrate.upgrade(url, "0009")
    names = ("rms_norm", "fused_add_rms_norm", "mla_decode", "fp8_group_quant", "axpy")
    with psycopg.connect(url) as conn:
        (repo,) = conn.execute(
            "INSERT INTO repositories (name) VALUES ('r') RETURNING id"
        ).fetchone()
        for name in names:
            conn.execute(
                "INSERT INTO kernels (repository_id, suite, name) VALUES (%s, 's', %s)",
                (repo, name),
            )
    migrate.upgrade(url)
    with psycopg.connect(url) as conn:
        stored = dict(conn.execute("SELECT name, family FROM kernels").fetchall())
    assert stored == {name: default_family(name) for name in names}
    assert stored["axpy"] == "" and stored["mla_decode"] == "attention"


def _families(url: str) -> dict[str, str]:
    reader = as_role(url, "kernelwatch_reader")
    with psycopg.connect(reader) as conn:
        return dict(conn.execute("SELECT kernel, family FROM report_kernels").fetchall())


def test_a_kernel_keeps_the_family_its_latest_nightly_declared(store_url):
    def night(day: int, family: str, trigger: str = "nightly"):
        info = run_info(at=WHEN + timedelta(days=day), trigger=trigger)
        return run([measurement(replace(CASE, family=family))], info)

    with psycopg.connect(store_url) as conn:
        ingester = Ingester(conn)
        ingester.ingest(night(0, "dense"))
        assert _families(store_url) == {CASE.kernel: "dense"}
        ingester.ingest(night(1, "sparse", trigger="pr"))  # a PR's head declares another
        assert _families(store_url) == {CASE.kernel: "dense"}
        ingester.ingest(night(2, "sparse"))
        ingester.ingest(night(3, "sparse"))
        assert _families(store_url) == {CASE.kernel: "sparse"}
    with psycopg.connect(store_url) as conn:  # a new connection knows no family yet
        Ingester(conn).ingest(night(4, "dense"))
    assert _families(store_url) == {CASE.kernel: "dense"}


def test_a_run_of_builds_alone_names_its_kernels_families(store_url):
    with psycopg.connect(store_url) as conn:
        Ingester(conn).ingest(run([build(kernel="scale_rows", family="pointwise")]))
    assert _families(store_url) == {"scale_rows": "pointwise"}
