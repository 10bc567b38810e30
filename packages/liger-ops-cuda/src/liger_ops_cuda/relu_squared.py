"""Squared ReLU (``relu(x) ** 2``, Nemotron's activation) for NVIDIA GPUs: Triton kernels, launch
and the kernel adapter of `liger_core.drivers.relu_squared`.

Elementwise and memory-bound like the gated activations, and launched like them: each program
streams one contiguous block of GLU_BLOCK elements. Forward reads x and writes y; backward
reads the incoming gradient and x (saved, not y: the gradient needs relu(x) itself) and writes
grad_x = 2 * relu(x) * grad_y, all in float32 and rounded once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import relu_squared as relu_squared_driver
from liger_ops_cuda._tiling import launch_flat


@triton.jit
def _relu_squared_forward_kernel(X, Y, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    r = tl.maximum(tl.load(X + offs, mask=mask, other=0.0).to(tl.float32), 0.0)
    tl.store(Y + offs, (r * r).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _relu_squared_backward_kernel(DY, X, DX, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.maximum(tl.load(X + offs, mask=mask, other=0.0).to(tl.float32), 0.0)
    tl.store(DX + offs, (2.0 * r * dy).to(DX.dtype.element_ty), mask=mask)


def relu_squared_forward(x: torch.Tensor, block: int | None = None) -> torch.Tensor:
    """``relu(x) ** 2`` of contiguous ``x``."""
    y = torch.empty_like(x)
    launch_flat(_relu_squared_forward_kernel, x.numel(), x, y, block=block)
    return y


def relu_squared_backward(dy: torch.Tensor, x: torch.Tensor, block: int | None = None) -> torch.Tensor:
    """``grad_x`` of contiguous tensors."""
    dx = torch.empty_like(x)
    launch_flat(_relu_squared_backward_kernel, x.numel(), dy, x, dx, block=block)
    return dx


class ReLUSquaredKernels:
    """`liger_core.drivers.relu_squared.ReLUSquaredKernels` on this module's kernels."""

    protocol = relu_squared_driver.PROTOCOL
    forward = staticmethod(relu_squared_forward)
    backward = staticmethod(relu_squared_backward)


LigerReLUSquaredFunction = implements("relu_squared")(
    relu_squared_driver.autograd_function(ReLUSquaredKernels(), __name__)
)
