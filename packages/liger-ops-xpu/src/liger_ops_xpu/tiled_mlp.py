"""The tiled MLP for Intel GPUs: liger-core's orchestration (`liger_core.ops.tiled_mlp`: tiles of
tokens, the projections as oneDNN GEMMs, recompute in backward, weight gradients accumulated
tile by tile) over this package's gated-activation kernels (`glu`), whose backward writes the
gradients over the tile's gate and up buffers (the orchestration owns them)."""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops.tiled_mlp import GatedKernels, TiledMLPFunction, check_args

from liger_ops_xpu.glu import GELU_TANH, SILU, glu_backward, glu_forward


def _gated_kernels(act: int) -> GatedKernels:
    def forward(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return glu_forward(gate, up, act)

    def backward(grad_hidden: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> None:
        glu_backward(grad_hidden, gate, up, act, True)

    return GatedKernels(forward, backward)


KERNELS = {"silu": _gated_kernels(SILU), "gelu_tanh": _gated_kernels(GELU_TANH)}


@implements("tiled_mlp")
class LigerTiledMLPFunction(TiledMLPFunction):
    @staticmethod
    def forward(ctx, x, gate_weight, up_weight, down_weight, activation, num_shards):
        check_args(x, gate_weight, up_weight, down_weight, activation, num_shards)
        return TiledMLPFunction.shared_forward(
            ctx, x, gate_weight, up_weight, down_weight, num_shards, KERNELS[activation]
        )
