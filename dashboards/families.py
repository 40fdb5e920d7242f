"""Kernel families: how the dashboards' kernel pickers group the built-in suite's kernels
("attention / paged_decode_attention"), so a team finds the MoE, FP8, decode-attention or
ASR kernels among the rest. A kernel no family names (another repository's) is listed by its
name alone."""

from __future__ import annotations

#: Family -> the built-in kernels in it, by their names in ``kernelwatch.kernels``.
FAMILIES: dict[str, tuple[str, ...]] = {
    "norm": ("rms_norm", "fused_add_rms_norm"),
    "elementwise": ("softmax", "silu_and_mul", "silu_and_mul_cuda", "rope"),
    "gemm": ("gemm", "fp8_block_gemm", "fp8_group_quant"),
    "attention": ("flash_attention", "paged_decode_attention", "mla_decode"),
    "moe": ("fused_moe",),
    "asr": ("conformer_conv",),
}


def labelled_kernels(source: str) -> str:
    """SQL for a kernel picker over ``source`` (a view with ``repository`` and ``kernel``):
    each kernel as ``__value``, labelled ``family / kernel`` as ``__text``."""
    cases = " ".join(
        f"WHEN kernel IN ({', '.join(repr(k) for k in kernels)}) THEN '{family} / ' || kernel"
        for family, kernels in FAMILIES.items()
    )
    return (
        f"SELECT DISTINCT CASE {cases} ELSE kernel END AS __text, kernel AS __value "
        f"FROM {source} WHERE repository = '$repository' ORDER BY 1"
    )
