"""The one configuration file, ``kernelwatch.toml``: tracked repositories, GPU pools and their
schedules, bench budgets, detection and A/B thresholds, bisection, notifications.

``[database]`` is read by ``config/database.py``; this module reads the rest. The file is the
one ``KERNELWATCH_CONFIG`` names (default ``./kernelwatch.toml``). Every error names the file
and the key, and says what was expected; nothing here touches git, Prefect or the database.
The keys are documented in docs/FLOWS.md.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kernelwatch.analysis.changepoints import DetectorConfig
from kernelwatch.analysis.verdict import VerdictConfig
from kernelwatch.config.database import CONFIG_ENV, CONFIG_FILE, ConfigError
from kernelwatch.harness.build.archs import ARCHS, DEFAULT_ARCHS
from kernelwatch.harness.timing.request import BenchOptions

#: The pool a laptop or a CI machine runs in when the file names none.
LOCAL_POOL = "local"


@dataclass(frozen=True)
class RepositoryConfig:
    """A tracked kernel repository. ``source`` is a local checkout or a git URL (cloned into
    the cache); ``suite`` a module in it or a path to a suite file. ``workload``/``kernels``/
    ``dtypes`` select what is checked and timed; ``archs`` what is cross-compiled (empty:
    no build stage), at ``build_workload``'s shapes (default: ``workload``). ``pools``: the
    pools whose nightly runs it (empty: every pool)."""

    name: str
    source: str
    suite: str
    branch: str = "main"
    workload: str = "smoke"
    build_workload: str | None = None
    kernels: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    archs: tuple[str, ...] = DEFAULT_ARCHS
    pools: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolConfig:
    """A GPU pool: a Prefect work pool (default: the pool's name) whose workers run on hosts
    with one kind of GPU, and when its nightly runs (cron, in ``timezone``)."""

    name: str
    work_pool: str = ""
    cron: str = "0 3 * * *"
    timezone: str = "UTC"
    gpu: str = ""


@dataclass(frozen=True)
class BisectSettings:
    """``auto``: bisect every regression nightly detection opens. ``budget_s``: device
    seconds one bisection may spend timing. ``max_rounds``: re-measurements of an ambiguous
    probe, each with twice the samples. ``max_commits``: longest range bisected."""

    auto: bool = True
    budget_s: float = 900.0
    max_rounds: int = 3
    max_commits: int = 512


@dataclass(frozen=True)
class Notifications:
    """Where new regressions are announced: generic JSON webhooks and Slack incoming
    webhooks (URLs)."""

    webhooks: tuple[str, ...] = ()
    slack: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunSettings:
    """``case_timeout_s``: seconds one case may run before it counts as hung.
    ``report_dir``: where reports and PR comments are written."""

    case_timeout_s: float = 300.0
    report_dir: str = "kernelwatch-reports"


@dataclass(frozen=True)
class Config:
    """Everything the flows read from the file, with defaults for what it leaves out."""

    path: Path | None
    repositories: Mapping[str, RepositoryConfig]
    pools: Mapping[str, PoolConfig]
    bench: BenchOptions = field(default_factory=BenchOptions)
    run: RunSettings = field(default_factory=RunSettings)
    detection: DetectorConfig = field(default_factory=DetectorConfig)
    verdict: VerdictConfig = field(default_factory=VerdictConfig)
    bisect: BisectSettings = field(default_factory=BisectSettings)
    notifications: Notifications = field(default_factory=Notifications)

    def repository(self, name: str | None) -> RepositoryConfig:
        """The repository ``name``, or the only one when ``name`` is None."""
        if name is None and len(self.repositories) == 1:
            return next(iter(self.repositories.values()))
        if name in self.repositories:
            return self.repositories[name]
        where = self.path or f"./{CONFIG_FILE}"
        if not self.repositories:
            raise ConfigError(
                f"{where}: no [[repositories]] configured; add one (docs/FLOWS.md) or point "
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
        return Config(None, {}, {})
    try:
        data = tomllib.loads(file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read it as TOML: {exc}") from exc
    return parse(data, file)


def parse(data: Mapping[str, Any], file: Path) -> Config:
    """Build a :class:`Config` from the file's parsed TOML."""
    known = {
        "database", "repositories", "pools", "bench", "detection", "verdict", "bisect",
        "notifications", "run",
    }  # fmt: skip
    for key in data:
        if key not in known:
            raise ConfigError(f"{file}: unknown table [{key}]; known: {', '.join(sorted(known))}")
    repos = _list_of_tables(data.get("repositories", []), "repositories", file)
    repositories: dict[str, RepositoryConfig] = {}
    for index, table in enumerate(repos):
        repo = _record(RepositoryConfig, table, f"[[repositories]] #{index + 1}", file)
        if repo.name in repositories:
            raise ConfigError(f"{file}: repository {repo.name!r} is configured twice")
        bad = [a for a in repo.archs if a not in ARCHS]
        if bad:
            raise ConfigError(
                f"{file}: [[repositories]] {repo.name}: unknown arch {', '.join(bad)}; "
                f"known: {', '.join(ARCHS)}"
            )
        repositories[repo.name] = repo
    pools_table = _table(data, "pools", file)
    pools: dict[str, PoolConfig] = {}
    for name, table in pools_table.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{file}: [pools.{name}] must be a table")
        pool = _record(PoolConfig, {"name": name, **table}, f"[pools.{name}]", file)
        pools[name] = dataclasses.replace(pool, work_pool=pool.work_pool or name)
    for repo in repositories.values():
        unknown = [p for p in repo.pools if p not in pools and p != LOCAL_POOL]
        if unknown:
            raise ConfigError(
                f"{file}: [[repositories]] {repo.name}: pools {', '.join(unknown)} are not "
                "defined under [pools]"
            )
    bench = _record(BenchOptions, _table(data, "bench", file), "[bench]", file, _BENCH_KEYS)
    return Config(
        path=file,
        repositories=repositories,
        pools=pools,
        bench=bench,
        run=_record(RunSettings, _table(data, "run", file), "[run]", file),
        detection=_record(DetectorConfig, _table(data, "detection", file), "[detection]", file),
        verdict=_record(
            VerdictConfig, _table(data, "verdict", file), "[verdict]", file, _VERDICT_KEYS
        ),
        bisect=_record(BisectSettings, _table(data, "bisect", file), "[bisect]", file),
        notifications=_record(
            Notifications, _table(data, "notifications", file), "[notifications]", file
        ),
    )


# The BenchOptions and VerdictConfig fields that make sense in a file (the rest are computed
# or per-invocation).
_BENCH_KEYS = (
    "timer", "l2", "target_rel_ci", "min_samples", "min_time_s", "budget_s", "timeout_s",
    "warmup_s", "cool_down_s", "baseline",
)  # fmt: skip
_VERDICT_KEYS = ("margin", "alpha", "confidence", "resamples", "seed")

_T = TypeVar("_T")


def _record(
    cls: type[_T],
    table: Mapping[str, Any],
    where: str,
    file: Path,
    allowed: tuple[str, ...] | None = None,
) -> _T:
    """An instance of the dataclass ``cls`` from ``table``, each value checked against the
    field's type; unknown keys and wrong types name the key."""
    hints = typing.get_type_hints(cls)
    names = allowed or tuple(f.name for f in dataclasses.fields(cls) if f.init)  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in names:
            raise ConfigError(f"{file}: {where}: unknown key {key!r}; known: {', '.join(names)}")
        values[key] = _coerce(value, hints[key], f"{where} {key}", file)
    try:
        return cls(**values)
    except TypeError as exc:
        missing = [
            f.name
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.name not in values
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        raise ConfigError(f"{file}: {where}: missing key {', '.join(missing)}") from exc


def _coerce(value: Any, hint: Any, where: str, file: Path) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(value, inner, where, file)
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{file}: {where} must be a list of strings")
        return tuple(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{file}: {where} must be true or false")
        return value
    if hint in (int, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{file}: {where} must be a number")
        if hint is int and not isinstance(value, int):
            raise ConfigError(f"{file}: {where} must be an integer")
        return hint(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{file}: {where} must be a string")
        return value
    raise ConfigError(f"{file}: {where} cannot be set from the file")


def _table(data: Mapping[str, Any], key: str, file: Path) -> Mapping[str, Any]:
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{file}: [{key}] must be a table")
    return table


def _list_of_tables(value: Any, key: str, file: Path) -> list[Mapping[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ConfigError(f"{file}: {key} must be an array of tables ([[{key}]])")
    return value
