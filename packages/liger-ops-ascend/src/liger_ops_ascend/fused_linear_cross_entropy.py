"""Fused linear + cross-entropy for Ascend NPUs: logits a chunk of tokens at a time; the chunk loop
and the kernel adapter of `liger_core.drivers.fused_linear_cross_entropy`.

The projection runs as torch matmuls (torch_npu sends them to the cube units of the AI
cores, the tuned path on Ascend); the loss and its gradient run as this package's
cross-entropy kernels on each chunk's logits (vector cores, UB-sized vocabulary chunks).
A chunk holds about as many logits as the input has elements, so peak memory stays far
below ``tokens x vocab``.

With ``"mean"``/``"sum"`` the gradients are formed in the forward, while each chunk's
logits are at hand (the gradient overwrites that chunk's logits buffer, which this module
owns), and the backward only scales them. With ``"none"`` the upstream gradient differs per
token and is unknown in the forward, so the backward recomputes each chunk's logits.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.drivers import fused_linear_cross_entropy as flce_driver
from liger_core.ops.fused_linear_cross_entropy import target_stats

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import (
    CEOptions,
    cross_entropy_backward,
    cross_entropy_forward,
    prepare_target,
    reduce_rows,
)
from liger_ops_ascend._tiling import chunk_tokens


def _chunked(x, w, bias, t, opts, hw, a_rows, b_rows, want_loss, want_grads, accum_dtype, w_dtype, b_dtype):
    """One pass over token chunks: per-row (loss, z) when ``want_loss``, and the gradients of
    ``sum_i a_i loss_i + b_i z_i`` w.r.t. input, weight and bias when ``want_grads``."""
    n_tokens, hidden = x.shape
    vocab = w.shape[0]
    dev = x.device
    loss_rows = torch.zeros(n_tokens, dtype=torch.float32, device=dev)
    z_rows = torch.zeros(n_tokens, dtype=torch.float32, device=dev)
    gx = gw = gb = None
    if want_grads:
        gx = torch.empty_like(x)
        gw = torch.zeros((vocab, hidden), dtype=accum_dtype or w_dtype, device=dev)
        gb = torch.zeros(vocab, dtype=accum_dtype or b_dtype, device=dev) if bias is not None else None
    step = chunk_tokens(n_tokens, hidden, vocab, x.element_size())  # the logits, gradient in place
    for start in range(0, n_tokens, step):
        end = min(start + step, n_tokens)
        x_c, t_c = x[start:end], t[start:end]
        logits = x_c @ w.t()
        if bias is not None:
            logits += bias
        loss_c, z_c, lse_c = cross_entropy_forward(logits, t_c, opts, hw)
        if want_loss:
            loss_rows[start:end], z_rows[start:end] = loss_c, z_c
        if want_grads:
            # The chunk's gradient overwrites its logits (our own buffer).
            g = cross_entropy_backward(logits, t_c, lse_c, a_rows[start:end], b_rows[start:end], opts, hw, out=logits)
            gx[start:end] = g @ w
            gw += (g.t() @ x_c).to(gw.dtype)
            if gb is not None:
                gb += g.sum(0, dtype=torch.float32).to(gb.dtype)
    return loss_rows, z_rows, gx, gw, gb


class FusedLinearCrossEntropyKernels:
    """`liger_core.drivers.fused_linear_cross_entropy.FusedLinearCrossEntropyKernels` over `_chunked`."""

    protocol = flce_driver.PROTOCOL

    @staticmethod
    def forward(
        input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
        return_z_loss, accum_dtype, needs, grads_now,
    ):  # fmt: skip
        n_valid, weight_sum = target_stats(input, weight, target, ce_weight, ignore_index)
        hw = hardware.current(input.device)
        x2 = input.contiguous()
        w = weight.to(input.dtype).contiguous()
        b = None if bias is None else bias.to(input.dtype)
        t = prepare_target(target)
        opts = CEOptions(ce_weight, ignore_index, lse_square_scale, label_smoothing, softcap)
        n = input.shape[0]
        # Scales of a unit upstream gradient (mean: 1/sum(w_y) and 1/n; sum: 1).
        zero = torch.zeros(1, device=input.device)
        _, _, a, s = reduce_rows(zero, zero, reduction, n_valid, weight_sum)
        ones = torch.ones(n, dtype=torch.float32, device=input.device)
        w_dtype, b_dtype = weight.dtype, None if bias is None else bias.dtype
        loss_rows, z_rows, gx, gw, gb = _chunked(
            x2, w, b, t, opts, hw, ones * a, ones * s, True, grads_now, accum_dtype, w_dtype, b_dtype
        )
        loss, z, _, _ = reduce_rows(loss_rows, z_rows, reduction, n_valid, weight_sum)
        state = (opts, hw, accum_dtype, w_dtype, b_dtype)
        return loss.float(), z.float(), (gx, gw, gb), (x2, w, b, t), state

    @staticmethod
    def scale_grads(grads, grad_loss, state):
        *_, w_dtype, b_dtype = state
        gx, gw, gb = grads
        # In place (the accum_dtype buffers then converted to the parameters' dtypes): autograd adopts them.
        return (
            None if gx is None else gx.mul_(grad_loss),
            None if gw is None else gw.mul_(grad_loss).to(w_dtype),
            None if gb is None else gb.mul_(grad_loss).to(b_dtype),
        )

    @staticmethod
    def backward(grad_loss, saved, state, needs):
        x2, w, b, t = saved
        opts, hw, accum_dtype, w_dtype, b_dtype = state
        _, _, gx, gw, gb = _chunked(
            x2, w, b, t, opts, hw, grad_loss, grad_loss, False, True, accum_dtype, w_dtype, b_dtype
        )
        return gx, gw.to(w_dtype), None if gb is None else gb.to(b_dtype)


LigerFusedLinearCrossEntropyFunction = implements("fused_linear_cross_entropy")(
    flce_driver.autograd_function(FusedLinearCrossEntropyKernels(), __name__)
)
