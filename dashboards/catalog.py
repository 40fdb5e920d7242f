"""Every kernelwatch dashboard, as Grafana JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelwatch.config.settings import LOCAL_POOL
from kernelwatch.dashboards import builds, comm, common, fleet, health, quarter, serving_board, sol
from kernelwatch.dashboards import kernel_history as history
from kernelwatch.dashboards import pull_requests as prs
from kernelwatch.dashboards import triage_board as triage
from kernelwatch.dashboards.cost import UNPRICED, Prices

#: In the order Grafana's dashboard list and the export show them.
MODULES = (fleet, prs, history, quarter, sol, builds, health, triage, comm, serving_board)


def dashboards(
    pools: Sequence[str] = (LOCAL_POOL,), prices: Prices = UNPRICED
) -> list[dict[str, Any]]:
    """The JSON of every dashboard, built afresh; the fleet overview's pipeline stat over
    ``pools``, the pools the alert rules watch; the health dashboard's cost panels at
    ``prices``."""
    built = []
    for module in MODULES:
        if module is fleet:
            board = fleet.dashboard(pools)
        elif module is health:
            board = health.dashboard(prices)
        else:
            board = module.dashboard()
        built.append(common.to_json(board))
    return built


def panel_id(uid: str, title: str) -> int:
    """The id of the panel titled ``title`` on dashboard ``uid`` (as :func:`dashboards`
    numbers them)."""
    (dashboard,) = [d for d in dashboards() if d["uid"] == uid]
    (panel,) = [p for p in dashboard["panels"] if p["title"] == title]
    return panel["id"]
