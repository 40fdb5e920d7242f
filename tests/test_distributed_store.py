"""Distributed measurements in the store: their bandwidth in columns, the fabric in the series
identity (and on the series), every rank's GPU and the NCCL version in extra."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import psycopg
from synthetic_fleet import COMM_REPOSITORY, comm_runs

from kernelwatch.store.identity import series_key
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.runfile import Run


def test_a_collective_is_stored_with_its_bandwidth_world_and_fabric(store_url):
    (run,) = comm_runs(datetime(2026, 6, 1, tzinfo=UTC), 1)
    first = run.records[-1]  # all-reduce of 1 GiB on 8 GPUs
    pcie = dataclasses.replace(first.world, interconnect="pcie", links="SYS")
    moved = dataclasses.replace(first, world=pcie)
    with psycopg.connect(store_url) as conn:
        Ingester(conn).ingest(Run(run.info, (*run.records, moved)))
        rows = conn.execute(
            """SELECT s.key, s.fabric, m.message_bytes, m.busbw_gbps, m.busbw_peak_gbps,
                m.extra->'world'->'ranks'->7->>'uuid', m.extra->'world'->>'nccl_version'
            FROM measurements m JOIN series s ON s.id = m.series_id
            WHERE m.message_bytes = %s AND s.params->>'gpus_per_node' = '8'
            ORDER BY s.fabric""",
            (1 << 30,),
        ).fetchall()
    nvlink_key = series_key(COMM_REPOSITORY, first.case, first.device.name, first.method, "nvlink")
    assert [r[:2] for r in rows] == [(nvlink_key, "nvlink"), (rows[1][0], "pcie")]
    assert rows[1][0] != nvlink_key  # the same case over PCIe is another series
    assert rows[0][2:] == (1 << 30, first.bandwidth.busbw_gbps, 450.0, "GPU-hgx-7", "2.27.3")
    # A single-GPU measurement keeps the key it always had.
    plain = series_key(COMM_REPOSITORY, first.case, first.device.name, first.method)
    assert plain != nvlink_key
