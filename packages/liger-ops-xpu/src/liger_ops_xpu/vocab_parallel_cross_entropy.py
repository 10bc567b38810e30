"""Vocabulary-parallel cross-entropy for Intel GPUs: this rank's shard through `_cross_entropy`'s
row kernels, the ranks combined by liger-core's collectives.

Forward: the shard's per-row lse (cross_entropy's forward, without z-loss or smoothing) and its
target logits (a gather of one element per row, 0 where another rank holds the class), then
`combine_shards` (one all-gather of a (2, tokens) buffer) gives the full rows' lse and target
logit. The local targets mark rows whose class another rank holds with ``n_cols``, a column the
kernels never read or match, so they get no target term. Backward: cross_entropy's gradient
kernel with the full rows' lse, i.e. the shard's softmax minus the one-hot where this rank holds
the target; no communication. ``in_place`` writes the gradient over the logits, as cross_entropy's.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops import _losses as L
from liger_core.ops.vocab_parallel_cross_entropy import (
    LOCAL_IGNORE,
    OP_NAME,
    check_args,
    combine_shards,
    local_target,
    reduce_losses,
    row_losses,
    shard_layout,
    target_logit,
)

from liger_ops_xpu._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward
from liger_ops_xpu._tiling import unit_col


@implements("vocab_parallel_cross_entropy")
class LigerVocabParallelCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, group, ignore_index, reduction, in_place):
        check_args(logits, target, group, ignore_index, reduction, in_place)
        x = unit_col(logits)
        layout = shard_layout(x, group)
        # Checked against the full vocabulary before any kernel runs (as cross_entropy does here).
        n_valid, _ = L.label_stats(OP_NAME, target, ignore_index, layout.vocab)
        local = local_target(target, layout, x.shape[1], ignore_index)
        opts = CEOptions(LOCAL_IGNORE, 0.0, 0.0, reduction, None)
        _, _, shard_lse = cross_entropy_forward(x, local, None, opts, float(x.shape[1]))
        lse, x_y = combine_shards(shard_lse, target_logit(x, local).float(), group, layout)
        loss = reduce_losses(row_losses(lse, x_y, target, ignore_index), reduction, n_valid)
        # In place: a detached alias, so the gradient returned in its memory is a tensor of its own.
        ctx.save_for_backward(x.detach() if in_place else x, local, lse)
        ctx.opts, ctx.scales = opts, opts.scales(n_valid, float(n_valid))
        ctx.in_place = in_place
        ctx.set_materialize_grads(False)
        return loss.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad_loss):
        if grad_loss is None:
            return (None,) * 6
        x, local, lse = ctx.saved_tensors
        grad_out = grad_loss.reshape(-1).contiguous()
        in_place = ctx.in_place and x.is_contiguous()
        dx = x if in_place else torch.empty_like(x)
        cross_entropy_backward(x, local, None, lse, grad_out, dx, ctx.opts, float(x.shape[1]), *ctx.scales)
        if in_place:
            # The kernel overwrote the logits behind autograd's back (see cross_entropy).
            torch.autograd.graph.increment_version(dx)
        return (dx,) + (None,) * 5
