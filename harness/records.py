"""Typed records that flow harness -> store -> analysis, with a versioned JSON form.

Every record serialises to a JSON object carrying ``kind`` and ``schema_version``, added by
:class:`JsonRecord` alone. Each kind has its own version and chain of upgrades: a reader
upgrades an older record on load and refuses a kind it does not know or a version newer
than its own instead of guessing. This module imports neither torch nor Triton so the parent
process (CLI, store, analysis) stays light.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from types import UnionType
from typing import (
    Any,
    ClassVar,
    Literal,
    Self,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

Verdict = Literal["pass", "fail", "error", "unsupported"]
VERDICTS: tuple[Verdict, ...] = ("pass", "fail", "error", "unsupported")

_T = TypeVar("_T")

#: One step of a kind's schema: a pure function from a version-n record's JSON fields
#: (without ``kind`` and ``schema_version``) to version n+1's.
Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


class RecordError(ValueError):
    """A JSON record that is malformed, of another kind, or of an unknown schema version."""


@dataclass(frozen=True)
class LaunchConfig:
    """One point of a kernel's tuning space: constexpr meta-parameters plus warps and stages."""

    meta: Mapping[str, int]
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        for name in ("num_warps", "num_stages"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"LaunchConfig.{name} must be an int >= 1, got {value!r}")

    def label(self) -> str:
        """A short stable text such as ``BLOCK_M=64,BLOCK_N=64,w4,s3``."""
        parts = [f"{k}={v}" for k, v in sorted(self.meta.items())]
        return ",".join([*parts, f"w{self.num_warps}", f"s{self.num_stages}"])

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchConfig:
        return cls(dict(data["meta"]), int(data["num_warps"]), int(data["num_stages"]))


@dataclass(frozen=True)
class SoftwareInfo:
    """Versions of everything between the kernel source and the hardware. ``suite_source``
    is the suite file the runner imported and the revision of the checkout it came from
    (``kernelwatch_suite.py @ 3f2a9c01d2e4``; the path alone outside a git checkout)."""

    kernelwatch: str
    python: str
    torch: str
    triton: str
    cuda: str | None
    driver: str | None
    suite_source: str | None = None


@dataclass(frozen=True)
class DeviceInfo:
    """The device a record was produced on. ``kind`` is ``cuda`` or ``cpu``; on the CPU,
    ``interpreter`` says Triton ran through ``TRITON_INTERPRET=1``."""

    kind: str
    name: str
    host: str
    interpreter: bool
    uuid: str | None = None
    capability: str | None = None
    sm_count: int | None = None
    l2_bytes: int | None = None


#: The default family of a kernel (how the dashboards' kernel pickers group kernels), by the
#: words of its name: the first family one of whose words the name has, in this order (so
#: ``fused_add_rms_norm`` is a norm). A name with none of them has no family ("").
FAMILY_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("norm", ("norm",)),
    ("gemm", ("gemm", "quant")),
    ("attention", ("attention", "decode")),
    ("moe", ("moe",)),
    ("elementwise", ("softmax", "silu", "rope")),
    ("asr", ("conformer",)),
)


def default_family(kernel: str) -> str:
    """The family ``kernel``'s name gives it (:data:`FAMILY_WORDS`), or "" for none."""
    words = set(kernel.split("_"))
    return next((family for family, names in FAMILY_WORDS if words & set(names)), "")


