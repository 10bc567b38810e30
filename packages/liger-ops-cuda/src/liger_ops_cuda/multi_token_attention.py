"""Multi-token attention (``mask_0(conv2d(softmax(mask_-inf(scores))))``) for NVIDIA GPUs: the
causal fill kernel, launch and autograd Function.

The row work is softmax's and sparsemax's own kernels (their modules' launchers and tile plans):
a flat kernel first fills each query row's future with -inf, which both activations turn into
probability 0 (and, backward, gradient 0: softmax's ``y * (dy - dot)`` has y = 0 there, and
sparsemax's support excludes -inf). The convolution and its two gradients are cuDNN's (torch's
conv2d, as liger-kernel composes it); the same flat kernel zeroes the future of the convolution's
output in place (a tensor the op made) and of the incoming gradient (into a new tensor).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.ops.multi_token_attention import check_args
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import launch_flat, plan_softmax_rows
from liger_ops_cuda.softmax import softmax_backward, softmax_forward
from liger_ops_cuda.sparsemax import sparsemax_backward, sparsemax_forward

# The lanes' positions inside a (seq, seq) plane are int32: a plane plus one block must stay
# below 2**31.
INT32_LIMIT = 2**31


@triton.jit
def _causal_fill_kernel(X, Y, n_queries, n_keys, fill, n_elements, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    idx = tl.arange(0, BLOCK)
    mask = idx < n_elements - start
    # Element [.., query, key] of contiguous (..., n_queries, n_keys) planes: the block's first
    # position in its plane once (int64), the lanes' in int32 (int64 division is slow).
    plane = n_queries * n_keys
    pos = ((start % plane).to(tl.int32) + idx) % plane
    key = pos % n_keys
    query = pos // n_keys
    x = tl.load(X + start + idx, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + start + idx, tl.where(key > query, fill, x).to(Y.dtype.element_ty), mask=mask)


def causal_fill(x: torch.Tensor, fill: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Contiguous ``x`` with every entry ``[..., i, j]``, ``j > i``, set to ``fill``, written to
    ``out`` (a new tensor by default; ``x`` itself for in place)."""
    out = torch.empty_like(x) if out is None else out
    n_queries, n_keys = x.shape[-2:]
    block = hardware.GLU_BLOCK
    if n_queries * n_keys + block >= INT32_LIMIT:
        raise ValueError(
            f"multi_token_attention: a ({n_queries}, {n_keys}) plane plus a block of {block} must hold "
            f"fewer than 2**31 elements (int32 lane positions); got {n_queries * n_keys + block}"
        )
    launch_flat(_causal_fill_kernel, x.numel(), x, out, n_queries, n_keys, fill)
    return out


def _exact_fp32_convolutions():
    """cuDNN's convolutions with TF32 off: by default they run float32 inputs at TF32 precision
    (about 1e-3 relative), which float32's contract (rtol 1e-4 against the float64 reference)
    does not allow. Half-precision inputs are unaffected."""
    cudnn = torch.backends.cudnn
    return cudnn.flags(
        enabled=cudnn.enabled,
        benchmark=cudnn.benchmark,
        benchmark_limit=cudnn.benchmark_limit,
        deterministic=cudnn.deterministic,
        allow_tf32=False,
    )


@implements("multi_token_attention")
class LigerMultiTokenAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, weight, bias, stride, padding, dilation, groups, sparse):
        check_args(scores, weight, bias, stride, padding, dilation, groups, sparse)
        seq = scores.shape[-1]
        plan = plan_softmax_rows(seq)
        masked = causal_fill(scores.contiguous(), float("-inf"))
        if sparse:
            probs, tau = sparsemax_forward(masked.view(-1, seq), plan)
            ctx.save_for_backward(probs, weight, masked, tau)
        else:
            probs = softmax_forward(masked.view(-1, seq), plan)
            ctx.save_for_backward(probs, weight)
        probs = probs.view(scores.shape)
        with _exact_fp32_convolutions():
            out = F.conv2d(probs, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
        ctx.conv = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        ctx.sparse, ctx.plan, ctx.shape = sparse, plan, scores.shape
        return causal_fill(out, 0.0, out=out)

    @staticmethod
    def backward(ctx, grad_out):
        probs, weight, *sparse_saved = ctx.saved_tensors
        seq = ctx.shape[-1]
        grad_conv = causal_fill(grad_out.contiguous(), 0.0)
        grad_scores = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            with _exact_fp32_convolutions():
                grad_probs = torch.nn.grad.conv2d_input(ctx.shape, weight, grad_conv, **ctx.conv).view(-1, seq)
            if ctx.sparse:
                masked, tau = sparse_saved
                grad_scores = sparsemax_backward(grad_probs, masked.view(-1, seq), tau, ctx.plan)
            else:
                grad_scores = softmax_backward(grad_probs, probs, ctx.plan)
            grad_scores = grad_scores.view(ctx.shape)
        if ctx.needs_input_grad[1]:
            with _exact_fp32_convolutions():
                grad_weight = torch.nn.grad.conv2d_weight(probs.view(ctx.shape), weight.shape, grad_conv, **ctx.conv)
        if ctx.needs_input_grad[2]:
            grad_bias = grad_conv.sum((0, 2, 3))
        return grad_scores, grad_weight, grad_bias, None, None, None, None, None
