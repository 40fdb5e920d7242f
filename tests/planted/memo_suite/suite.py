"""The suite's entry: its kernels, from a module each."""

from kernelwatch.harness.spec import Suite
from memo_suite import scale, shift

SUITE = Suite(name="memo", kernels=(scale.SPEC, shift.SPEC))
