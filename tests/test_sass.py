"""Parsing what ptxas and cuobjdump print, on text captured from real sm_90a/sm_100a builds."""

from __future__ import annotations

from kernelwatch.harness.build import sass

# ptxas-blackwell -v for a Triton softmax tile of 16384 at one warp (Triton 3.9, sm_90a).
PTXAS_SPILLING = """\
ptxas-blackwell info    : 0 bytes gmem
ptxas-blackwell info    : Compiling entry function 'k' for 'sm_90a'
ptxas-blackwell info    : Function properties for k
    2800 bytes stack frame, 7060 bytes spill stores, 10260 bytes spill loads
ptxas-blackwell info    : Used 64 registers, used 0 barriers, 2800 bytes cumulative stack size
ptxas-blackwell info    : Compile time = 932.941 ms
"""

# nvcc --resource-usage for two entry points of kernels/cuda/silu_and_mul.cu.
NVCC_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'silu_and_mul_bf16' for 'sm_90a'
ptxas info    : Function properties for silu_and_mul_bf16
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 28 registers, used 0 barriers
ptxas info    : Compiling entry function 'silu_and_mul_f16' for 'sm_90a'
ptxas info    : Function properties for silu_and_mul_f16
    0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 30 registers, used 0 barriers
"""

RESOURCE_USAGE = """
Resource usage:
 Common:
  GLOBAL:0
 Function gemm_kernel:
  REG:188 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:592 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function silu_and_mul_f32:
  REG:27 STACK:16 SHARED:0 LOCAL:8 CONSTANT[0]:568 TEXTURE:0 SURFACE:0 SAMPLER:0
"""

SASS = """
\tcode for sm_90a
\t.target\tsm_90a

\t\tFunction : gemm_kernel
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                          /* 0x000ff00000000800 */
        /*0010*/                   LDGSTS.E.BYPASS.128 [R27+0x18000], desc[UR28][R4.64], P2 ;
        /*0020*/              @!P0 LDG.E.U16 R2, desc[UR4][R2.64] ;                 /* 0x2 */
        /*0030*/                   HGMMA.64x256x16.F32 R24, gdesc[UR12], R24 ;      /* 0x3 */
        /*0040*/                   HGMMA.64x256x16.F32 R24, gdesc[UR12], R24 ;      /* 0x3 */
        /*0050*/                   STL [R1+0x9e8], R58 ;                            /* 0x4 */
        /*0060*/                   LDL.LU.64 R2, [R1+0x8] ;                         /* 0x5 */
        /*0070*/               @P0 EXIT ;                                           /* 0x6 */
        /*0080*/                   NOP;                                             /* 0x7 */
\t\t..........

\t\tFunction : silu_and_mul_f32
        /*0000*/                   LDG.E.NA.128.CONSTANT R4, desc[UR4][R2.64] ;     /* 0x8 */
        /*0010*/                   UTCHMMA gdesc[UR20], gdesc[UR22], tmem[UR6], tmem[UR8] ;
        /*0020*/                   UTMALDG.2D [UR8], [UR4] ;                        /* 0xa */
"""


def test_ptxas_log_spills():
    assert sass.parse_ptxas_log(PTXAS_SPILLING) == {"k": sass.Spills(2800, 7060, 10260)}
    spills = sass.parse_ptxas_log(NVCC_LOG)
    assert spills["silu_and_mul_bf16"] == sass.Spills(0, 0, 0)
    assert spills["silu_and_mul_f16"] == sass.Spills(0, 8, 4)


def test_resource_usage_per_function():
    usage = sass.parse_resource_usage(RESOURCE_USAGE)
    assert usage["gemm_kernel"] == sass.Resources(188, 0, 1024, 0)
    assert usage["silu_and_mul_f32"] == sass.Resources(27, 16, 0, 8)


def test_sass_histogram_and_what_follows():
    functions = sass.parse_sass(SASS)
    assert set(functions) == {"gemm_kernel", "silu_and_mul_f32"}
    gemm = sass.instruction_mix(functions["gemm_kernel"])
    assert gemm.opcodes["HGMMA.64x256x16.F32"] == 2
    assert gemm.opcodes["LDG.E.U16"] == 1  # predicated instructions count
    assert gemm.instructions == 8  # NOP padding is not counted
    assert gemm.tensor_core == "HGMMA"
    assert gemm.global_load_bits == 128
    assert (gemm.local_loads, gemm.local_stores, gemm.tma_loads) == (1, 1, 0)
    blackwell = sass.instruction_mix(functions["silu_and_mul_f32"])
    assert blackwell.tensor_core == "tcgen05"
    assert blackwell.tma_loads == 1
    assert blackwell.global_load_bits == 128


def test_tensor_core_classes():
    assert sass.tensor_core_class({"HMMA.16816.F32": 64}) == "HMMA"
    assert sass.tensor_core_class({"QGMMA.64x128x32.F32.E4M3.E4M3": 4}) == "QGMMA"
    assert sass.tensor_core_class({"UTCHMMA": 8, "HGMMA.64x8x16.F32": 1}) == "tcgen05"
    assert sass.tensor_core_class({"UTCQMMA": 2, "UTCHMMA": 1}) == "UTCQMMA"
    # tl.dot_scaled on e2m1 operands for sm_100a (Triton 3.9, a 128x128x256 tile): the
    # block-scaled FP4 MMA, ranked above fp8, so a fall-back to an fp8 or 16-bit MMA is a loss.
    assert sass.tensor_core_class({"UTCOMMA": 4, "UTCQMMA": 1}) == "UTCOMMA"
    rank = sass.TENSOR_CORE_RANK
    assert rank["UTCOMMA"] > rank["UTCQMMA"] > rank["tcgen05"]
    assert sass.tensor_core_class({"FFMA": 100}) == "none"


def test_load_width():
    assert sass.global_load_bits({"LDG.E": 3, "LDG.E.64": 1}) == 64
    assert sass.global_load_bits({"LDG.E.U8": 1}) == 8
    assert sass.global_load_bits({"STG.E.128": 1}) is None