@dataclass(frozen=True)
class CaseId:
    """What was checked: one kernel, one case of one workload, one dtype, from one suite.

    ``family`` is the kernel's family as its spec declares it; None (a record written
    before specs declared one, or one made without the spec) takes the family the kernel's
    name gives (:func:`default_family`). It is not part of the case's identity."""

    suite: str
    kernel: str
    workload: str
    params: Mapping[str, int | float | str | bool]
    dtype: str
    family: str | None = None

    def __post_init__(self) -> None:
        if self.family is None:
            object.__setattr__(self, "family", default_family(self.kernel))

    def label(self) -> str:
        """The case parameters as compact text, e.g. ``m=33 n=40 k=48``."""
        return " ".join(f"{k}={v}" for k, v in self.params.items())

    def key(self) -> str:
        """A stable hash of the identity (params in canonical order)."""
        canonical = json.dumps(
            [self.suite, self.kernel, self.workload, dict(self.params), self.dtype],
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class JsonRecord:
    """The versioned JSON form every top-level record shares: ``to_json``/``dumps`` write it,
    ``from_json`` reads it back, upgrading an older version and refusing another kind or a
    newer version.

    A record class declares its kind and its upgrades in its class statement,
    ``class Measurement(JsonRecord, kind="measurement", upgrades=(v1_to_v2,))``: its
    ``UPGRADES[i]`` turns version i+1 into version i+2, so the version it writes is one more
    than the number of its upgrades. A subclass that names no kind is the same kind as its
    parent (a record grown in a test, say) and is not registered for reading.
    """

    KIND: ClassVar[str]
    UPGRADES: ClassVar[tuple[Upgrade, ...]]

    def __init_subclass__(
        cls, *, kind: str | None = None, upgrades: Sequence[Upgrade] = (), **kwargs: Any
    ):
        super().__init_subclass__(**kwargs)
        if kind is None:
            if not hasattr(cls, "KIND"):
                raise TypeError(f"{cls.__name__}: a record class declares kind=...")
            return
        if kind in _KINDS:
            raise TypeError(f"record kind {kind!r} is declared twice")
        cls.KIND = kind
        cls.UPGRADES = tuple(upgrades)
        _KINDS[kind] = cls

    @classmethod
    def schema_version(cls) -> int:
        """The version of this kind that this kernelwatch writes, and the newest it reads."""
        return 1 + len(cls.UPGRADES)

    def to_json(self) -> dict[str, Any]:
        return _encode(self)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        body = _upgraded(cls, data)
        try:
            return _decode(cls, body)
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"malformed {cls.KIND} record: {exc}") from exc


_KINDS: dict[str, type[JsonRecord]] = {}
_HEADER = ("kind", "schema_version")


