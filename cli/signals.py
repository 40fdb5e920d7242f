"""Signals that end a command: the runner children go first.

A runner child leads its own process group (``harness/child.py``), so a signal sent to the
command's group (``timeout``, a CI job's cancellation, Ctrl-C) does not reach it; left
alone it would keep the GPU busy after the command is gone.
"""

from __future__ import annotations

import signal
from types import FrameType

from kernelwatch.harness.child import kill_all

#: The signals that mean "stop now".
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Terminated(BaseException):
    """Raised in the main thread when a stop signal arrived (after the children were
    killed), so ``finally`` blocks run and the command can say what it kept."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def end_children_on_signals() -> None:
    """Install the handler for :data:`STOP_SIGNALS`."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop)


def _stop(signum: int, frame: FrameType | None) -> None:
    kill_all()
    raise Terminated(signum)
