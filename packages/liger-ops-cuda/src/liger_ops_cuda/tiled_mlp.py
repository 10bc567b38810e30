"""The tiled MLP for NVIDIA GPUs: `TiledMLPKernels`, the kernel adapter of
`liger_core.drivers.tiled_mlp`, runs each tile's gated activation on this package's `glu` kernels
over flat views of the tile's buffers; the projections around it are cuBLAS GEMMs that liger-core's
orchestration issues."""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.drivers import tiled_mlp as tiled_mlp_driver
from liger_ops_cuda._tiling import flat
from liger_ops_cuda.glu import glu_backward, glu_forward


class TiledMLPKernels:
    """`liger_core.drivers.tiled_mlp.TiledMLPKernels` on `glu`'s kernels."""

    protocol = tiled_mlp_driver.PROTOCOL

    @staticmethod
    def forward(gate: torch.Tensor, up: torch.Tensor, activation: int) -> torch.Tensor:
        return glu_forward(flat(gate), flat(up), activation).view(gate.shape)

    @staticmethod
    def backward(grad_hidden: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: int) -> None:
        glu_backward(grad_hidden, flat(gate), flat(up), activation, True)


LigerTiledMLPFunction = implements("tiled_mlp")(tiled_mlp_driver.autograd_function(TiledMLPKernels(), __name__))
