"""attn_res's driver (`liger_core.ops.attn_res`): the autograd Function over a vendor's kernels.

V (N, ..., hidden) is handed over as N blocks of rows, ``(N, positions, hidden)`` with unit
column stride (a copy only when needed); the incoming gradient as ``(positions, hidden)`` rows
with unit column stride. A vendor's forward returns, beside h, the tensors its backward takes
back (the blocks, or its own copy of them where its hardware needs other strides, and its float32
statistics); the driver saves them.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.attn_res import check_args

PROTOCOL = 1


class AttnResKernels(Protocol):
    """What a vendor provides."""

    protocol: int

    def forward(
        self, V3: torch.Tensor, w_query: torch.Tensor, w_norm: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """``(h, saved)``: h ``(positions, hidden)`` in V's dtype, contiguous; ``saved``: the
        tensors `backward` takes back. V3: ``(N, positions, hidden)``, unit column stride."""

    def backward(
        self, dh: torch.Tensor, w_query: torch.Tensor, w_norm: torch.Tensor, saved: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(grad_V (N, positions, hidden) contiguous in V's dtype, grad_w_query, grad_w_norm)``
        in the weights' dtypes; dh ``(positions, hidden)`` with unit column stride."""


def _rows(t: torch.Tensor, n_rows: int) -> torch.Tensor:
    # (n_rows, hidden) with unit column stride; a copy only where the columns are strided.
    t2 = t.reshape(n_rows, t.shape[-1])
    return t2 if t2.stride(-1) == 1 or t2.shape[-1] <= 1 else t2.contiguous()


def autograd_function(kernels: AttnResKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerAttnResFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "attn_res", PROTOCOL)

    def forward(ctx, V, w_query, w_norm, eps):
        check_args(V, w_query, w_norm, eps)
        V3 = V.reshape(V.shape[0], -1, V.shape[-1])
        if V3.stride(-1) != 1 and V3.shape[-1] > 1:
            V3 = V3.contiguous()
        h, saved = kernels.forward(V3, w_query, w_norm, eps)
        ctx.save_for_backward(w_query, w_norm, *saved)
        ctx.V_shape = V.shape
        return h.view(V.shape[1:])

    def backward(ctx, dh):
        w_query, w_norm, *saved = ctx.saved_tensors
        V_shape = ctx.V_shape
        dh2d = _rows(dh, math.prod(V_shape[1:-1]))
        dV, d_query, d_norm = kernels.backward(dh2d, w_query, w_norm, tuple(saved))
        return dV.view(V_shape), d_query, d_norm, None

    return build_function("LigerAttnResFunction", module, forward, backward)
