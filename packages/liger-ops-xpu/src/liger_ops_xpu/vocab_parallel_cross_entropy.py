"""Vocabulary-parallel cross-entropy for Intel GPUs: this rank's shard through `_cross_entropy`'s
row kernels, the ranks combined by liger-core's collectives; the kernel adapter of
`liger_core.drivers.vocab_parallel_cross_entropy`.

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
from liger_core.drivers import vocab_parallel_cross_entropy as vocab_parallel_driver
from liger_core.ops import _losses as L
from liger_core.ops.vocab_parallel_cross_entropy import (
    LOCAL_IGNORE,
    OP_NAME,
    combine_shards,
    local_target,
    reduce_losses,
    row_losses,
    shard_layout,
    target_logit,
)

from liger_ops_xpu._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward
from liger_ops_xpu._tiling import unit_col


class VocabParallelCrossEntropyKernels:
    """`liger_core.drivers.vocab_parallel_cross_entropy.VocabParallelCrossEntropyKernels` on
    `_cross_entropy`'s row kernels."""

    protocol = vocab_parallel_driver.PROTOCOL
    rows = staticmethod(unit_col)

    @staticmethod
    def forward(x, target, group, ignore_index, reduction):
        layout = shard_layout(x, group)
        # Checked against the full vocabulary before any kernel runs (as cross_entropy does here).
        n_valid, _ = L.label_stats(OP_NAME, target, ignore_index, layout.vocab)
        local = local_target(target, layout, x.shape[1], ignore_index)
        opts = CEOptions(LOCAL_IGNORE, 0.0, 0.0, reduction, None)
        _, _, shard_lse = cross_entropy_forward(x, local, None, opts, float(x.shape[1]))
        lse, x_y = combine_shards(shard_lse, target_logit(x, local).float(), group, layout)
        loss = reduce_losses(row_losses(lse, x_y, target, ignore_index), reduction, n_valid)
        return loss.to(x.dtype), (local, lse), (opts, opts.scales(n_valid, float(n_valid)))

    @staticmethod
    def backward(grad_loss, x, saved, state, out):
        local, lse = saved
        opts, scales = state
        dx = out if out is not None else torch.empty_like(x)
        cross_entropy_backward(x, local, None, lse, grad_loss.reshape(-1), dx, opts, float(x.shape[1]), *scales)
        return dx


LigerVocabParallelCrossEntropyFunction = implements("vocab_parallel_cross_entropy")(
    vocab_parallel_driver.autograd_function(VocabParallelCrossEntropyKernels(), __name__)
)
