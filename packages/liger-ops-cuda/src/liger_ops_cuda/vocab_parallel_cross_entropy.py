"""Vocabulary-parallel cross-entropy for NVIDIA GPUs: this rank's shard through `_cross_entropy`'s
kernels, the ranks combined by liger-core's collectives; the kernel adapter of
`liger_core.drivers.vocab_parallel_cross_entropy`.

Forward: the shard's per-row lse (cross_entropy's forward, without z-loss or smoothing) and its
target logits (a gather of one element per row, 0 where another rank holds the class), then
`combine_shards` (one all-gather of a (2, tokens) buffer) gives the full rows' lse and target
logit. The local targets mark rows whose class another rank holds with ``n_cols``, a column the
kernels never match, so they get no target term. Backward: cross_entropy's gradient kernel with
the full rows' lse, i.e. the shard's softmax minus the one-hot where this rank holds the target;
no communication. ``in_place`` writes the gradient over the logits, as cross_entropy's.
"""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.drivers import vocab_parallel_cross_entropy as vocab_parallel_driver
from liger_core.ops.vocab_parallel_cross_entropy import (
    LOCAL_IGNORE,
    OP_NAME,
    combine_shards,
    local_target,
    row_losses,
    shard_layout,
    target_logit,
)
from liger_ops_cuda._cross_entropy import cross_entropy_backward, cross_entropy_forward, target_stats


class VocabParallelCrossEntropyKernels:
    """`liger_core.drivers.vocab_parallel_cross_entropy.VocabParallelCrossEntropyKernels` on
    `_cross_entropy`'s kernels."""

    protocol = vocab_parallel_driver.PROTOCOL

    @staticmethod
    def rows(logits):
        # The kernels index rows by stride and columns by 1.
        return logits if logits.stride(-1) == 1 else logits.contiguous()

    @staticmethod
    def forward(x, target, group, ignore_index, reduction):
        layout = shard_layout(x, group)
        # Counted against the full vocabulary, on the device; read after the kernels are queued.
        scales, _, check = target_stats(OP_NAME, target, ignore_index, layout.vocab, None, reduction)
        local = local_target(target, layout, x.shape[1], ignore_index)
        rows = cross_entropy_forward(x, local, None, None, None, LOCAL_IGNORE, 0.0, 0.0, None, want_z=False)
        lse, x_y = combine_shards(rows.lse, target_logit(x, local).float(), group, layout)
        loss = row_losses(lse, x_y, target, ignore_index)
        if reduction != "none":
            loss = loss.sum() if reduction == "sum" else loss.sum() * scales[0]
        check.raise_if_bad()
        return loss.to(x.dtype), (local, lse, scales), None

    @staticmethod
    def backward(grad_loss, x, saved, state, out):
        local, lse, scales = saved
        grad = out if out is not None else torch.empty_like(x, memory_format=torch.contiguous_format)
        cross_entropy_backward(x, local, None, None, None, lse, grad, grad_loss, LOCAL_IGNORE, 0.0, 0.0, None, scales)
        return grad


LigerVocabParallelCrossEntropyFunction = implements("vocab_parallel_cross_entropy")(
    vocab_parallel_driver.autograd_function(VocabParallelCrossEntropyKernels(), __name__)
)