@dataclass(frozen=True)
class CorrectnessResult(JsonRecord, kind="correctness"):
    """The verdict for one case, with the evidence behind it.

    ``reason`` is empty on a pass and otherwise one line saying what was wrong;
    ``detail`` keeps a traceback or a crashed process's stderr tail.
    """

    case: CaseId
    verdict: Verdict
    reason: str
    tolerance: float
    seed: int
    device: DeviceInfo
    software: SoftwareInfo
    rel_error: float | None = None
    max_abs_error: float | None = None
    nonfinite: int = 0
    unwritten: int = 0
    deterministic: bool | None = None
    config: LaunchConfig | None = None
    duration_s: float = 0.0
    detail: str = ""
    world: WorldInfo | None = None
    failed_ranks: tuple[int, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CorrectnessResult:
        record = super().from_json(data)
        if record.verdict not in VERDICTS:
            raise RecordError(f"unknown verdict {record.verdict!r}")
        return record


@dataclass(frozen=True)
class Method:
    """How a time was measured. Part of a series' identity: a change of method starts a new
    series (and an annotation), so it can never show up as a regression.

    ``timer`` is ``cuda-events``, ``cuda-graph``, ``cpu-perf-counter`` or ``cpu-process-time``;
    ``l2`` is ``cold`` (flushed before every sample) or ``warm``.
    """

    timer: str
    l2: str
    harness_version: int

    def label(self) -> str:
        """A short stable text such as ``cuda-events/cold/h1``."""
        return f"{self.timer}/{self.l2}/h{self.harness_version}"


@dataclass(frozen=True)
class Summary:
    """The statistic over the samples that count (throttled samples are left out).

    ``stop`` says why sampling ended: ``converged`` (CI half-width under target),
    ``budget`` (time ran out first; the CI is wider than asked) or ``timeout`` (the hard time
    limit hit before enough unthrottled samples were taken; ``n`` is below the minimum).
    """

    n: int
    median_ns: float
    ci_low_ns: float
    ci_high_ns: float
    mean_ns: float
    min_ns: float
    p10_ns: float
    p90_ns: float
    stop: str
    rel_ci_halfwidth: float


@dataclass(frozen=True)
class Telemetry:
    """What the device reported while the samples were taken (NVML). Every field is None when
    NVML was unavailable (``available`` False): unknown, never guessed."""

    available: bool
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    throttle_reasons: int | None = None
    other_processes: int | None = None


@dataclass(frozen=True)
class SpeedOfLight:
    """Achieved throughput against the device's peak. ``peak_source`` is ``datasheet`` or
    ``measured``; the percentages are None where the device has no known peak."""

    tflops: float | None
    gbps: float | None
    pct_compute: float | None
    pct_memory: float | None
    pct_sol: float | None
    bound: str | None
    peak_source: str | None


@dataclass(frozen=True)
class RankInfo:
    """One rank of a distributed case: where it ran (``uuid`` None on the CPU)."""

    rank: int
    host: str
    device: str
    uuid: str | None = None


@dataclass(frozen=True)
class WorldInfo:
    """The ranks a distributed case ran on, and what between them moves its numbers.

    ``backend`` is ``nccl`` or ``gloo``; ``interconnect`` is ``nvlink``, ``pcie`` or
    ``loopback`` (gloo on one host), with ``+network`` when the ranks span nodes, and
    ``links`` the link type ``nvidia-smi topo -m`` shows between them (``NV18``, ``PIX``);
    ``nccl_env`` the ``NCCL_*`` variables in force (debugging switches left out)."""

    backend: str
    world_size: int
    nodes: int
    interconnect: str
    ranks: tuple[RankInfo, ...]
    links: str = ""
    nccl_version: str | None = None
    nccl_env: Mapping[str, str] = field(default_factory=dict)

    def fabric(self) -> str:
        """What of the world belongs in a series' identity beside the case's world size:
        the interconnect and the NCCL tuning, as one canonical text (``nvlink``,
        ``nvlink NCCL_ALGO=Ring``). GPU UUIDs and the NCCL version are left out: another
        node of the same model is the same series, and an NCCL upgrade that slows a
        collective is a regression to catch, not a new line."""
        tuning = [f"{k}={v}" for k, v in sorted(self.nccl_env.items())]
        return " ".join([self.interconnect, *tuning])


@dataclass(frozen=True)
class Bandwidth:
    """A collective's bandwidth as nccl-tests reports it: ``algbw = message_bytes / time``,
    ``busbw = algbw * bus_factor`` (GB/s, 1e9 B/s, at the median time), against the
    interconnect's unidirectional peak per GPU (None when unknown)."""

    collective: str
    message_bytes: int
    bus_factor: float
    algbw_gbps: float
    busbw_gbps: float
    peak_gbps: float | None = None


@dataclass(frozen=True)
class Measurement(JsonRecord, kind="measurement"):
    """The timing of one case: every raw sample, the statistic, telemetry, speed-of-light and
    the stock-library baseline timed in the same run.

    ``status`` is ``ok``, ``unsupported`` or ``error`` (``reason`` says why, ``detail`` keeps
    a traceback). ``sm_clock_mhz``, ``mem_clock_mhz`` and ``throttled`` are per sample,
    parallel to ``samples_ns``; the clock tuples are empty when no clock could be read.
    ``baseline_samples_ns`` and ``baseline_throttled`` are the baseline's raw samples, taken
    interleaved with the kernel's. ``config_source`` says where ``config`` came from:
    ``autotune``, ``pin-file``, ``checked`` (the config the correctness check verified),
    ``shared`` (an A/B's B side launching A's autotuned config), ``pinned`` (the spec's
    pinned config, on a device that cannot autotune) or ``heuristic`` (the kernel chose
    without a tuning space). ``sm_clock_mhz`` is the SM clock over each sample, as the GPU
    measured it (NVML's reading where it could not); a sample is ``throttled`` when that
    clock was below 75% of the device's maximum. ``build_identity`` is the case's build
    identity (``analysis/build_identity.py``), set by the parent where it is known: equal
    on two measurements, they ran the same GPU work. ``unjudged`` is set by the nightly's
    parent on a point whose CI half-width stayed wider than the margin it would be judged by
    after it was measured again (``analysis/suspicion.py``'s :func:`too_wide`): stored, shown
    as such, and kept out of the level later nights are compared with.
    """

    case: CaseId
    status: str
    reason: str
    method: Method
    device: DeviceInfo
    software: SoftwareInfo
    config: LaunchConfig | None = None
    samples_ns: tuple[float, ...] = ()
    sm_clock_mhz: tuple[float, ...] = ()
    throttled: tuple[bool, ...] = ()
    summary: Summary | None = None
    telemetry: Telemetry | None = None
    sol: SpeedOfLight | None = None
    baseline: str | None = None
    baseline_median_ns: float | None = None
    speedup: float | None = None
    duration_s: float = 0.0
    detail: str = ""
    mem_clock_mhz: tuple[float, ...] = ()
    baseline_samples_ns: tuple[float, ...] = ()
    baseline_throttled: tuple[bool, ...] = ()
    config_source: str | None = None
    world: WorldInfo | None = None
    bandwidth: Bandwidth | None = None
    failed_ranks: tuple[int, ...] = ()
    build_identity: str | None = None
    unjudged: bool = False


@dataclass(frozen=True)
class ABMeasurement(JsonRecord, kind="ab"):
    """One case timed at two commits interleaved (A B A B ...) in one session on one device:
    the primitive of PR checks (A = the base, B = the head) and bisection (A = the known-good
    commit, B = the probed one).

    ``base`` and ``head`` are each side's full :class:`Measurement` (raw samples, clocks,
    throttle flags, summary, config) from that one session, with no stock-library baseline,
    so each can be stored in its own commit's run. ``status`` is ``ok`` (both sides timed),
    ``unsupported`` (either side lacks the case, or the device cannot run it) or ``error``
    (either side raised, crashed, hung, wrote NaN/Inf, or throttled through every sample);
    then ``reason`` names the side and ``detail`` keeps the traceback or the dead child's
    stderr tail. ``base`` and ``head`` are None when the case was not timed.
    """

    case: CaseId
    status: str
    reason: str
    method: Method
    device: DeviceInfo
    software: SoftwareInfo
    base: Measurement | None = None
    head: Measurement | None = None
    duration_s: float = 0.0
    detail: str = ""

    def sides(self) -> tuple[Measurement, Measurement]:
        """The base and head measurements to store in each commit's run; a case that was
        not timed gives two records of this one's status, reason and detail."""
        if self.base is not None and self.head is not None:
            return self.base, self.head
        untimed = Measurement(
            case=self.case,
            status=self.status,
            reason=self.reason,
            method=self.method,
            device=self.device,
            software=self.software,
            duration_s=self.duration_s,
            detail=self.detail,
        )
        return untimed, untimed


@dataclass(frozen=True)
class BuildMetrics(JsonRecord, kind="build"):
    """Static metrics of one compiled kernel: one function x config x target architecture.

    ``status`` is ``ok`` or ``error`` (``reason`` one line, ``detail`` the compiler output).
    ``tensor_core`` is the instruction class found in the SASS: ``HGMMA``, ``QGMMA``,
    ``tcgen05``, ``UTCQMMA``, ``UTCOMMA``, ``HMMA`` or ``none``. The artifact's identity is
    ``cubin_sha256``;
    ``sass_sha256`` is the function's instruction stream alone (the same code with its debug
    line table moved has the same one).
    One kernel launches with a different specialisation (divisibility by 16, unit strides,
    arguments equal to 1) for different shapes: ``dtype`` and ``case`` (the label of the first
    case of ``workload`` that compiles to this specialisation) tell those builds apart, and
    ``launch_index``, the launch's position in that case's launch sequence: a case that
    launches one function twice (fused MoE's two grouped GEMMs) has a build for each, and
    each is compared with its own counterpart. ``family`` is the kernel's family, as on
    :class:`CaseId`.
    """

    suite: str
    kernel: str
    function: str
    language: str
    arch: str
    config: LaunchConfig | None
    status: str
    reason: str = ""
    registers: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    stack_bytes: int | None = None
    shared_static_bytes: int | None = None
    shared_dynamic_bytes: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    tensor_core: str | None = None
    tma_loads: int | None = None
    global_load_bits: int | None = None
    local_loads: int | None = None
    local_stores: int | None = None
    instructions: int | None = None
    opcodes: Mapping[str, int] = field(default_factory=dict)
    cubin_bytes: int | None = None
    cubin_sha256: str | None = None
    source_hash: str | None = None
    sass_sha256: str | None = None
    compile_s: float = 0.0
    cached: bool = False
    toolchain: Mapping[str, str] = field(default_factory=dict)
    detail: str = ""
    dtype: str = ""
    workload: str = ""
    case: str = ""
    family: str | None = None
    launch_index: int = 0

    def __post_init__(self) -> None:
        if self.family is None:  # as on CaseId: an older record, or one made without the spec
            object.__setattr__(self, "family", default_family(self.kernel))


@dataclass(frozen=True)
class LaunchStep:
    """One launch of a case for one target, as the build stage recorded it: ``position``
    in the case's launch sequence (an autotuner's candidates share one), the build that
    compiled it (the :class:`BuildMetrics` of ``kernel``, the case's dtype, ``build_case``,
    ``build_index``, ``config`` and ``arch``: a specialisation several cases share is built
    once, under the first), its ``work``: the grid and every argument as text, None when
    the recorder could not describe them, and ``key``: the build's cache key (source hash,
    specialisation, target, toolchain), what identifies the launch where its dtype is not
    built."""

    arch: str
    position: int
    function: str
    build_case: str
    build_index: int
    config: LaunchConfig | None
    work: str | None
    key: str | None = None


@dataclass(frozen=True)
class CaseRecipe(JsonRecord, kind="recipe"):
    """What one case (``kernel``, ``dtype``, ``params`` of ``workload``, ``case`` their
    label) runs on the GPU, as recorded on the meta device by the build stage, for every
    config and target: its launches in order, and ``host``, a digest of the rest (the
    inputs' shapes and the code that makes them, the device work the host code does between
    launches, the environment). ``unknown`` says why the case cannot be identified ("" when
    it can): a library call in its launch, an argument or input the recorder cannot
    describe. With the builds it names, it gives the case's build identity
    (``analysis/build_identity.py``)."""

    suite: str
    kernel: str
    dtype: str
    workload: str
    case: str
    params: Mapping[str, int | float | str | bool]
    steps: tuple[LaunchStep, ...]
    host: str
    unknown: str = ""


@dataclass(frozen=True)
class CommitInfo:
    """A commit of a kernel repository, as git reports it."""

    sha: str
    parents: tuple[str, ...]
    author_time: str
    message: str
    branch: str | None = None


TRIGGERS = ("nightly", "pr", "bisect", "manual")

#: The stages that hold a device, as ``StageTime.stage`` names them: the correctness check,
#: the timing, an A/B (the same night's confirmation, a PR check's comparison), a bisection's
#: probes and the GPU host's self-check. The build is not among them: it compiles on the
#: worker's CPUs and takes no device slot.
STAGES = ("check", "bench", "ab", "bisect", "selfcheck")


@dataclass(frozen=True)
class StageTime:
    """The device seconds one stage of a run spent: the wall time, by the parent's clock,
    from its first child's start to its last child's end (their imports, compiles, restarts
    and timeouts included: what a GPU-hour pays for), and the case records it produced. On a
    CPU run the same clock runs, so the figure says what the stage would hold."""

    stage: str
    device_s: float
    cases: int = 0

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"unknown stage {self.stage!r}; expected one of {STAGES}")
        if not self.device_s >= 0 or self.cases < 0:
            raise ValueError(f"a stage's seconds and cases are not negative: {self}")


