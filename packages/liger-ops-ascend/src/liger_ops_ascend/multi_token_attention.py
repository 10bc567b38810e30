"""Multi-token attention (``mask_0(conv2d(softmax(mask_-inf(scores))))``) for Ascend NPUs: the
causal fill kernel, its UB plan, launch and autograd Function.

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
from liger_core.ops.multi_token_attention import check_args

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


@implements("multi_token_attention")
class LigerMultiTokenAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, weight, bias, stride, padding, dilation, groups, sparse):
        check_args(scores, weight, bias, stride, padding, dilation, groups, sparse)
        hw = hardware.current(scores.device)
        seq = scores.shape[-1]
        masked = causal_fill(scores.contiguous(), float("-inf"), hw)
        if sparse:
            probs = sparsemax_forward(masked.view(-1, seq), hw)
        else:
            probs = softmax_forward(masked.view(-1, seq), hw)
        ctx.save_for_backward(probs, weight)
        probs = probs.view(scores.shape)
        out = F.conv2d(probs, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
        ctx.conv = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        ctx.sparse, ctx.hw, ctx.shape = sparse, hw, scores.shape
        return causal_fill(out, 0.0, hw, out=out)

    @staticmethod
    def backward(ctx, grad_out):
        probs, weight = ctx.saved_tensors
        seq = ctx.shape[-1]
        grad_conv = causal_fill(grad_out.contiguous(), 0.0, ctx.hw)
        grad_scores = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_probs = torch.nn.grad.conv2d_input(ctx.shape, weight, grad_conv, **ctx.conv).view(-1, seq)
            if ctx.sparse:
                grad_scores = sparsemax_backward(grad_probs, probs, ctx.hw)
            else:
                grad_scores = softmax_backward(grad_probs, probs, ctx.hw)
            grad_scores = grad_scores.view(ctx.shape)
        if ctx.needs_input_grad[1]:
            grad_weight = torch.nn.grad.conv2d_weight(probs.view(ctx.shape), weight.shape, grad_conv, **ctx.conv)
        if ctx.needs_input_grad[2]:
            grad_bias = grad_conv.sum((0, 2, 3))
        return grad_scores, grad_weight, grad_bias, None, None, None, None, None
