"""Embedding module."""

from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import liger_embedding


class LigerEmbedding(nn.Module):
    """A drop-in for ``torch.nn.Embedding(num_embeddings, embedding_dim, padding_idx)`` (no
    ``max_norm``, dense gradients), under liger-kernel's name: a ``(num_embeddings,
    embedding_dim)`` weight drawn from N(0, 1), its ``padding_idx`` row zeroed and never updated
    (no gradient reaches it)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim))
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].fill_(0)

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return liger_embedding(self.weight, indices, self.padding_idx)

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"
