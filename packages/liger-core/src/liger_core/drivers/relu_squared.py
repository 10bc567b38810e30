"""relu_squared's driver (`liger_core.ops.relu_squared`): the autograd Function over a vendor's kernels."""

from __future__ import annotations

from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.relu_squared import check_args

PROTOCOL = 1


class ReLUSquaredKernels(Protocol):
    """What a vendor provides. Every tensor is contiguous; shapes are the input's."""

    protocol: int

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``relu(x) ** 2``, a new tensor of x's dtype."""

    def backward(self, dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``2 * relu(x) * dy`` (computed in float32), a new tensor of x's dtype."""


def autograd_function(kernels: ReLUSquaredKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerReLUSquaredFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "relu_squared", PROTOCOL)

    def forward(ctx, x):
        check_args(x)
        x_c = x.contiguous()
        ctx.save_for_backward(x_c)
        return kernels.forward(x_c)

    def backward(ctx, dy):
        (x_c,) = ctx.saved_tensors
        return kernels.backward(dy.contiguous(), x_c)

    return build_function("LigerReLUSquaredFunction", module, forward, backward)
