"""Multi-token attention (``mask_0(conv2d(softmax(mask_-inf(scores))))``) for Ascend NPUs: the
causal fill kernel, its UB plan, launch and the kernel adapter of
`liger_core.drivers.multi_token_attention`.

The row work is softmax's and sparsemax's own kernels (their modules' launchers and UB-aware
plans): a flat kernel first fills each query row's future with -inf, which both activations turn
into probability 0 (and, backward, gradient 0: softmax's ``y * (dy - dot)`` has y = 0 there, and
sparsemax's support, y > 0, excludes it). The convolution and its two gradients are torch's
conv2d on the NPU (as liger-kernel composes it); the same flat kernel zeroes the future of the
convolution's output in place (a tensor the op made) and of the incoming gradient (into a new
tensor). The fill is walked like the elementwise kernels: blocks of ``BLOCK`` elements, one
program per vector core striding over them, the block the largest whose tiles fit the UB.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import multi_token_attention as mta_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import flat_block, flat_indices
from liger_ops_ascend._tiling import FlatPlan, dma, elem_bytes, launch_flat, mask, plan_flat, work
from liger_ops_ascend.launch import Tile
from liger_ops_ascend.softmax import softmax_backward, softmax_forward
from liger_ops_ascend.sparsemax import sparsemax_backward, sparsemax_forward

# The lanes' positions inside a (seq, seq) plane are int32 (int64 vector arithmetic is scalar
# code): a plane plus one block must stay below 2**31.
INT32_LIMIT = 2**31


@triton.jit
def _causal_fill_kernel(X, Y, n_queries, n_keys, fill, n, n_blocks, BLOCK: tl.constexpr):
    pid, num_programs, idx = flat_indices(BLOCK)
    plane = n_queries * n_keys
    for blk in range(pid, n_blocks, num_programs):
        start, mask = flat_block(blk, pid, n, idx, BLOCK)
        # Element [.., query, key] of contiguous (..., n_queries, n_keys) planes: the block's first
        # position in its plane once (scalar int64), the lanes' in int32.
        pos = ((start % plane).to(tl.int32) + idx) % plane
        key = pos % n_keys
        query = pos // n_keys
        x = tl.load(X + start + idx, mask=mask, care_padding=False).to(tl.float32)
        # key > query compared in fp32 (A2/A3 have no int vector compare): exact, |key - query| <
        # seq < 2**24 (square planes of fewer than 2**31 elements).
        future = (key - query).to(tl.float32) > 0.0
        tl.store(Y + start + idx, tl.where(future, fill, x).to(Y.dtype.element_ty), mask=mask)


# Tiles in the terms of the UB model (ub_model.md), by hand from the kernel: x and y in their
# dtype, x in fp32, the selected value and key - query in fp32; the int32 position, key and
# query; the load mask and the future mask.
def fill_tiles(block: int, xb: int) -> tuple[Tile, ...]:
    return (
        *dma("x", 1, block, xb),
        *dma("y", 1, block, xb),
        *work("f32_", 1, block, 3),
        *work("i32_", 1, block, 3, 4),
        *mask(1, block),
        Tile("future", 1, block, 1),
    )


@functools.lru_cache(maxsize=1024)
def _plan_tiles(n: int, xb: int, hw: hardware.Hardware, max_block: int) -> FlatPlan:
    tiles = functools.partial(fill_tiles, xb=xb)
    name = "multi_token_attention_causal_fill"
    return plan_flat(name, n, ((name, tiles),), hw, hardware.min_block(xb), max_block)


def plan_tiles(n: int, dtype: torch.dtype, hw: hardware.Hardware) -> FlatPlan:
    """Block and launch of the causal fill over ``n`` elements of ``dtype``."""
    return _plan_tiles(n, elem_bytes(dtype), hw, hardware.MAX_BLOCK_N)


def causal_fill(x: torch.Tensor, fill: float, hw: hardware.Hardware, out: torch.Tensor | None = None) -> torch.Tensor:
    """Contiguous ``x`` with every entry ``[..., i, j]``, ``j > i``, set to ``fill``, written to
    ``out`` (a new tensor by default; ``x`` itself for in place)."""
    out = torch.empty_like(x) if out is None else out
    n = x.numel()
    if n:
        plan = plan_tiles(n, x.dtype, hw)
        n_queries, n_keys = x.shape[-2:]
        if n_queries * n_keys + plan.block >= INT32_LIMIT:
            raise ValueError(
                f"multi_token_attention on Ascend: a ({n_queries}, {n_keys}) plane plus a block of {plan.block} "
                f"must hold fewer than 2**31 elements (int32 lane positions); got {n_queries * n_keys + plan.block}"
            )
        launch_flat(_causal_fill_kernel, n, plan, hw, x, out, n_queries, n_keys, fill)
    return out


class MultiTokenAttentionKernels:
    """`liger_core.drivers.multi_token_attention.MultiTokenAttentionKernels` on this module's
    kernels and torch's conv2d (with the causal fill on its output and incoming gradient)."""

    protocol = mta_driver.PROTOCOL

    @staticmethod
    def probs_forward(scores, sparse):
        hw = hardware.current(scores.device)
        seq = scores.shape[-1]
        masked = causal_fill(scores, float("-inf"), hw)
        activation = sparsemax_forward if sparse else softmax_forward
        return activation(masked.view(-1, seq), hw).view(scores.shape), ()

    @staticmethod
    def probs_backward(grad_probs, probs, saved, sparse):
        seq = probs.shape[-1]
        activation = sparsemax_backward if sparse else softmax_backward
        grad_rows = activation(grad_probs.reshape(-1, seq), probs.view(-1, seq), hardware.current(probs.device))
        return grad_rows.view(probs.shape)

    @staticmethod
    def conv_forward(probs, weight, bias, stride, padding, dilation, groups):
        out = F.conv2d(probs, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
        return causal_fill(out, 0.0, hardware.current(probs.device), out=out)

    @staticmethod
    def conv_backward(grad_out, probs, weight, stride, padding, dilation, groups, need_probs, need_weight, need_bias):
        conv = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        grad_conv = causal_fill(grad_out, 0.0, hardware.current(probs.device))
        grad_probs = torch.nn.grad.conv2d_input(probs.shape, weight, grad_conv, **conv) if need_probs else None
        grad_weight = torch.nn.grad.conv2d_weight(probs, weight.shape, grad_conv, **conv) if need_weight else None
        grad_bias = grad_conv.sum((0, 2, 3)) if need_bias else None
        return grad_probs, grad_weight, grad_bias


LigerMultiTokenAttentionFunction = implements("multi_token_attention")(
    mta_driver.autograd_function(MultiTokenAttentionKernels(), __name__)
)
