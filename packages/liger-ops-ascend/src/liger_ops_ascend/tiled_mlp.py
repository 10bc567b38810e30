"""The tiled MLP for Ascend NPUs: the kernel adapter of `liger_core.drivers.tiled_mlp` (liger-core's
orchestration: tiles of tokens, the projections as the NPU's matmuls, recompute in backward,
weight gradients accumulated tile by tile) on this package's gated-activation kernels (`glu`,
through the launch guard), whose backward writes the gradients over the tile's gate and up
buffers (the orchestration owns them)."""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.drivers import tiled_mlp as tiled_mlp_driver

from liger_ops_ascend import hardware
from liger_ops_ascend.glu import glu_backward, glu_forward


class TiledMLPKernels:
    """`liger_core.drivers.tiled_mlp.TiledMLPKernels` on `glu`'s kernels."""

    protocol = tiled_mlp_driver.PROTOCOL

    @staticmethod
    def forward(gate: torch.Tensor, up: torch.Tensor, activation: int) -> torch.Tensor:
        return glu_forward(gate, up, activation, hardware.current(gate.device))

    @staticmethod
    def backward(grad_hidden: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: int) -> None:
        glu_backward(grad_hidden.contiguous(), gate, up, activation, True, hardware.current(gate.device))


LigerTiledMLPFunction = implements("tiled_mlp")(tiled_mlp_driver.autograd_function(TiledMLPKernels(), __name__))
