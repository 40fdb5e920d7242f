"""The fleet's Prefect deployments, planned from the configuration.

For every pool: a scheduled ``nightly`` per repository the pool runs, and unscheduled
``pr_check`` and ``bisect`` deployments that the GitHub workflow and nightly detection start.
With a ``[serving] folder``: a scheduled ``serving_ingest`` of it, in ``[serving] work_pool``.
Each goes to the pool's work pool (``gpu-h100``, ``gpu-h200``, ``gpu-b200``: process workers
on GPU hosts, or the Kubernetes variant under ``infra/k8s/``). A deployment runs one flow
at a time per pool; the device slot in ``tasks.py`` keeps a GPU to one benchmark even when
pools share hosts.

Planning is pure (:func:`plan`); :func:`apply` talks to the Prefect API.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwatch.config.settings import Config

#: The flows' entry points, relative to the kernelwatch checkout the workers run from.
ENTRYPOINTS = {
    "nightly": "flows/nightly.py:nightly",
    "pr_check": "flows/prcheck.py:pr_check",
    "bisect": "flows/bisection.py:bisect",
    "serving_ingest": "flows/serving_results.py:serving_ingest",
}


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment: ``flow`` (a key of :data:`ENTRYPOINTS`), its name, work pool, cron
    (None: started on demand) and default parameters."""

    flow: str
    name: str
    work_pool: str
    cron: str | None
    timezone: str = "UTC"
    parameters: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()


def plan(config: Config, pools: Sequence[str] = ()) -> list[DeploymentSpec]:
    """The deployments for ``pools`` (default: every configured pool)."""
    chosen = list(pools) or list(config.pools)
    specs: list[DeploymentSpec] = []
    for name in chosen:
        pool = config.pool(name)
        tags = ("kernelwatch", pool.name)
        for repo in config.repositories.values():
            if repo.pools and pool.name not in repo.pools:
                continue
            specs.append(
                DeploymentSpec(
                    "nightly",
                    f"{repo.name}-{pool.name}",
                    pool.work_pool,
                    pool.cron,
                    pool.timezone,
                    {"repository": repo.name, "pool": pool.name},
                    tags,
                )
            )
        for flow in ("pr_check", "bisect"):
            specs.append(
                DeploymentSpec(
                    flow, pool.name, pool.work_pool, None, parameters={"pool": pool.name}, tags=tags
                )
            )
    serving = config.serving
    if serving.folder and (not pools or serving.work_pool in pools):
        specs.append(DeploymentSpec("serving_ingest", "serving", serving.work_pool, serving.cron,
                                    parameters={"folder": serving.folder},
                                    tags=("kernelwatch", "serving")))  # fmt: skip
    return specs


def apply(specs: Sequence[DeploymentSpec], source: Path, pool_type: str = "process") -> list[str]:
    """Create or update each deployment, its code loaded from the kernelwatch checkout
    ``source`` on the worker; work pools that do not exist yet are created as
    ``pool_type``. Returns the deployments' ids."""
    from prefect import flow as prefect_flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        for name in dict.fromkeys(spec.work_pool for spec in specs):
            try:
                client.read_work_pool(name)
            except ObjectNotFound:
                client.create_work_pool(WorkPoolCreate(name=name, type=pool_type))
    ids = []
    for spec in specs:
        loaded = prefect_flow.from_source(source=str(source), entrypoint=ENTRYPOINTS[spec.flow])
        schedules = [CronSchedule(cron=spec.cron, timezone=spec.timezone)] if spec.cron else None
        deployment_id = loaded.deploy(
            name=spec.name,
            work_pool_name=spec.work_pool,
            schedules=schedules,
            parameters=spec.parameters,
            tags=list(spec.tags),
            concurrency_limit=1,
            build=False,
            push=False,
            print_next_steps=False,
        )
        ids.append(str(deployment_id))
    return ids


def project_root() -> Path:
    """The kernelwatch checkout this process runs from (an editable install's source)."""
    return Path(__file__).resolve().parent.parent
