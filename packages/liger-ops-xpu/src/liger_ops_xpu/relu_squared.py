"""Squared ReLU (``relu(x) ** 2``, Nemotron's activation) for Intel GPUs: Triton kernels, launch
and the kernel adapter of `liger_core.drivers.relu_squared`.

Elementwise and launched like the gated activations: a flat 1-D grid of ``ELEMENTWISE_BLOCK``-
element programs over contiguous x (`_tiling.launch_flat`), default register file. Forward reads x
and writes y; backward reads the incoming gradient and x (saved: the gradient needs relu(x))
and writes grad_x = 2 * relu(x) * grad_y, in fp32 and rounded once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import relu_squared as relu_squared_driver

from liger_ops_xpu._tiling import launch_flat


@triton.jit
def _relu_squared_forward_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    r = tl.maximum(tl.load(X + offs, mask=mask, other=0.0).to(tl.float32), 0.0)
    tl.store(Y + offs, (r * r).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _relu_squared_backward_kernel(DY, X, DX, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.maximum(tl.load(X + offs, mask=mask, other=0.0).to(tl.float32), 0.0)
    tl.store(DX + offs, (2.0 * r * dy).to(DX.dtype.element_ty), mask=mask)


def relu_squared_forward(x: torch.Tensor) -> torch.Tensor:
    """``relu(x) ** 2`` of contiguous ``x``."""
    y = torch.empty_like(x)
    launch_flat(_relu_squared_forward_kernel, x.numel(), x.device, x, y)
    return y


def relu_squared_backward(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``grad_x`` of contiguous ``x``."""
    dx = torch.empty_like(x)
    launch_flat(_relu_squared_backward_kernel, x.numel(), x.device, dy.contiguous(), x, dx)
    return dx


class ReLUSquaredKernels:
    """`liger_core.drivers.relu_squared.ReLUSquaredKernels` on this module's kernels."""

    protocol = relu_squared_driver.PROTOCOL
    forward = staticmethod(relu_squared_forward)
    backward = staticmethod(relu_squared_backward)


LigerReLUSquaredFunction = implements("relu_squared")(
    relu_squared_driver.autograd_function(ReLUSquaredKernels(), __name__)
)
