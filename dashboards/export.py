"""Write the generated dashboards and the alerting provisioning file, in the form Grafana's
file provisioning reads (infra/grafana holds the committed copy)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelwatch.dashboards import alert_rules as alerts

#: Where, under a Grafana provisioning directory, the alerting file goes.
ALERTING_FILE = Path("alerting") / "kernelwatch.json"


def dump(document: Any) -> str:
    """The JSON text kernelwatch writes: two-space indent, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write_dashboards(directory: Path, dashboards: Sequence[dict[str, Any]]) -> list[Path]:
    """Write each dashboard to ``directory/<uid>.json``; the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for dashboard in dashboards:
        path = directory / f"{dashboard['uid']}.json"
        path.write_text(dump(dashboard))
        paths.append(path)
    return paths


def write_alerting(provisioning: Path, settings: alerts.AlertSettings = alerts.DEFAULTS) -> Path:
    """Write the alert rules of ``settings``, contact points and policy under
    ``provisioning``."""
    path = provisioning / ALERTING_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump(alerts.provisioning_file(settings)))
    return path
