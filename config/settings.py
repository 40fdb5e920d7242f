"""The one configuration file, ``kernelwatch.toml``: the store, tracked repositories, GPU
pools and their schedules, bench budgets, the decision thresholds (with per-kernel
overrides), bisection, the nightly's confirmation budget, notifications.

:func:`load` reads the file (the one ``KERNELWATCH_CONFIG`` names, default
``./kernelwatch.toml``) once and parses every table; the environment overrides the
``[database]`` keys. Every error names the file and the key, and says what was expected;
nothing here touches git, Prefect or the database. docs/CONFIG.md lists every key with its
default, generated from the records below (``scripts/config_reference.py``).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kernelwatch.analysis.bisect_search import BisectConfig
from kernelwatch.analysis.thresholds import SECTIONS, ConfirmBudget, Thresholds
from kernelwatch.config.database import DatabaseSettings, StoreConfig, store_config
from kernelwatch.config.tables import ConfigError, list_of_tables, record, settable, table
from kernelwatch.config.threshold_tables import KEYS, parse_thresholds
from kernelwatch.harness.build.archs import ARCHS, DEFAULT_ARCHS
from kernelwatch.harness.timing.request import BenchOptions

CONFIG_ENV = "KERNELWATCH_CONFIG"
CONFIG_FILE = "kernelwatch.toml"

#: The pool a laptop or a CI machine runs in when the file names none.
LOCAL_POOL = "local"


#: Where Python projects and images declare what they install: the requirement and lock files
#: of pip, uv, Poetry, PDM, Pipenv, conda and pixi, the packaging files and Dockerfiles.
ENVIRONMENT_FILES = (
    "requirements*.txt", "requirements/*.txt", "constraints*.txt", "pyproject.toml",
    "setup.py", "setup.cfg", "environment.yml", "environment.yaml", "Pipfile", "Pipfile.lock",
    "poetry.lock", "uv.lock", "pdm.lock", "pixi.toml", "pixi.lock", "Dockerfile*",
)  # fmt: skip


@dataclass(frozen=True)
class RepositoryConfig:
    """A tracked kernel repository (one ``[[repositories]]`` block)."""

    name: str
    """The repository's name in the store, the reports and the commands."""
    source: str
    """A local checkout, or a git URL (cloned into the cache)."""
    suite: str
    """A module in the repository, or a path to a suite file: relative to the repository
    (or absolute inside it), it is read from each revision's checkout; an absolute path
    outside the repository is the same file for every revision."""
    src: str = ""
    """The source root inside the repository (``src`` in a src/ layout), put on
    ``sys.path`` before the repository's top. Empty: the top alone."""
    branch: str = "main"
    """The branch the nightly follows."""
    workload: str = "smoke"
    """The workload checked, timed and A/B-compared."""
    build_workload: str | None = None
    """The workload whose shapes the build specialises for. Unset: ``workload``."""
    kernels: tuple[str, ...] = ()
    """The kernels to run. Empty: every kernel of the suite."""
    dtypes: tuple[str, ...] = ()
    """The dtypes to run. Empty: every dtype each kernel declares."""
    params: tuple[str, ...] = ()
    """Only the cases whose parameters have these values, each ``KEY=VALUE`` (``m=4096``);
    all of a case's parameters pin that case. Empty: every case of the workload."""
    archs: tuple[str, ...] = DEFAULT_ARCHS
    """The targets cross-compiled. Empty: no build stage."""
    pools: tuple[str, ...] = ()
    """The pools whose nightly runs this repository. Empty: every pool."""
    environment_files: tuple[str, ...] = ENVIRONMENT_FILES
    """The files that declare the environment the kernels run in (Triton, torch, CUDA pins),
    as globs of paths from the repository's top. A commit changing one changes every case's
    build identity: a PR check times it, though both sides run on the worker's environment."""


@dataclass(frozen=True)
class PoolConfig:
    """A GPU pool (``[pools.NAME]``): a Prefect work pool whose workers run on hosts with one
    kind of GPU, and when its nightly runs."""

    name: str
    work_pool: str = ""
    """The Prefect work pool. Empty: the pool's name."""
    cron: str = "0 3 * * *"
    """When the nightly runs (cron, in ``timezone``)."""
    timezone: str = "UTC"
    """The cron's time zone."""
    gpu: str = ""
    """The GPU model, for people reading the file."""
    gpus_per_node: int = 1
    """GPUs on each host of the pool. Above 1 a run takes every GPU of its node (a
    distributed case runs its ranks on them; docs/DISTRIBUTED.md)."""

    def __post_init__(self) -> None:
        from cronsim import CronSim, CronSimError

        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be at least 1, not {self.gpus_per_node}")
        try:
            CronSim(self.cron, datetime(2000, 1, 1))
        except CronSimError as exc:
            raise ValueError(f"cron {self.cron!r} is not a cron expression: {exc}") from None
        try:
            ZoneInfo(self.timezone)
        except (ValueError, ZoneInfoNotFoundError):
            raise ValueError(f"timezone {self.timezone!r} is not a known time zone") from None


