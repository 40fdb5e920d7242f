"""Block-scaled FP4 GEMM: MXFP4 (the OCP microscaling format: e2m1 values, two a byte, with
one e8m0 power-of-two scale per 32 values along K), as FP4 inference stores weights and
activations; products accumulated in fp32, output in bf16.

One Triton kernel, ``tl.dot_scaled`` on e2m1 operands, and its quantiser (in torch: it
makes the inputs; the reference is the float64 product of the values it dequantises to, so
the kernel's error is its accumulation and output rounding alone). For sm_100a it compiles
to Blackwell's block-scaled FP4 MMA (``UTCOMMA``, tcgen05 ``kind::mxf4``); Hopper has no FP4
tensor cores, and for sm_90a the same code runs wgmma on operands upcast to bf16 (``HGMMA``):
an emulation, which the build says (``harness/build/sass.py``'s ``emulation``). NVFP4 (e4m3
scales per 16) is left out: Triton's interpreter here takes e8m0 scales only, so it could
not be checked on the CPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwatch.harness.device import INTERPRETER_GAPS
from kernelwatch.harness.spec import (
    DEFAULT_TOLERANCE,
    Baseline,
    KernelSpec,
    KernelUnsupported,
    LaunchConfig,
    Params,
    Tensors,
)
from kernelwatch.kernels.inputs import blocky
from kernelwatch.kernels.models import (
    DECODE_TOKENS,
    LLAMA_3_1_70B,
    PREFILL_TOKENS,
    dense_projections,
)
from kernelwatch.kernels.tuning import Tunable

#: e2m1's magnitudes, by the low three bits of a code (the fourth is the sign).
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
#: e2m1's largest exponent: a group's scale is 2^(floor(log2(amax)) - 2).
E2M1_EMAX = 2
#: Values sharing one e8m0 scale (MX's block size), and e8m0's exponent bias.
MX_GROUP, E8M0_BIAS = 32, 127


@triton.jit
def mxfp4_gemm_kernel(
    a_ptr,
    b_ptr,
    a_scale_ptr,
    b_scale_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_bn,
    stride_cm,
    stride_asm,
    stride_bsn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows, cols = rm[:, None] < M, rn[None, :] < N
    rm64, rn64 = rm.to(tl.int64), rn.to(tl.int64)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        # Two e2m1 values a byte along K; one e8m0 scale per GROUP of them. Past M, N or K
        # a load reads zeros (scale 2^0): zero products, or outputs never stored.
        kb = k // 2 + tl.arange(0, BLOCK_K // 2)
        in_k = kb < K // 2
        a = tl.load(
            a_ptr + rm64[:, None] * stride_am + kb[None, :], mask=rows & in_k[None, :], other=0
        )
        b = tl.load(
            b_ptr + rn64[None, :] * stride_bn + kb[:, None], mask=cols & in_k[:, None], other=0
        )
        ks = k // GROUP + tl.arange(0, BLOCK_K // GROUP)
        in_g = ks < K // GROUP
        sa = tl.load(
            a_scale_ptr + rm64[:, None] * stride_asm + ks[None, :],
            mask=rows & in_g[None, :],
            other=127,
        )
        sb = tl.load(
            b_scale_ptr + rn64[:, None] * stride_bsn + ks[None, :],
            mask=(rn[:, None] < N) & in_g[None, :],
            other=127,
        )
        acc = tl.dot_scaled(a, sa, "e2m1", b, sb, "e2m1", acc)
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm64[:, None] * stride_cm + rn[None, :], c, mask=rows & cols)


# 128 rows a tile: with 64, Triton 3.9 compiles tl.dot_scaled for sm_100a to a 16-bit tcgen05
# MMA on upcast operands (measured: 255 registers, 100 B of spill stores, no UTCOMMA).
MXFP4_GEMM_CONFIGS = tuple(
    LaunchConfig({"BLOCK_M": 128, "BLOCK_N": bn, "BLOCK_K": bk}, w, s)
    for bn, bk, w, s in ((128, 256, 4, 3), (128, 128, 4, 4), (64, 256, 4, 3))
)
# Small enough for the CPU interpreter; BLOCK_K 64 is two scale groups a step.
MXFP4_GEMM_PINNED = LaunchConfig({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 64}, 4, 2)
MXFP4_GEMM_TUNABLE = Tunable(mxfp4_gemm_kernel, MXFP4_GEMM_CONFIGS, key=["M", "N", "K"])


def mxfp4_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scales: torch.Tensor,
    b_scales: torch.Tensor,
    c: torch.Tensor,
    config: LaunchConfig | None,
) -> LaunchConfig:
    """``c = dequant(a) @ dequant(b).T``: ``a`` (M, K/2) and ``b`` (N, K/2) packed e2m1 (uint8),
    ``a_scales`` (M, K/32) and ``b_scales`` (N, K/32) e8m0 (uint8); K a multiple of 32."""
    (m, half_k), (n, half_k_b) = a.shape, b.shape
    k = 2 * half_k
    if c.device.type == "cpu" and c.dtype == torch.bfloat16:
        raise KernelUnsupported(INTERPRETER_GAPS["bf16"])
    groups = k // MX_GROUP
    if (
        k % MX_GROUP
        or half_k != half_k_b
        or a_scales.shape != (m, groups)
        or (b_scales.shape != (n, groups))
    ):
        raise ValueError(
            f"mxfp4 gemm shapes do not chain: A {tuple(a.shape)} B {tuple(b.shape)} scales "
            f"{tuple(a_scales.shape)} and {tuple(b_scales.shape)} (K = {k})"
        )
    args = (a, b, a_scales, b_scales, c, m, n, k, a.stride(0), b.stride(0), c.stride(0))
    args += (a_scales.stride(0), b_scales.stride(0))

    def grid(meta: dict[str, int]) -> tuple[int, int]:
        return (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))

    return MXFP4_GEMM_TUNABLE.launch(grid, args, {"GROUP": MX_GROUP}, config)


def quantize_mxfp4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MX quantisation of ``x`` (M, K; K a multiple of 32): each group of 32 along K scaled by
    2^(floor(log2(amax)) - 2) so its largest value lands in e2m1's top binade, each value
    rounded to the nearest e2m1 (ties to the smaller magnitude) and saturated at 6. Returns
    the codes packed two a byte (the even element in the low nibble) and the e8m0 scales."""
    m, k = x.shape
    groups = x.float().reshape(m, k // MX_GROUP, MX_GROUP)
    amax = groups.abs().amax(-1).clamp(min=2.0**-126)
    exponent = torch.floor(torch.log2(amax)) - E2M1_EMAX
    values = (groups / torch.exp2(exponent)[..., None]).clamp(-E2M1[-1], E2M1[-1])
    grid = torch.tensor(E2M1, device=x.device)
    codes = (values.abs()[..., None] - grid).abs().argmin(-1) | ((values < 0).long() << 3)
    codes = codes.reshape(m, k).to(torch.uint8)
    return codes[:, 0::2] | (codes[:, 1::2] << 4), (exponent + E8M0_BIAS).to(torch.uint8)


def dequantize_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The float64 values ``packed`` and ``scales`` stand for (:func:`quantize_mxfp4`)."""
    codes = torch.stack([packed & 15, packed >> 4], -1).reshape(packed.shape[0], -1).long()
    grid = torch.tensor(E2M1, dtype=torch.float64, device=packed.device)
    values = grid[codes & 7] * torch.where(codes >= 8, -1.0, 1.0).to(torch.float64)
    scale = torch.exp2(scales.to(torch.float64) - E8M0_BIAS)
    return values * scale.repeat_interleave(MX_GROUP, dim=1)


def _quantized(
    rows: int, k: int, device: torch.device, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random values whose 32-groups span 2^-4..2^4 in magnitude (a scale read from the
    wrong group is then wrong by up to 256x), quantised."""
    values = blocky((rows, k), (1, MX_GROUP), device, gen)
    if values.device.type == "meta":  # no values: allocate what the quantiser would make
        return (
            torch.empty((rows, k // 2), dtype=torch.uint8, device=device),
            torch.empty((rows, k // MX_GROUP), dtype=torch.uint8, device=device),
        )
    return quantize_mxfp4(values)


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    a, a_scales = _quantized(m, k, device, gen)
    # nn.Linear's (N, K) weight, K-major as the block-scaled MMA reads both operands.
    b, b_scales = _quantized(n, k, device, gen)
    return {"a": a, "a_scales": a_scales, "b": b, "b_scales": b_scales}


_OUT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _reference(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    a = dequantize_mxfp4(t["a"], t["a_scales"])
    b = dequantize_mxfp4(t["b"], t["b_scales"])
    return {"c": a @ b.T}


def _baseline(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    # cuBLAS's block-scaled FP4 GEMM through torch._scaled_mm needs Blackwell's FP4 MMA.
    device = t["a"].device
    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 10:
        raise KernelUnsupported(
            "torch._scaled_mm's MXFP4 path (cuBLAS block-scaled FP4) needs an sm_100 GPU"
        )
    fp4, e8m0 = torch.float4_e2m1fn_x2, torch.float8_e8m0fnu
    return {
        "c": torch._scaled_mm(
            t["a"].view(fp4),
            t["b"].view(fp4).t(),
            scale_a=_blocked(t["a_scales"]).view(e8m0),
            scale_b=_blocked(t["b_scales"]).view(e8m0),
            out_dtype=_OUT[str(p["out"])],
        )
    }


def _blocked(scales: torch.Tensor) -> torch.Tensor:
    """Scales (rows, K/32) in cuBLAS's block-scaling layout: 128x4 tiles, each stored as 32
    rows of 16 (rows r, r+32, r+64, r+96 side by side), padded to whole tiles."""
    rows, cols = scales.shape
    padded = torch.zeros(
        (triton.cdiv(rows, 128) * 128, triton.cdiv(cols, 4) * 4),
        dtype=scales.dtype,
        device=scales.device,
    )
    padded[:rows, :cols] = scales
    tiles = padded.view(padded.shape[0] // 128, 128, padded.shape[1] // 4, 4).permute(0, 2, 1, 3)
    return tiles.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1, 32, 16).flatten()


def _min_bytes(p: Params, elem: int) -> int:
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    out = {"bf16": 2, "fp16": 2, "fp32": 4}[str(p["out"])]
    return (m + n) * (k // 2 + k // MX_GROUP) + out * m * n


def _cases(tokens: tuple[int, ...]) -> tuple[Params, ...]:
    # Llama-3.1-70B's projections served in FP4 (as NVIDIA's FP4 checkpoints of it are).
    return tuple(
        {"m": m, "n": n, "k": k, "out": "bf16", "model": LLAMA_3_1_70B.name, "weight": weight}
        for weight, k, n in dense_projections(LLAMA_3_1_70B)
        for m in tokens
    )


# Interpreter shapes at the pinned 16x16x64 tile, writing fp16 (the interpreter rounds to
# bf16 wrongly): one token; M, N and K no tile divides (a last K step of one scale group).
_SMOKE = (
    {"m": 1, "n": 48, "k": 128, "out": "fp16"},
    {"m": 33, "n": 40, "k": 160, "out": "fp16"},
)

MXFP4_GEMM = KernelSpec(
    name="mxfp4_gemm",
    summary="C = A @ W.T on MXFP4 operands (e2m1, e8m0 scales per 32): fp32 accumulation.",
    make_inputs=_inputs,
    make_outputs=lambda t, p: {
        "c": torch.empty(
            (t["a"].shape[0], t["b"].shape[0]), dtype=_OUT[str(p["out"])], device=t["a"].device
        )
    },
    launch=lambda t, o, p, cfg: mxfp4_gemm(
        t["a"], t["b"], t["a_scales"], t["b_scales"], o["c"], cfg
    ),
    reference=_reference,
    baseline=Baseline("torch._scaled_mm (cuBLAS block-scaled FP4, sm_100 only)", _baseline),
    workloads={
        "smoke": _SMOKE,
        "decode": _cases(DECODE_TOKENS),
        "llm": _cases(DECODE_TOKENS + PREFILL_TOKENS),
    },
    flops=lambda p: 2 * int(p["m"]) * int(p["n"]) * int(p["k"]),
    min_bytes=_min_bytes,
    dtypes=("mxfp4",),
    # The reference multiplies exactly the values the operands stand for, so what is left is
    # fp32 accumulation and the output's rounding: bf16 in serving.
    tolerance={"mxfp4": DEFAULT_TOLERANCE["bf16"]},
    configs=MXFP4_GEMM_CONFIGS,
    pinned_config=MXFP4_GEMM_PINNED,
)
