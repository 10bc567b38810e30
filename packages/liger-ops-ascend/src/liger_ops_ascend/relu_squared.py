"""Squared ReLU (``relu(x) ** 2``, Nemotron's activation) for Ascend NPUs: Triton kernels, UB
plan and the kernel adapter of `liger_core.drivers.relu_squared`.

Elementwise like the gated activations and walked like them: the input flattened into blocks
of ``BLOCK`` elements, one program per vector core striding over the blocks, the block the
largest power of two whose live tiles fit the UB budget (`_tiling.plan_flat`), whatever the
number of elements (no recompile per batch size). Forward reads x and writes y; backward reads
the incoming gradient and x (saved: the gradient needs relu(x)) and writes
grad_x = 2 * relu(x) * grad_y, in fp32 and rounded once.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import relu_squared as relu_squared_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import flat_block, flat_indices
from liger_ops_ascend._tiling import FlatPlan, dma, elem_bytes, launch_flat, plan_flat, work
from liger_ops_ascend.launch import Tile


@triton.jit
def _relu_squared_forward_kernel(X, Y, n, n_blocks, BLOCK: tl.constexpr):
    pid, num_programs, idx = flat_indices(BLOCK)
    for blk in range(pid, n_blocks, num_programs):
        start, mask = flat_block(blk, pid, n, idx, BLOCK)
        # Padded lanes only reach masked-off stores: no fill before the DMA.
        x = tl.load(X + start + idx, mask=mask, care_padding=False).to(tl.float32)
        r = tl.where(x > 0.0, x, 0.0)  # an fp32 compare: vectorised
        tl.store(Y + start + idx, (r * r).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _relu_squared_backward_kernel(DY, X, DX, n, n_blocks, BLOCK: tl.constexpr):
    pid, num_programs, idx = flat_indices(BLOCK)
    for blk in range(pid, n_blocks, num_programs):
        start, mask = flat_block(blk, pid, n, idx, BLOCK)
        dy = tl.load(DY + start + idx, mask=mask, care_padding=False).to(tl.float32)
        x = tl.load(X + start + idx, mask=mask, care_padding=False).to(tl.float32)
        r = tl.where(x > 0.0, x, 0.0)
        tl.store(DX + start + idx, (2.0 * r * dy).to(DX.dtype.element_ty), mask=mask)


# Tiles in the terms of the UB model (ub_model.md). Peak fp32 tiles, by hand from the kernels:
# forward, x and relu(x) (the square takes x's buffer); backward, dy, x and relu(x) (the
# gradient takes x's buffer).
_F32_PEAK = {"forward": 2, "backward": 3}


def forward_tiles(block: int, xb: int) -> tuple[Tile, ...]:
    return (*dma("x", 1, block, xb), *dma("y", 1, block, xb), *work("f32_", 1, block, _F32_PEAK["forward"]))


def backward_tiles(block: int, xb: int) -> tuple[Tile, ...]:
    tiles = [t for name in ("dy", "x", "dx") for t in dma(name, 1, block, xb)]
    return (*tiles, *work("f32_", 1, block, _F32_PEAK["backward"]))


@functools.lru_cache(maxsize=1024)
def _plan_tiles(direction: str, n: int, xb: int, hw: hardware.Hardware, max_block: int) -> FlatPlan:
    tiles = functools.partial(forward_tiles if direction == "forward" else backward_tiles, xb=xb)
    name = f"relu_squared_{direction}"
    return plan_flat(name, n, ((name, tiles),), hw, hardware.min_block(xb), max_block)


def plan_tiles(direction: str, n: int, dtype: torch.dtype, hw: hardware.Hardware) -> FlatPlan:
    """Block and launch of ``direction`` over ``n`` elements of ``dtype``."""
    return _plan_tiles(direction, n, elem_bytes(dtype), hw, hardware.MAX_BLOCK_N)


def relu_squared_forward(x: torch.Tensor, hw: hardware.Hardware) -> torch.Tensor:
    """``relu(x) ** 2`` of contiguous ``x``."""
    y = torch.empty_like(x)
    n = x.numel()
    if n:
        launch_flat(_relu_squared_forward_kernel, n, plan_tiles("forward", n, x.dtype, hw), hw, x, y)
    return y


def relu_squared_backward(dy: torch.Tensor, x: torch.Tensor, hw: hardware.Hardware) -> torch.Tensor:
    """``grad_x`` of contiguous tensors."""
    dx = torch.empty_like(x)
    n = x.numel()
    if n:
        launch_flat(_relu_squared_backward_kernel, n, plan_tiles("backward", n, x.dtype, hw), hw, dy, x, dx)
    return dx


class ReLUSquaredKernels:
    """`liger_core.drivers.relu_squared.ReLUSquaredKernels` on this module's kernels."""

    protocol = relu_squared_driver.PROTOCOL

    def forward(self, x):
        return relu_squared_forward(x, hardware.current(x.device))

    def backward(self, dy, x):
        return relu_squared_backward(dy, x, hardware.current(x.device))


LigerReLUSquaredFunction = implements("relu_squared")(
    relu_squared_driver.autograd_function(ReLUSquaredKernels(), __name__)
)
