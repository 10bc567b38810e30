"""Vocabulary-parallel cross-entropy for Ascend NPUs: this rank's shard through `_cross_entropy`'s
row kernels, the ranks combined by liger-core's collectives; the kernel adapter of
`liger_core.drivers.vocab_parallel_cross_entropy`.

Forward: the shard's per-row lse (cross_entropy's forward, without z-loss or smoothing) and its
target logits (a gather of one element per row, 0 where another rank holds the class), then
`combine_shards` (one all-gather of a (2, tokens) buffer) gives the full rows' lse and target
logit. The local targets mark rows whose class another rank holds with ``n_cols``, a column the
kernels never read or write, so they get no target term. Backward: cross_entropy's gradient
kernel with the full rows' lse, i.e. the shard's softmax minus the one-hot where this rank holds
the target; no communication. ``in_place`` writes the gradient over the logits, as cross_entropy's.
"""

from __future__ import annotations

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

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward, prepare_target
from liger_ops_ascend._tiling import as_rows


class VocabParallelCrossEntropyKernels:
    """`liger_core.drivers.vocab_parallel_cross_entropy.VocabParallelCrossEntropyKernels` on
    `_cross_entropy`'s row kernels."""

    protocol = vocab_parallel_driver.PROTOCOL
    rows = staticmethod(as_rows)

    @staticmethod
    def forward(x, target, group, ignore_index, reduction):
        layout = shard_layout(x, group)
        # Checked against the full vocabulary before any kernel runs (as cross_entropy does here).
        n_valid, _ = L.label_stats(OP_NAME, target, ignore_index, layout.vocab)
        hw = hardware.current(x.device)
        local = prepare_target(local_target(target, layout, x.shape[1], ignore_index))
        opts = CEOptions(None, LOCAL_IGNORE, 0.0, 0.0, None)
        _, _, shard_lse = cross_entropy_forward(x, local, opts, hw)
        lse, x_y = combine_shards(shard_lse, target_logit(x, local).float(), group, layout)
        loss = reduce_losses(row_losses(lse, x_y, target, ignore_index), reduction, n_valid)
        scale = 1.0 / max(n_valid, 1) if reduction == "mean" else 1.0
        return loss.to(x.dtype), (local, lse), (opts, hw, reduction, scale)

    @staticmethod
    def backward(grad_loss, x, saved, state, out):
        local, lse = saved
        opts, hw, reduction, scale = state
        n_rows = x.shape[0]
        go = grad_loss.float()
        if reduction == "none":
            a_rows = go.reshape(n_rows).contiguous()
        else:
            a_rows = (go * scale).reshape(1).expand(n_rows).contiguous()
        # No z-loss: the kernel's z-loss factor (b) multiplies 0.
        return cross_entropy_backward(x, local, lse, a_rows, a_rows, opts, hw, out=out)


LigerVocabParallelCrossEntropyFunction = implements("vocab_parallel_cross_entropy")(
    vocab_parallel_driver.autograd_function(VocabParallelCrossEntropyKernels(), __name__)
)