@dataclass(frozen=True)
class RunInfo(JsonRecord, kind="run"):
    """The header of one run: one commit (and, for a PR, its base) on one device.

    ``run_id`` is a UUID the producer picks before measuring anything, so ingest is
    idempotent and a spooled run is replayed exactly once. ``status`` is ``running``,
    ``ok`` (everything ran), ``partial`` (some cases errored) or ``failed``.
    """

    run_id: str
    trigger: str
    repository: str
    suite: str
    commit: CommitInfo | None
    device: DeviceInfo
    software: SoftwareInfo
    started_at: str
    status: str = "running"
    finished_at: str | None = None
    base_commit: str | None = None
    pool: str | None = None
    orchestration_id: str | None = None
    #: The device time its stages spent; stages run for it afterwards (the same night's
    #: A/B) are added to the store then (``store/device_time.py``).
    stages: tuple[StageTime, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunInfo:
        record = super().from_json(data)
        if record.trigger not in TRIGGERS:
            raise RecordError(f"unknown trigger {record.trigger!r}; expected one of {TRIGGERS}")
        return record


Record = CorrectnessResult | Measurement | ABMeasurement | BuildMetrics | RunInfo
CaseRecord = TypeVar("CaseRecord", CorrectnessResult, Measurement, ABMeasurement)


def in_family(record: CaseRecord, family: str) -> CaseRecord:
    """``record`` with its case (and an A/B's two sides) in kernel family ``family``: the
    runner names the family from the spec once, whichever stage made the record."""
    case = replace(record.case, family=family)
    if isinstance(record, ABMeasurement):
        sides = {
            side: in_family(measured, family)
            for side in ("base", "head")
            if (measured := getattr(record, side)) is not None
        }
        return replace(record, case=case, **sides)
    return replace(record, case=case)


def read_record(data: Mapping[str, Any]) -> Record:
    """Decode any record by its ``kind``, upgrading an older version."""
    if not isinstance(data, Mapping):
        raise RecordError(f"expected a JSON object, got {type(data).__name__}")
    cls = _KINDS.get(data.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise RecordError(f"unknown record kind {data.get('kind')!r}; known: {sorted(_KINDS)}")
    return cls.from_json(data)  # type: ignore[return-value]


def _encode(value: Any) -> Any:
    # Every record, nested ones too, carries its header; mappings and tuples become plain
    # JSON objects and arrays.
    if is_dataclass(value) and not isinstance(value, type):
        body = {f.name: _encode(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, JsonRecord):
            return {"kind": value.KIND, "schema_version": value.schema_version(), **body}
        return body
    if isinstance(value, Mapping):
        return {key: _encode(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(item) for item in value]
    return value


def _upgraded(cls: type[JsonRecord], data: Mapping[str, Any]) -> dict[str, Any]:
    """``data``'s fields, without the header, upgraded to ``cls``'s current version."""
    if not isinstance(data, Mapping):
        raise RecordError(f"expected a JSON object, got {type(data).__name__}")
    kind, version, current = cls.KIND, data.get("schema_version"), cls.schema_version()
    if data.get("kind") != kind:
        raise RecordError(f"expected a {kind!r} record, got kind={data.get('kind')!r}")
    if type(version) is not int or version < 1:
        raise RecordError(
            f"{kind} record has schema_version={version!r}; expected a version from 1 to {current}"
        )
    if version > current:
        raise RecordError(
            f"{kind} record has schema_version={version}; this kernelwatch reads version "
            f"{current} and older: upgrade kernelwatch to read it"
        )
    body = {k: v for k, v in data.items() if k not in _HEADER}
    for upgrade in cls.UPGRADES[version - 1 :]:
        body = upgrade(body)
    return body


def _decode(cls: type[_T], data: Mapping[str, Any]) -> _T:
    if not isinstance(data, Mapping):
        raise TypeError(f"{cls.__name__} must be a JSON object, got {type(data).__name__}")
    hints = get_type_hints(cls)
    names = [f.name for f in fields(cls) if f.name in data]  # type: ignore[arg-type]
    return cls(**{name: _convert(hints[name], data[name]) for name in names})


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    options = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    for option in options:
        if isinstance(option, type) and issubclass(option, JsonRecord):
            return option.from_json(value)
        if is_dataclass(option):
            return _decode(option, value)
        if get_origin(option) is tuple:
            item = get_args(option)[0]
            return tuple(_convert(item, v) for v in value) if is_dataclass(item) else tuple(value)
    return value
