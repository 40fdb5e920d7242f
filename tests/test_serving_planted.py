"""Bugs planted in the serving kernels are each caught by the correctness check.

Each mutation (tests/planted/mutants.py) changes one line of a built-in kernel module the way
a real bug would; the mutated kernel runs its smoke case through the same check as
``kernelwatch check`` and must fail, on the output the bug corrupts.
"""

from __future__ import annotations

import pytest
from planted.mutants import Mutation, load_mutant, mutant_source

from kernelwatch.harness.correctness import check_case

# (mutation, spec name in the module, smoke case index, dtype, output the check must name)
PLANTED = (
    (
        Mutation(
            "moe",
            "    w_base = w_ptr + expert.to(tl.int64) * stride_we\n",
            "    w_base = w_ptr + (expert ^ 1).to(tl.int64) * stride_we\n",
            "a block multiplied by a wrong expert's weights",
        ),
        "FUSED_MOE",
        0,
        "fp32",
        "'out' relative error",
    ),
    (
        Mutation(
            "moe",
            "ids = tl.where(slots[None, :] == k, best[:, None], ids)",
            "ids = tl.where(slots[None, :] == k, (best[:, None] + 1) % E, ids)",
            "routing reports a wrong expert",
        ),
        "FUSED_MOE",
        0,
        "fp32",
        "elements of 'topk_ids' differ from the reference",
    ),
    (
        Mutation(
            "moe",
            "    sorted_slots[destination] = order.to(torch.int32)\n",
            "    sorted_slots[destination[1:]] = order[1:].to(torch.int32)\n",
            "the alignment drops a token's slot",
        ),
        "FUSED_MOE",
        0,
        "fp32",
        # The dropped slot's rows of the scratch activations start as NaN (the check's
        # poisoned scratch), so the token's output is NaN, never a lucky stale value.
        "of 'out' are NaN/Inf",
    ),
    (
        Mutation(
            "fp8",
            "b_scale = tl.load(b_scale_ptrs + group * stride_bsk)",
            "b_scale = tl.load(b_scale_ptrs + (group // 2) * stride_bsk)",
            "a weight scale applied to the wrong K block",
        ),
        "FP8_BLOCK_GEMM",
        0,
        "fp8",
        "'c' relative error",
    ),
    (
        Mutation(
            "decode_attention",
            "page = tl.load(table + keys // PAGE_SIZE, mask=k_mask, other=0)",
            "page = tl.load(table + (keys + 1) // PAGE_SIZE, mask=k_mask, other=0)",
            "each page's last key read from the next page",
        ),
        "PAGED_DECODE_ATTENTION",
        0,
        "fp32",
        "'out'",
    ),
    (
        Mutation(
            "decode_attention",
            "    for s in range(0, splits):\n",
            "    for s in range(0, splits - 1):\n",
            "the combine drops the last split-K partial",
        ),
        "PAGED_DECODE_ATTENTION",
        0,
        "fp32",
        "'out' relative error",
    ),
    (
        Mutation(
            "gemm",
            "        for s in range(SPLIT_K):\n",
            "        for s in range(SPLIT_K - 1):\n",
            "the split-K fixup misses the last partial",
        ),
        "GEMM",
        1,
        "fp32",
        "'c' relative error",
    ),
    (
        Mutation(
            "conformer_conv",
            "window = tl.where(from_state[:, None], carried, window)",
            "window = tl.where(from_state[:, None], 0.0, window)",
            "the conv state is not carried into the chunk",
        ),
        "CONFORMER_CONV",
        0,
        "fp32",
        "relative error",
    ),
    (
        Mutation(
            "attention",
            "seen = seen & (keys[None, :] > rows[:, None] + causal_shift - WINDOW)",
            "seen = seen & (keys[None, :] >= rows[:, None] + causal_shift - WINDOW)",
            "the sliding window lets in one key too many",
        ),
        "SLIDING_WINDOW_ATTENTION",
        0,
        "fp32",
        "relative error",
    ),
    (
        Mutation(
            "decode_attention",
            "visible = visible & (keys[None, :] > frontier[:, None] - WINDOW)",
            "visible = visible & (keys[None, :] >= frontier[:, None] - WINDOW)",
            "the paged decode's sliding window lets in one key too many",
        ),
        # The 4-query draft: with one query the split's first key is already its window's,
        # so only a later query's mask can let one key too many in.
        "SLIDING_WINDOW_DECODE_ATTENTION",
        1,
        "fp32",
        "'out' relative error",
    ),
    (
        Mutation(
            "attention",
            'm_use = tl.where(m_new == float("-inf"), 0.0, m_new)',
            "m_use = m_new",
            "a row whose first key block lies before its window divides -inf by -inf",
        ),
        "SLIDING_WINDOW_ATTENTION",
        0,
        "fp32",
        "are NaN/Inf",
    ),
)


@pytest.mark.parametrize(
    ("mutation", "spec_name", "case", "dtype", "fragment"),
    PLANTED,
    ids=[m.bug for m, *_ in PLANTED],
)
def test_planted_bug_is_caught(mutation, spec_name, case, dtype, fragment, device, tmp_path):
    spec = getattr(load_mutant(mutation, tmp_path), spec_name)
    result = check_case(spec, "builtin", "smoke", spec.workloads["smoke"][case], dtype, device)
    assert result.verdict == "fail", f"{mutation.bug}: {result.verdict} {result.reason}"
    assert fragment in result.reason


def test_an_unchanged_copy_passes(device, tmp_path):
    """The mutant loader itself changes nothing: a no-op mutation still passes."""
    line = "        for s in range(SPLIT_K):\n"
    spec = load_mutant(Mutation("gemm", line, line, "none"), tmp_path).GEMM
    result = check_case(spec, "builtin", "smoke", spec.workloads["smoke"][1], "fp32", device)
    assert result.verdict == "pass", result.reason


def test_a_mutation_that_no_longer_applies_fails_loudly():
    with pytest.raises(AssertionError, match=r"occurs 0 times in kernels/gemm\.py"):
        mutant_source(Mutation("gemm", "no such line", "", "stale"))
