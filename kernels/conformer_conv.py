"""The Conformer convolution module's core for streaming speech recognition: GLU, causal
depthwise conv1d with a carried state, bias (BatchNorm folded in at inference) and SiLU, in
one kernel.

The module runs pointwise conv (d -> 2d) -> GLU -> depthwise conv (kernel 9 to 31) -> BN ->
SiLU -> pointwise conv (d -> d). This kernel reads the first pointwise conv's output,
time-major as a linear layer writes it, and writes what the second one reads. A streaming
encoder feeds audio in chunks; the causal conv then needs the last ``kernel - 1`` GLU outputs
of the previous chunk, its *state*, and hands the new one on (NeMo's cache-aware streaming
keeps exactly this).

A program owns a block of frames and channels. It loads the window of frames its outputs
see (the block plus ``kernel - 1`` before it, from the state where they precede the chunk),
computes each window element's GLU once, and gathers the ``kernel`` shifted rows out of
registers (``tl.gather``, warp shuffles) instead of recomputing the GLU per tap, whose
sigmoid would make a 31-tap kernel compute-bound. The block holding the chunk's last frame
writes the new state.

The pointwise projection after is left to a GEMM (gemm.py, whose split-K serves the few rows
of a streaming chunk): fused as this kernel's epilogue, each program would have to hold a
full d-wide output row block and read all of the d x d weight, so the weight would stream
from L2 once per 16-32 frames instead of the intermediate once through HBM; that pays only
for launch-bound chunks, and is not done here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Params, Tensors
from kernelwatch.kernels.inputs import next_pow2, randn
from kernelwatch.kernels.models import (
    CONFORMER_LARGE,
    FASTCONFORMER_LARGE,
    MEL_HOP_S,
    PARAKEET_CTC_1_1B,
)


@triton.jit
def glu_causal_dwconv_kernel(
    x_ptr,
    state_ptr,
    w_ptr,
    bias_ptr,
    y_ptr,
    new_state_ptr,
    T,
    C,
    stride_xb,
    stride_xt,
    stride_sb,
    stride_st,
    stride_yb,
    stride_yt,
    stride_nb,
    stride_nt,
    KS: tl.constexpr,
    HAS_STATE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_W: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    time_blocks = (T + BLOCK_T - 1) // BLOCK_T
    batch = (tl.program_id(0) // time_blocks).to(tl.int64)
    first = (tl.program_id(0) % time_blocks) * BLOCK_T
    chans = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = chans < C

    # Window row w holds frame first - (KS - 1) + w; frames before the chunk come from the
    # state (or are the causal zero padding without one).
    rows = tl.arange(0, BLOCK_W)
    frame = first - (KS - 1) + rows
    from_x = (frame >= 0) & (frame < T) & (rows < BLOCK_T + KS - 1)
    x_rows = x_ptr + batch * stride_xb + frame.to(tl.int64) * stride_xt
    x_mask = from_x[:, None] & c_mask[None, :]
    value = tl.load(x_rows[:, None] + chans[None, :], mask=x_mask, other=0.0).to(tl.float32)
    gate = tl.load(x_rows[:, None] + C + chans[None, :], mask=x_mask, other=0.0).to(tl.float32)
    window = value / (1 + tl.exp(-gate))
    if HAS_STATE:
        from_state = frame < 0
        s_rows = state_ptr + batch * stride_sb + (frame + KS - 1).to(tl.int64) * stride_st
        carried = tl.load(
            s_rows[:, None] + chans[None, :],
            mask=from_state[:, None] & c_mask[None, :],
            other=0.0,
        ).to(tl.float32)
        window = tl.where(from_state[:, None], carried, window)

    acc = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
    acc += tl.load(bias_ptr + chans, mask=c_mask, other=0.0).to(tl.float32)[None, :]
    outs = tl.arange(0, BLOCK_T)
    for tap in range(KS):
        weight = tl.load(w_ptr + chans * KS + tap, mask=c_mask, other=0.0).to(tl.float32)
        shifted = tl.gather(window, tl.broadcast_to((outs + tap)[:, None], (BLOCK_T, BLOCK_C)), 0)
        acc += shifted * weight[None, :]
    y = acc / (1 + tl.exp(-acc))
    y_rows = y_ptr + batch * stride_yb + (first + outs).to(tl.int64) * stride_yt
    y_mask = ((first + outs) < T)[:, None] & c_mask[None, :]
    tl.store(y_rows[:, None] + chans[None, :], y.to(y_ptr.dtype.element_ty), mask=y_mask)

    # A constexpr and a run-time condition stay in separate ifs: Triton resolves the first
    # while compiling.
    if HAS_STATE:  # noqa: SIM102
        if first + BLOCK_T >= T:
            # The next chunk's state, the last KS - 1 frames of (state, this chunk), written
            # by the block holding the chunk's last frame.
            keep = (frame >= T - (KS - 1)) & (frame < T) & (rows < BLOCK_T + KS - 1)
            n_rows = (
                new_state_ptr + batch * stride_nb + (frame - T + KS - 1).to(tl.int64) * stride_nt
            )
            tl.store(
                n_rows[:, None] + chans[None, :],
                window.to(new_state_ptr.dtype.element_ty),
                mask=keep[:, None] & c_mask[None, :],
            )


# 32 frames a block fill a 64-row window at the Conformer's 31 taps; FastConformer's 9 taps
# waste less of it at 16. Channel blocks of 64-128 keep loads 128-bit wide; 128 channels
# take 8 warps (255 registers and a spill at 4 on sm_100a). The taps are a loop, not
# unrolled: 31 unrolled gathers kept so many shuffled rows live that they spilled 3-4 KB.
CONV_CONFIGS = tuple(
    LaunchConfig({"BLOCK_T": bt, "BLOCK_C": bc}, w, 1)
    for bt, bc, w in ((16, 64, 4), (32, 64, 4), (32, 128, 8))
)
CONV_PINNED = LaunchConfig({"BLOCK_T": 16, "BLOCK_C": 32}, 4, 1)


def _heuristic(kernel: int) -> LaunchConfig:
    return CONV_CONFIGS[1] if kernel > 16 else CONV_CONFIGS[0]


def glu_causal_dwconv(
    x: torch.Tensor,
    state: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor,
    y: torch.Tensor,
    new_state: torch.Tensor | None,
    config: LaunchConfig | None,
) -> LaunchConfig:
    """``y = silu(dwconv(glu(x)) + bias)``, causal along time: ``x`` (batch, T, 2C), ``state``
    (batch, kernel - 1, C) the previous chunk's last GLU outputs (None: the utterance starts
    here), ``weight`` (C, kernel), ``bias`` (C,); ``y`` (batch, T, C) and ``new_state`` (like
    ``state``, or None) are written."""
    batch, frames, two_c = x.shape
    channels, kernel = weight.shape
    if two_c != 2 * channels or y.shape != (batch, frames, channels):
        raise ValueError(
            f"conv module shapes do not match: x {tuple(x.shape)} weight {tuple(weight.shape)} "
            f"y {tuple(y.shape)}"
        )
    if (state is None) != (new_state is None) or weight.stride() != (kernel, 1):
        raise ValueError("pass both state and new_state or neither, and a contiguous weight")
    if x.stride(-1) != 1 or y.stride(-1) != 1:
        raise ValueError("the conv module reads and writes channels with unit stride")
    config = config or _heuristic(kernel)
    block_t, block_c = int(config.meta["BLOCK_T"]), int(config.meta["BLOCK_C"])
    carried = (state, new_state) if state is not None else (x, y)
    grid = (batch * triton.cdiv(frames, block_t), triton.cdiv(channels, block_c))
    glu_causal_dwconv_kernel[grid](
        x,
        carried[0],
        weight,
        bias,
        y,
        carried[1],
        frames,
        channels,
        x.stride(0),
        x.stride(1),
        carried[0].stride(0),
        carried[0].stride(1),
        y.stride(0),
        y.stride(1),
        carried[1].stride(0),
        carried[1].stride(1),
        KS=kernel,
        HAS_STATE=state is not None,
        BLOCK_T=block_t,
        BLOCK_W=next_pow2(block_t + kernel - 1),
        BLOCK_C=block_c,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return config


def _history(t: Tensors, glu: torch.Tensor) -> torch.Tensor:
    """(state, glu) along time: every frame the causal conv sees, zeros before an utterance."""
    kernel = t["weight"].shape[1]
    state = t.get("state")
    if state is None:
        state = glu.new_zeros((glu.shape[0], kernel - 1, glu.shape[2]))
    return torch.cat([state.to(glu.dtype), glu], dim=1)


def _conv_module(t: Tensors) -> dict[str, torch.Tensor]:
    """The same module in torch: F.glu, then F.conv1d over (batch, C, time) with one group
    per channel (cuDNN's depthwise conv on a GPU), then SiLU."""
    glu = F.glu(t["x"], dim=-1)
    history = _history(t, glu)
    weight = t["weight"]
    conv = F.conv1d(history.transpose(1, 2), weight[:, None, :], t["bias"], groups=weight.shape[0])
    out = {"y": F.silu(conv).transpose(1, 2)}
    if "state" in t:
        out["new_state"] = history[:, history.shape[1] - (weight.shape[1] - 1) :]
    return out


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    batch, frames, channels, kernel = (int(p[k]) for k in ("batch", "frames", "channels", "kernel"))
    inputs = {
        "x": randn((batch, frames, 2 * channels), dtype, device, gen),
        # Trained depthwise weights with BatchNorm folded in: about 1 / sqrt(kernel) a tap.
        "weight": randn((channels, kernel), dtype, device, gen, scale=kernel**-0.5),
        "bias": randn((channels,), dtype, device, gen, scale=0.1),
    }
    if p["streaming"]:
        inputs["state"] = randn((batch, kernel - 1, channels), dtype, device, gen)
    return inputs


def _outputs(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    x, kernel = t["x"], int(p["kernel"])
    batch, frames, two_c = x.shape
    out = {"y": torch.empty((batch, frames, two_c // 2), dtype=x.dtype, device=x.device)}
    if p["streaming"]:
        out["new_state"] = torch.empty(
            (batch, kernel - 1, two_c // 2), dtype=x.dtype, device=x.device
        )
    return out


def _min_bytes(p: Params, elem: int) -> int:
    batch, frames, channels, kernel = (int(p[k]) for k in ("batch", "frames", "channels", "kernel"))
    state = 2 * batch * (kernel - 1) * channels if p["streaming"] else 0
    # x (2C wide) in, y out, the weights and bias, the state in and out
    return elem * (3 * batch * frames * channels + (kernel + 1) * channels + state)


_ASR_MODELS = (
    (FASTCONFORMER_LARGE, "d_model"),
    (CONFORMER_LARGE, "d_model"),
    (PARAKEET_CTC_1_1B, "hidden_size"),
)
#: Audio per streaming chunk, seconds, and the full utterance.
CHUNK_SECONDS = (0.16, 0.32, 0.64, 1.28)
UTTERANCE_SECONDS = 20.0
_STREAMS = 64


def _asr_cases() -> tuple[Params, ...]:
    """Per encoder (d_model / hidden_size, conv_kernel_size, subsampling_factor): 64 streams
    fed chunks of 0.16-1.28 s, and a 20 s utterance alone and in a batch of 16."""
    cases: list[Params] = []
    for model, width in _ASR_MODELS:
        frame_s = MEL_HOP_S * model["subsampling_factor"]
        shape = {"channels": model[width], "kernel": model["conv_kernel_size"], "model": model.name}
        cases += [
            {"batch": _STREAMS, "frames": round(s / frame_s), **shape, "streaming": True,
             "chunk_s": s}
            for s in CHUNK_SECONDS
        ]  # fmt: skip
        cases += [
            {"batch": b, "frames": round(UTTERANCE_SECONDS / frame_s), **shape, "streaming": False}
            for b in (1, 16)
        ]
    return tuple(cases)


# Interpreter shapes at 16 frames and 32 channels a block: one frame of a stream, so the
# output comes almost all from the state and the new state is mostly the old one shifted;
# 37 frames through 31 taps (three time blocks, the first reaching into the state); and a
# 5-frame utterance with no state, channels no block divides.
_SMOKE_CASES = (
    {"batch": 1, "frames": 1, "channels": 40, "kernel": 9, "streaming": True},
    {"batch": 2, "frames": 37, "channels": 24, "kernel": 31, "streaming": True},
    {"batch": 2, "frames": 5, "channels": 33, "kernel": 9, "streaming": False},
)

CONFORMER_CONV = KernelSpec(
    name="conformer_conv",
    summary="Conformer conv module core: GLU, causal depthwise conv with carried state, SiLU.",
    make_inputs=_inputs,
    make_outputs=_outputs,
    launch=lambda t, o, p, cfg: glu_causal_dwconv(
        t["x"], t.get("state"), t["weight"], t["bias"], o["y"], o.get("new_state"), cfg
    ),
    reference=lambda t, p: _conv_module(t),
    baseline=Baseline(
        "torch.nn.functional.glu + conv1d (cuDNN) + silu", lambda t, p: _conv_module(t)
    ),
    # The model family first: a build without --workload compiles a spec's first workload.
    workloads={"asr": _asr_cases(), "smoke": _SMOKE_CASES},
    # per output: kernel multiply-adds, GLU (exp, add, divide, multiply) and SiLU, bias
    flops=lambda p: (
        (2 * int(p["kernel"]) + 9) * int(p["batch"]) * int(p["frames"]) * int(p["channels"])
    ),
    min_bytes=_min_bytes,
    configs=CONV_CONFIGS,
    pinned_config=CONV_PINNED,
)
