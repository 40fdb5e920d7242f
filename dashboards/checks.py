"""Structural checks of generated dashboards, the ones Grafana would otherwise find when a
dashboard is loaded (or would silently get wrong): the schema version of the pinned Grafana,
unique dashboard uids and panel ids, panels inside the 24-column grid and not overlapping,
and every query bound to kernelwatch's data source."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from kernelwatch.dashboards.sqlquery import DATASOURCE_TYPE, DATASOURCE_UID

#: The dashboard schema of Grafana 11.6, the build grafana-foundation-sdk is pinned to.
SCHEMA_VERSION = 41
GRID_COLUMNS = 24


def problems(dashboards: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every problem found in ``dashboards``, one line each; empty when all are sound."""
    found = []
    uids = [d.get("uid") for d in dashboards]
    found += [f"dashboard uid {uid!r} is used more than once" for uid in _repeated(uids)]
    for dashboard in dashboards:
        name = dashboard.get("uid") or dashboard.get("title", "?")
        found += [f"{name}: {p}" for p in dashboard_problems(dashboard)]
    return found


def dashboard_problems(dashboard: Mapping[str, Any]) -> list[str]:
    """The problems of one dashboard."""
    found = []
    if dashboard.get("schemaVersion") != SCHEMA_VERSION:
        found.append(f"schemaVersion is {dashboard.get('schemaVersion')}, not {SCHEMA_VERSION}")
    uid = dashboard.get("uid") or ""
    if not 1 <= len(uid) <= 40:
        found.append(f"uid {uid!r} is not 1 to 40 characters")
    panels = list(dashboard.get("panels") or [])
    ids = [p.get("id") for p in panels]
    found += [f"panel {p.get('title')!r} has no id" for p in panels if p.get("id") is None]
    found += [f"panel id {i} is used more than once" for i in _repeated(ids) if i is not None]
    found += _grid_problems(panels)
    found += _binding_problems(dashboard, panels)
    return found


def _grid_problems(panels: Sequence[Mapping[str, Any]]) -> list[str]:
    found = []
    boxes = []
    for panel in panels:
        pos = panel.get("gridPos") or {}
        x, y, w, h = (pos.get(k, 0) for k in ("x", "y", "w", "h"))
        title = panel.get("title")
        if w <= 0 or h <= 0 or x < 0 or y < 0 or x + w > GRID_COLUMNS:
            found.append(f"panel {title!r} at {pos} is outside the {GRID_COLUMNS}-column grid")
        boxes.append((title, x, y, w, h))
    for i, (a, ax, ay, aw, ah) in enumerate(boxes):
        for b, bx, by, bw, bh in boxes[i + 1 :]:
            if ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah:
                found.append(f"panels {a!r} and {b!r} overlap")
    return found


def _binding_problems(
    dashboard: Mapping[str, Any], panels: Sequence[Mapping[str, Any]]
) -> list[str]:
    found = []
    for where, datasource in _datasources(dashboard, panels):
        ref = datasource or {}
        if (ref.get("uid"), ref.get("type")) != (DATASOURCE_UID, DATASOURCE_TYPE):
            found.append(f"{where} is bound to {datasource}, not {DATASOURCE_UID}")
    for panel in panels:
        if panel.get("type") != "row" and not panel.get("targets"):
            found.append(f"panel {panel.get('title')!r} has no query")
    return found


def _datasources(
    dashboard: Mapping[str, Any], panels: Sequence[Mapping[str, Any]]
) -> Iterator[tuple[str, Any]]:
    """(where, data source reference) of every panel, target, annotation and query variable."""
    for panel in panels:
        title = panel.get("title")
        yield f"panel {title!r}", panel.get("datasource")
        for target in panel.get("targets") or []:
            yield f"panel {title!r} target {target.get('refId')}", target.get("datasource")
    for annotation in (dashboard.get("annotations") or {}).get("list") or []:
        name = annotation.get("name")
        yield f"annotation {name!r}", annotation.get("datasource")
        yield f"annotation {name!r} query", (annotation.get("target") or {}).get("datasource")
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if variable.get("type") == "query":
            yield f"variable {variable.get('name')!r}", variable.get("datasource")


def _repeated(values: Iterable[Any]) -> list[Any]:
    seen: set[Any] = set()
    repeated = []
    for value in values:
        if value in seen and value not in repeated:
            repeated.append(value)
        seen.add(value)
    return repeated