@dataclass(frozen=True)
class BisectSettings:
    """How a bisection runs (``[bisect]``; its ``bad_fraction`` is a threshold)."""

    auto: bool = True
    """Bisect every regression nightly detection opens."""
    budget_s: float = 900.0
    """Device seconds one bisection may spend timing."""
    max_rounds: int = BisectConfig.max_rounds
    """Probes of one commit (each re-measurement with twice the samples) before an
    ambiguous commit stops the search."""
    max_commits: int = 512
    """The longest range bisected."""

    def __post_init__(self) -> None:
        BisectConfig(max_rounds=self.max_rounds)


@dataclass(frozen=True)
class PoolCost:
    """What one pool's GPU time costs and what its nightly may spend (``[cost.NAME]``, NAME
    a pool under ``[pools]`` or ``local``). A run on a pool of several GPUs a node holds them
    all: its device seconds count once per GPU."""

    gpu_hour: float | None = None
    """The price of one GPU-hour on the pool, in ``[cost] currency`` (unset: not priced; the
    cost panels and the PR comment give its GPU-hours alone)."""
    nightly_budget_s: float | None = None
    """Device seconds the nightly's timing may spend on the pool (unset: no budget): a case
    not timed within it is left untimed, and the nightly's summary names its kernels."""

    def __post_init__(self) -> None:
        if self.gpu_hour is not None and self.gpu_hour < 0:
            raise ValueError(f"gpu_hour must be at least 0, got {self.gpu_hour}")


@dataclass(frozen=True)
class CostSettings:
    """What GPU time costs (``[cost]``): a price per GPU-hour and a nightly device-time
    budget per pool, each in a ``[cost.NAME]`` table of its own. The device seconds are
    what each run stored (docs/STORE.md ``device_time``); the prices are the file's, so a
    cost panel shows history at today's price (``kernelwatch dashboards push`` after a
    change)."""

    currency: str = "USD"
    """The currency of every ``gpu_hour``, as the panels and the PR comment name it."""
    pools: Mapping[str, PoolCost] = field(default_factory=dict)

    def of(self, pool: str) -> PoolCost:
        """``pool``'s prices and budget (none configured: neither)."""
        return self.pools.get(pool, PoolCost())


@dataclass(frozen=True)
class PrSettings:
    """How a PR check settles what its first A/B left inconclusive (``[pr]``): the kernels of
    AMBIGUOUS cases are timed again with twice the samples each round, a static change
    first, before the comment is written; what is still AMBIGUOUS makes the check's outcome
    3 (inconclusive), never 0."""

    device_seconds: float = 300.0
    """Device seconds one PR check may spend on those extra rounds; a kernel whose next round
    (about twice its last) would pass it is not timed again, and the comment says so."""
    max_rounds: int = 3
    """Extra rounds of an inconclusive kernel (0: none; the comment reports it as is)."""

    def __post_init__(self) -> None:
        if self.device_seconds < 0:
            raise ValueError(f"device_seconds must be at least 0, got {self.device_seconds}")
        if self.max_rounds < 0:
            raise ValueError(f"max_rounds must be at least 0, got {self.max_rounds}")


#: Who may announce new regressions ("" lets :class:`Notifications` choose).
ANNOUNCERS = ("", "flow", "grafana")


@dataclass(frozen=True)
class Notifications:
    """Where new regressions are announced, after bisection (``[notifications]``)."""

    webhooks: tuple[str, ...] = ()
    """Generic JSON webhook URLs."""
    slack: tuple[str, ...] = ()
    """Slack incoming-webhook URLs."""
    announcer: str = ""
    """Who announces a new regression, once: ``flow`` (the nightly, after bisection, to the
    webhooks above) or ``grafana`` (the ``kw-regression-open`` alert rule, to Grafana's
    contact point). Empty: ``flow`` when webhooks or slack are set, else ``grafana``."""
    grafana_url: str = ""
    """Grafana's address, for the dashboard links in the flow's announcements."""
    docs_url: str = "docs"
    """Where docs/ is read (e.g. a repository's blob URL); alert runbook links start with it."""

    def __post_init__(self) -> None:
        if self.announcer not in ANNOUNCERS:
            raise ValueError(
                f"announcer must be one of {', '.join(a for a in ANNOUNCERS if a)}, "
                f"not {self.announcer!r}"
            )

    @property
    def announced_by(self) -> str:
        """The announcer in effect: ``flow`` or ``grafana``."""
        if self.announcer:
            return self.announcer
        return "flow" if self.webhooks or self.slack else "grafana"


