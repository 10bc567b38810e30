"""The tiled MLP for Intel GPUs: liger-core's tiled orchestration (`liger_core.drivers.tiled_mlp`,
its matmuls on oneDNN) calls `TiledMLPKernels` here for each tile's gated activation, i.e. `glu`'s
kernels, whose backward overwrites the tile's gate and up buffers with their gradients."""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.drivers import tiled_mlp as tiled_mlp_driver

from liger_ops_xpu.glu import glu_backward, glu_forward


class TiledMLPKernels:
    """`liger_core.drivers.tiled_mlp.TiledMLPKernels` on `glu`'s kernels."""

    protocol = tiled_mlp_driver.PROTOCOL

    @staticmethod
    def forward(gate: torch.Tensor, up: torch.Tensor, activation: int) -> torch.Tensor:
        return glu_forward(gate, up, activation)

    @staticmethod
    def backward(grad_hidden: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: int) -> None:
        glu_backward(grad_hidden, gate, up, activation, True)


LigerTiledMLPFunction = implements("tiled_mlp")(tiled_mlp_driver.autograd_function(TiledMLPKernels(), __name__))
