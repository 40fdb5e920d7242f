"""The identities the store keys on: a case (workload-, device- and method-independent) and
a series (one line on a chart)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kernelwatch.harness.records import CaseId, Method


def canonical_params(case: CaseId) -> str:
    """The case parameters as canonical JSON (sorted keys, no spaces)."""
    return _canonical(dict(case.params))


def case_key(case: CaseId) -> str:
    """A hash of (suite, kernel, canonical params, dtype). Series and correctness results of
    one case share it."""
    return _hash([case.suite, case.kernel, dict(case.params), case.dtype])


def series_key(
    repository: str, case: CaseId, device_model: str, method: Method, fabric: str | None = None
) -> str:
    """The series key: a hash of (repository, suite, kernel, canonical params, dtype, device
    model, method), and for a distributed case its fabric (``WorldInfo.fabric``: the
    interconnect and NCCL tuning; the world size is in the params). The workload is left
    out: the same case in two workloads is one line."""
    identity = [repository, case.suite, case.kernel, dict(case.params), case.dtype,
                device_model, method.timer, method.l2, method.harness_version]  # fmt: skip
    return _hash([*identity, fabric] if fabric is not None else identity)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _hash(identity: list[Any]) -> str:
    return hashlib.sha256(_canonical(identity).encode()).hexdigest()[:32]
