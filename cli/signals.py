"""Signals that end a command: the kernel children go first.

A kernel child leads its own process group (``harness/isolation/child.py``), so a signal sent to the
command's group (``timeout``, a CI job's cancellation, Ctrl-C) does not reach it; left
alone it would keep the GPU busy after the command is gone.
"""

from __future__ import annotations

import signal
from types import FrameType

from kernelwatch.harness.isolation.child import Stopped, stop

#: The signals that mean "stop now".
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


#: Raised in the main thread when a stop signal arrived (after the children were killed
#: and what they had written was read), so ``finally`` blocks run and the command can say
#: what it kept.
Terminated = Stopped


def end_children_on_signals() -> None:
    """Install the handler for :data:`STOP_SIGNALS`."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop)


def _stop(signum: int, frame: FrameType | None) -> None:
    # With children, whoever reads their output raises once it has read the records they
    # wrote before dying; raising here could drop those still in the pipe.
    if not stop(signum):
        raise Terminated(signum)
