"""The self-check's traced decode step, read as a serving trace is read (issue 44, item 4).

The self-check's child runs one launch of each kernel's case, a few times, under
torch.profiler, and names the GPU functions each kernel launched
(``harness/selfcheck/measure.py``'s ``trace``). Here the real trace goes through the same
reader (``traces.py``) and matcher (``names.py``) a serving trace goes through, and the
table says whether what ``kernelwatch serving explain`` would compute from such a trace
holds on this GPU: every kernel event is counted once (the matched and the unmatched shares
sum to the step's GPU time), each function the child launched is found under its own name,
as often as it was launched. ``analysis/trust.py`` judges the numbers.
"""

from __future__ import annotations

import base64
import binascii
from collections import Counter
from collections.abc import Mapping
from typing import Any

from kernelwatch.serving.names import KnownKernel, base_name, match
from kernelwatch.serving.traces import NoKernelEvents, TraceError, chrome_trace

#: What the self-check's JSON names the trace in errors.
LABEL = "the self-check's trace"


def read_step(data: Mapping[str, Any]) -> dict[str, Any]:
    """The child's ``trace`` data with its trace read: the rows (each trace kernel, what it
    matched, its launches, GPU time and share), the matched and unmatched shares, and per
    launched function the launches expected (the child's count times the steps) and found.
    Data without a trace (the step failed) comes back as it is; a trace with no kernel events
    (the CPU) says so in ``line``, and one that cannot be read is an ``error``."""
    if "trace_gz" not in data:
        return dict(data)
    kept = {key: value for key, value in data.items() if key != "trace_gz"}
    try:
        raw = base64.b64decode(data["trace_gz"], validate=True)
        profile = chrome_trace(raw, LABEL)
    except NoKernelEvents as exc:
        return {**kept, "kernel_events": False, "line": str(exc)}
    except (TraceError, binascii.Error) as exc:
        return {**kept, "error": str(exc)}
    known = [
        KnownKernel(k["kernel"], tuple(k["functions"]), k.get("baseline", ""))
        for k in data["kernels"]
    ]
    matches = match(profile.kernels, known)
    rows = [
        {
            "trace": m.trace.name,
            "kernel": m.kernel,
            "role": m.role,
            "library": m.library,
            "launches": m.trace.launches,
            "gpu_ns": m.trace.gpu_ns,
            "share": m.trace.share,
        }
        for m in matches
    ]
    found: Counter[str] = Counter()
    for m in matches:
        if m.role == "kernel":
            found[m.trace.short_name] += m.trace.launches
    steps = int(data["steps"])
    launched: Counter[str] = Counter(
        base_name(function) for k in data["kernels"] for function in k["functions"]
    )
    return {
        **kept,
        "kernel_events": True,
        "device": profile.device,
        "gpu_ns": profile.gpu_ns,
        "rows": rows,
        "matched_share": sum(r["share"] for r in rows if r["kernel"] is not None),
        "unmatched_share": sum(r["share"] for r in rows if r["kernel"] is None),
        "rows_gpu_ns": sum(r["gpu_ns"] for r in rows),
        "functions": {
            function: {"expected": count * steps, "found": found.get(function, 0)}
            for function, count in sorted(launched.items())
        },
    }
