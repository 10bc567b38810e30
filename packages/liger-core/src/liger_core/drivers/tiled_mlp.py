"""tiled_mlp's driver (`liger_core.ops.tiled_mlp`): the autograd Function over a vendor's gated
activation.

The orchestration (tiles of tokens, the projections as the framework's matmuls, recompute in
backward, weight gradients accumulated tile by tile) is `liger_core.ops.tiled_mlp.TiledMLPFunction`'s;
a vendor provides only the gated activation of one tile, forward and in-place backward, as
`glu`'s kernels compute it.
"""

from __future__ import annotations

from functools import partial
from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers.glu import GELU_TANH, SILU
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.tiled_mlp import GatedKernels, TiledMLPFunction, check_args

PROTOCOL = 1

# The op's activation names and the glu driver's codes a vendor's kernels take.
ACTIVATION_CODES = {"silu": SILU, "gelu_tanh": GELU_TANH}


class TiledMLPKernels(Protocol):
    """What a vendor provides: the gated activation on one tile of token rows. ``gate`` and ``up``
    are contiguous ``(rows, intermediate)`` tensors of one dtype, buffers the orchestration owns;
    ``activation`` is `glu.SILU` or `glu.GELU_TANH`."""

    protocol: int

    def forward(self, gate: torch.Tensor, up: torch.Tensor, activation: int) -> torch.Tensor:
        """``act(gate) * up``, a new tensor shaped like ``gate``, of its dtype."""

    def backward(self, grad_hidden: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: int) -> None:
        """Writes the gradients of ``gate`` and ``up`` (from ``grad_hidden``, the gradient of
        ``act(gate) * up``) over ``gate`` and ``up``."""


def autograd_function(kernels: TiledMLPKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerTiledMLPFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "tiled_mlp", PROTOCOL)
    gated = {
        name: GatedKernels(partial(kernels.forward, activation=code), partial(kernels.backward, activation=code))
        for name, code in ACTIVATION_CODES.items()
    }

    def forward(ctx, x, gate_weight, up_weight, down_weight, activation, num_shards):
        check_args(x, gate_weight, up_weight, down_weight, activation, num_shards)
        return TiledMLPFunction.shared_forward(
            ctx, x, gate_weight, up_weight, down_weight, num_shards, gated[activation]
        )

    return build_function("LigerTiledMLPFunction", module, forward, TiledMLPFunction.backward)
