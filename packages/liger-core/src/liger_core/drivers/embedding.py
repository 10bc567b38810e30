"""embedding's driver (`liger_core.ops.embedding`): the autograd Function over a vendor's kernels.

Out-of-table indices do not stop the forward on the host: they are clamped to row 0 for the
kernels and counted on the device (`liger_core.ops.embedding.clamp_indices`); the count is read
back (`liger_core.ops._losses.PendingBadCount`) only once the lookup is queued, and raises the
contract's IndexError then. The clamped flat indices are what backward gets.
"""

from __future__ import annotations

from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.embedding import check_args, clamp_indices

PROTOCOL = 1


class EmbeddingKernels(Protocol):
    """What a vendor provides. ``idx`` is flat (one index per looked-up position), of the caller's
    index dtype (int32 or int64), every value in ``[0, num_embeddings)``; row tensors have a
    unit-stride last dimension (any row stride)."""

    protocol: int

    def forward(self, weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """``weight[idx]``: a new contiguous ``(len(idx), embedding_dim)`` tensor of weight's dtype."""

    def backward(
        self, dy: torch.Tensor, idx: torch.Tensor, num_embeddings: int, dtype: torch.dtype, padding_idx: int | None
    ) -> torch.Tensor:
        """``grad_weight``, a new ``(num_embeddings, embedding_dim)`` tensor of ``dtype``: row r is
        the float32 sum, in position order, of the rows of ``dy`` (``(len(idx), embedding_dim)``)
        whose index is r, rounded once; zero for rows nobody looked up and for ``padding_idx``
        (a row number, possibly negative as nn.Embedding allows, or None)."""


def looked_up_rows(idx: torch.Tensor, num_embeddings: int) -> torch.Tensor:
    """For a backward that writes every row of grad_weight once: an int8 flag per table row, 1
    where some position of the flat ``idx`` looked it up (on the device, no host sync)."""
    flags = torch.zeros(num_embeddings, dtype=torch.int8, device=idx.device)
    return flags.index_fill_(0, idx.long(), 1)


def sorted_positions(idx: torch.Tensor, num_embeddings: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For a backward that sums each table row's run of positions: ``(sorted_idx, order)``, the
    flat ``idx`` stably sorted and the positions in that order. The keys are int32 whenever every
    row number fits (``sorted_idx`` is then int32): a radix sort's passes scale with the key's
    width (16384 indices on an H200: 76 us as int64, 47 us as int32)."""
    keys = idx.to(torch.int32) if num_embeddings <= torch.iinfo(torch.int32).max else idx
    return torch.sort(keys, stable=True)


def autograd_function(kernels: EmbeddingKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerEmbeddingFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "embedding", PROTOCOL)

    def forward(ctx, weight, indices, padding_idx):
        check_args(weight, indices, padding_idx)
        # Out-of-table indices read row 0 meanwhile; `pending.check` raises the contract's IndexError.
        idx, pending = clamp_indices(indices.reshape(-1), weight.shape[0])
        ctx.save_for_backward(idx)
        ctx.table, ctx.padding_idx = (weight.shape[0], weight.dtype), padding_idx
        out = kernels.forward(weight if weight.stride(-1) == 1 else weight.contiguous(), idx)
        pending.check()
        return out.view(*indices.shape, weight.shape[1])

    def backward(ctx, dy):
        (idx,) = ctx.saved_tensors
        num_embeddings, dtype = ctx.table
        dy_rows = dy.reshape(idx.numel(), dy.shape[-1])
        if dy_rows.stride(-1) != 1:
            dy_rows = dy_rows.contiguous()
        return kernels.backward(dy_rows, idx, num_embeddings, dtype, ctx.padding_idx), None, None

    return build_function("LigerEmbeddingFunction", module, forward, backward)
