"""The suite's entry: its kernels, from a module each (held here by name too, as a package's
``__init__`` re-exports them: the entry is not what a kernel's code imports)."""

from kernelwatch.harness.spec import Suite
from memo_suite.scale import SPEC as SCALE
from memo_suite.shift import SPEC as SHIFT

SUITE = Suite(name="memo", kernels=(SCALE, SHIFT))
