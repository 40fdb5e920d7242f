"""Input construction shared by the built-in specs: random, seeded, optionally strided."""

from __future__ import annotations

import torch


def randn(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    generator: torch.Generator,
    *,
    scale: float = 1.0,
    shift: float = 0.0,
    row_pad: int = 0,
) -> torch.Tensor:
    """Normal(shift, scale) values of ``shape``.

    With ``row_pad > 0`` the result is a view into a buffer whose last dimension is ``row_pad``
    elements wider, so every outer stride is larger than the shape implies: the way real
    activations look when they are slices of a fused projection's output.
    """
    full = (*shape[:-1], shape[-1] + row_pad)
    if torch.device(device).type == "meta":
        # The build records launches on the meta device, which holds no values to draw or
        # scale: there torch.randn, and any arithmetic, runs a Python reference that imports
        # Dynamo, 1.6 s of a build worker's CPU.
        buffer = torch.empty(full, device=device, dtype=dtype)
    else:
        values = torch.randn(full, generator=generator, device=device, dtype=torch.float32)
        buffer = (values * scale + shift).to(dtype)
    return buffer[..., : shape[-1]] if row_pad else buffer


def expand_blocks(scales: torch.Tensor, rows: int, cols: int, shape: torch.Size) -> torch.Tensor:
    """Block scales repeated over the elements they scale (the last blocks cut to ``shape``)."""
    full = scales.repeat_interleave(rows, dim=0).repeat_interleave(cols, dim=1)
    return full[: shape[0], : shape[1]]


def blocky(
    shape: tuple[int, int], block: tuple[int, int], device: torch.device, gen: torch.Generator
) -> torch.Tensor:
    """Random fp32 values whose ``block``-sized blocks have magnitudes spanning 2^-4..2^4, as
    real activations and weights do: a scale read from the wrong block is then wrong by up to
    256x, never by a rounding. On the meta device, only allocated (see :func:`randn`)."""
    values = randn(shape, torch.float32, device, gen)
    if values.device.type == "meta":
        return values
    groups = (-(-shape[0] // block[0]), -(-shape[1] // block[1]))
    magnitude = torch.randint(-4, 5, groups, generator=gen, device=device).float().exp2()
    return values * expand_blocks(magnitude, *block, values.shape)


def empty_like_dense(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor of ``t``'s shape, dtype and device (contents undefined)."""
    return torch.empty(t.shape, dtype=t.dtype, device=t.device)


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (>= 1)."""
    return 1 << max(n - 1, 0).bit_length()


def warps_for_row(block: int) -> int:
    """Warps for a one-row-per-program kernel: enough threads to hold ``block`` elements in
    registers without spilling, as Liger-Kernel and vLLM size their norm kernels."""
    if block >= 32768:
        return 32
    if block >= 8192:
        return 16
    if block >= 2048:
        return 8
    return 4
