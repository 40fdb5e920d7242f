"""``report_regression_repro``: the command that measures a regression again names its one
case, ``--param`` for each of the case's parameters, as the reader role reads it: from the
series that moved for a timing regression, from the night's case label for a correctness
one (a value may hold a space), and none for a static one (a build of a kernel and dtype)."""

from __future__ import annotations

import shlex
from dataclasses import replace

import psycopg
from factories import CASE, REPOSITORY, WHEN, commit, correctness, measurement, run, run_info
from pg_roles import as_role

from kernelwatch.harness.records import CaseId
from kernelwatch.store.findings import (
    NewChangePoint,
    NewRegression,
    insert_change_points,
    open_regression,
)
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.suspects import SuspectRow, commit_id, insert_suspects

PARENT, CULPRIT = "a" * 40, "b" * 40
TIMED = CaseId(CASE.suite, "rms_norm", "llm", {"rows": 64, "hidden": 4096, "fused": True}, "fp16")


def _night(conn: psycopg.Connection) -> tuple[int, int, int]:
    """A nightly of CULPRIT (child of PARENT) with one timed case; its run, series and
    measurement ids."""
    info = run_info(commit=commit(CULPRIT, parents=(PARENT,)))
    Ingester(conn).ingest(run([measurement(TIMED), correctness(TIMED)], info))
    return conn.execute(
        "SELECT r.id, m.series_id, m.id FROM runs r JOIN measurements m ON m.run_id = r.id"
    ).fetchone()


def _repro(url: str) -> dict[str, list[str]]:
    with psycopg.connect(as_role(url, "kernelwatch_reader")) as conn:
        rows = conn.execute(
            "SELECT r.title, p.repro FROM report_regression_repro p "
            "JOIN report_regressions r ON r.regression_id = p.regression_id"
        ).fetchall()
    return {title: shlex.split(repro) for title, repro in rows}


def test_each_regressions_repro_pins_its_one_case(store_url):
    with psycopg.connect(store_url) as conn:
        run_pk, series_id, measurement_id = _night(conn)
        repository_id = conn.execute("SELECT id FROM repositories").fetchone()[0]
        culprit = commit_id(conn, repository_id, CULPRIT)
        conn.execute(
            "INSERT INTO commits (repository_id, sha) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (repository_id, PARENT),
        )
        parent = commit_id(conn, repository_id, PARENT)
        suspect = SuspectRow(
            run_pk=run_pk, repository_id=repository_id, kind="correctness", kernel="rms_norm",
            case_label="layout=row major tokens=7", dtype="bf16", head_commit_id=culprit,
            base_commit_id=parent, suspicion="max abs error 3e-2 > 1e-2", outcome="regression",
        )  # fmt: skip
        with conn.transaction(), conn.cursor() as cur:
            (point,) = insert_change_points(cur, "confirmation", [NewChangePoint(
                series_id, measurement_id, culprit, WHEN, 1e3, 1.2e3, 0.2, 1e-9,
                "regression")])  # fmt: skip
            for title, kind, points in (("timing", "timing", (point,)),
                                        ("correctness", "correctness", ()),
                                        ("static", "static", ())):  # fmt: skip
                regression = open_regression(cur, repository_id, NewRegression(
                    title, "code", None, parent, culprit, points, kind=kind,
                    opened_by="confirmation"), "test")  # fmt: skip
                if kind != "timing":
                    insert_suspects(cur, CASE.suite, [replace(
                        suspect, kind=kind, regression_id=regression,
                        case_label=suspect.case_label if kind == "correctness"
                        else "rms_norm_fwd sm_90a tokens=7")])  # fmt: skip
    repro = _repro(store_url)
    common = ["kernelwatch", "pr-check", "--repository", REPOSITORY, "--base", PARENT,
              "--head", CULPRIT, "--kernel", "rms_norm"]  # fmt: skip
    timing = repro["timing"]
    assert timing[: len(common)] == common
    assert timing[len(common) : len(common) + 4] == ["--workload", "llm", "--dtype", "fp16"]
    pins = timing[len(common) + 4 :]
    assert pins[::2] == ["--param"] * 3
    assert pins[1::2] == ["fused=true", "hidden=4096", "rows=64"]  # by name
    assert repro["correctness"] == [*common, "--dtype", "bf16", "--param", "layout=row major",
                                    "--param", "tokens=7"]  # fmt: skip
    assert repro["static"] == [*common, "--dtype", "bf16"]