@dataclass(frozen=True)
class RunSettings:
    """How runs are made and where their reports go (``[run]``)."""

    case_timeout_s: float = 300.0
    """Seconds one case may run before it counts as hung."""
    report_dir: str = "kernelwatch-reports"
    """Where reports and PR comments are written."""
    report_url: str = ""
    """Where `report_dir` is served (e.g. an https URL): a PR comment links its report under
    it. Empty: the comment names the command that writes the report, never a worker's path."""


@dataclass(frozen=True)
class ServingSettings:
    """Where serving benchmark results arrive (``[serving]``; docs/SERVING.md): the
    ``serving-ingest`` deployment reads the folder on its schedule, stores every new run and
    judges the deployments that got one."""

    folder: str = ""
    """The folder a serving benchmark job writes its result files to (vLLM's JSON and
    PyTorch-format records, SGLang's JSON lines). Empty: no ``serving-ingest`` deployment."""
    cron: str = "0 * * * *"
    """When the folder is read (cron, UTC)."""
    work_pool: str = LOCAL_POOL
    """The Prefect work pool that reads it: no GPU is needed, only the folder and the store."""

    def __post_init__(self) -> None:
        from cronsim import CronSim, CronSimError

        try:
            CronSim(self.cron, datetime(2000, 1, 1))
        except CronSimError as exc:
            raise ValueError(f"cron {self.cron!r} is not a cron expression: {exc}") from None


@dataclass(frozen=True)
class Config:
    """Everything kernelwatch reads from the file, with defaults for what it leaves out."""

    path: Path | None
    repositories: Mapping[str, RepositoryConfig]
    pools: Mapping[str, PoolConfig]
    database: StoreConfig
    bench: BenchOptions = field(default_factory=BenchOptions)
    run: RunSettings = field(default_factory=RunSettings)
    thresholds: Thresholds = field(default_factory=Thresholds)
    bisect: BisectSettings = field(default_factory=BisectSettings)
    confirm: ConfirmBudget = field(default_factory=ConfirmBudget)
    notifications: Notifications = field(default_factory=Notifications)
    serving: ServingSettings = field(default_factory=ServingSettings)
    pr: PrSettings = field(default_factory=PrSettings)
    cost: CostSettings = field(default_factory=CostSettings)

    def repository_at(self, path: Path) -> RepositoryConfig | None:
        """The repository whose local checkout (``source``) holds ``path``, the innermost
        when checkouts nest; None when ``path`` is in none (git URLs are no checkout)."""
        inside = [
            (len(Path(r.source).expanduser().resolve().parts), r)
            for r in self.repositories.values()
            if "://" not in r.source
            and path.resolve().is_relative_to(Path(r.source).expanduser().resolve())
        ]
        return max(inside, key=lambda found: found[0])[1] if inside else None

    def repository(self, name: str | None) -> RepositoryConfig:
        """The repository ``name``, or the only one when ``name`` is None."""
        if name is None and len(self.repositories) == 1:
            return next(iter(self.repositories.values()))
        if name in self.repositories:
            return self.repositories[name]
        where = self.path or f"./{CONFIG_FILE}"
        if not self.repositories:
            raise ConfigError(
                f"{where}: no [[repositories]] configured; add one (docs/CONFIG.md) or point "
                f"{CONFIG_ENV} at a file that has one"
            )
        known = ", ".join(self.repositories)
        if name is None:
            raise ConfigError(f"{where} tracks several repositories ({known}); name one")
        raise ConfigError(f"{where}: no repository {name!r}; configured: {known}")

    def pool(self, name: str) -> PoolConfig:
        """The pool ``name``; the local pool always exists."""
        if name in self.pools:
            return self.pools[name]
        if name == LOCAL_POOL:
            return PoolConfig(LOCAL_POOL, work_pool=LOCAL_POOL)
        known = ", ".join([*self.pools, LOCAL_POOL])
        raise ConfigError(f"{self.path or CONFIG_FILE}: no pool {name!r}; configured: {known}")


