"""The built-in suite: Triton kernels that LLM serving uses (and SwiGLU again in CUDA C++ with
inline PTX and in the CuTe DSL), each with its spec.

It is an ordinary suite module (see ``docs/SUITES.md``): kernelwatch finds it through the
module-level ``SUITE``, exactly as it finds a suite in another repository.
"""

from kernelwatch.harness.spec import Suite
from kernelwatch.kernels.activation import SILU_AND_MUL
from kernelwatch.kernels.attention import FLASH_ATTENTION, SLIDING_WINDOW_ATTENTION
from kernelwatch.kernels.conformer_conv import CONFORMER_CONV
from kernelwatch.kernels.decode_attention import (
    PAGED_DECODE_ATTENTION,
    SLIDING_WINDOW_DECODE_ATTENTION,
)
from kernelwatch.kernels.fp4 import MXFP4_GEMM
from kernelwatch.kernels.fp8 import FP8_BLOCK_GEMM, FP8_GROUP_QUANT
from kernelwatch.kernels.gemm import GEMM
from kernelwatch.kernels.mla import MLA_DECODE
from kernelwatch.kernels.moe import FUSED_MOE
from kernelwatch.kernels.rmsnorm import FUSED_ADD_RMS_NORM, RMS_NORM
from kernelwatch.kernels.rope import ROPE
from kernelwatch.kernels.silu_cuda import SILU_AND_MUL_CUDA
from kernelwatch.kernels.silu_cute import SILU_AND_MUL_CUTE
from kernelwatch.kernels.softmax import SOFTMAX

SUITE = Suite(
    name="builtin",
    kernels=(
        RMS_NORM,
        FUSED_ADD_RMS_NORM,
        SOFTMAX,
        SILU_AND_MUL,
        SILU_AND_MUL_CUDA,
        SILU_AND_MUL_CUTE,
        ROPE,
        GEMM,
        FLASH_ATTENTION,
        SLIDING_WINDOW_ATTENTION,
        FP8_GROUP_QUANT,
        FP8_BLOCK_GEMM,
        MXFP4_GEMM,
        PAGED_DECODE_ATTENTION,
        SLIDING_WINDOW_DECODE_ATTENTION,
        MLA_DECODE,
        FUSED_MOE,
        CONFORMER_CONV,
    ),
)