def load(path: Path | None = None) -> Config:
    """Read ``path`` (default: ``$KERNELWATCH_CONFIG`` or ``./kernelwatch.toml``; a missing
    default file gives the defaults). Raises :class:`ConfigError` naming file and key."""
    explicit = path or (Path(os.environ[CONFIG_ENV]) if os.environ.get(CONFIG_ENV) else None)
    file = explicit or Path.cwd() / CONFIG_FILE
    if not file.is_file():
        if explicit is not None:
            raise ConfigError(f"{file}: no such configuration file")
        return parse({}, None)
    try:
        data = tomllib.loads(file.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read it as TOML: {exc}") from exc
    return parse(data, file)


#: The tables of the file, in the order docs/CONFIG.md lists them.
TABLES = (
    "database", "repositories", "pools", "bench", "run", *SECTIONS, "thresholds",
    "notifications", "serving", "pr", "cost",
)  # fmt: skip
#: The BenchOptions fields that make sense in a file (the rest are computed or
#: per-invocation).
BENCH_KEYS = (
    "timer", "l2", "target_rel_ci", "min_samples", "min_time_s", "budget_s", "timeout_s",
    "warmup_s", "cool_down_s", "baseline",
)  # fmt: skip


def parse(data: Mapping[str, Any], file: Path | None) -> Config:
    """Build a :class:`Config` from the file's parsed TOML (``file`` None: no file)."""
    where = file or Path(CONFIG_FILE)
    for key in data:
        if key not in TABLES:
            raise ConfigError(f"{where}: unknown table [{key}]; known: {', '.join(sorted(TABLES))}")
    repositories = _repositories(data, where)
    pools = _pools(data, where)
    for repo in repositories.values():
        unknown = [p for p in repo.pools if p not in pools and p != LOCAL_POOL]
        if unknown:
            raise ConfigError(
                f"{where}: [[repositories]] {repo.name}: pools {', '.join(unknown)} are not "
                "defined under [pools]"
            )
    sections = {name: table(data, name, where) for name in SECTIONS}
    # [bisect] and [confirm] hold how the flow runs beside thresholds (per kernel): split.
    flow_tables = {}
    for name, cls in (("bisect", BisectSettings), ("confirm", ConfirmBudget)):
        flow_keys, rule_keys = settable(cls), KEYS[name]
        for key in sections[name]:
            if key not in (*flow_keys, *rule_keys):
                raise ConfigError(
                    f"{where}: [{name}]: unknown key {key!r}; known: "
                    f"{', '.join((*flow_keys, *rule_keys))}"
                )
        flow_tables[name] = record(
            cls, {k: v for k, v in sections[name].items() if k in flow_keys}, f"[{name}]", where
        )
        sections[name] = {k: v for k, v in sections[name].items() if k in rule_keys}
    return Config(
        path=file,
        repositories=repositories,
        pools=pools,
        database=store_config(
            record(DatabaseSettings, table(data, "database", where), "[database]", where)
        ),
        bench=record(BenchOptions, table(data, "bench", where), "[bench]", where, BENCH_KEYS),
        run=record(RunSettings, table(data, "run", where), "[run]", where),
        thresholds=parse_thresholds(sections, data.get("thresholds", []), where),
        bisect=flow_tables["bisect"],
        confirm=flow_tables["confirm"],
        notifications=record(
            Notifications, table(data, "notifications", where), "[notifications]", where
        ),
        serving=record(ServingSettings, table(data, "serving", where), "[serving]", where),
        pr=record(PrSettings, table(data, "pr", where), "[pr]", where),
        cost=_cost(data, where, pools),
    )


def _repositories(data: Mapping[str, Any], file: Path) -> dict[str, RepositoryConfig]:
    repositories: dict[str, RepositoryConfig] = {}
    blocks = list_of_tables(data.get("repositories", []), "repositories", file)
    for index, block in enumerate(blocks, start=1):
        repo = record(RepositoryConfig, block, f"[[repositories]] #{index}", file)
        if repo.name in repositories:
            raise ConfigError(f"{file}: repository {repo.name!r} is configured twice")
        bad = [a for a in repo.archs if a not in ARCHS]
        if bad:
            raise ConfigError(
                f"{file}: [[repositories]] {repo.name}: unknown arch {', '.join(bad)}; "
                f"known: {', '.join(ARCHS)}"
            )
        repositories[repo.name] = repo
    return repositories


def _cost(data: Mapping[str, Any], file: Path, pools: Mapping[str, PoolConfig]) -> CostSettings:
    block = table(data, "cost", file)
    top = {key: value for key, value in block.items() if not isinstance(value, dict)}
    cost = record(CostSettings, top, "[cost]", file, ("currency",))
    priced: dict[str, PoolCost] = {}
    for name, sub in block.items():
        if not isinstance(sub, dict):
            continue
        if name not in pools and name != LOCAL_POOL:
            raise ConfigError(
                f"{file}: [cost.{name}]: no pool {name!r} under [pools]; name one of "
                f"{', '.join([LOCAL_POOL, *pools])}"
            )
        priced[name] = record(PoolCost, sub, f"[cost.{name}]", file)
    return dataclasses.replace(cost, pools=priced)


def _pools(data: Mapping[str, Any], file: Path) -> dict[str, PoolConfig]:
    pools: dict[str, PoolConfig] = {}
    for name, block in table(data, "pools", file).items():
        if not isinstance(block, dict):
            raise ConfigError(f"{file}: [pools.{name}] must be a table")
        pool = record(PoolConfig, {"name": name, **block}, f"[pools.{name}]", file)
        pools[name] = dataclasses.replace(pool, work_pool=pool.work_pool or name)
    return pools
