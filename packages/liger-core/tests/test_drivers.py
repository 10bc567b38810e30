"""The op-family drivers (`liger_core.drivers`): protocol checks and layout, over torch-written kernels."""

from __future__ import annotations

import pytest
import torch

from liger_core.backend import LigerBackendError
from liger_core.drivers import dyt as dyt_driver
from liger_core.drivers import glu as glu_driver
from liger_core.drivers import softmax as softmax_driver
from liger_core.drivers import sparsemax as sparsemax_driver
from liger_core.ops.sparsemax import math as sparsemax_math

# -- activations and softmax family: glu, dyt, softmax, sparsemax --------------------------------


class _WrongProtocol:
    protocol = 0


@pytest.mark.parametrize(
    ("build", "family", "version"),
    [
        (glu_driver.autograd_functions, "glu", glu_driver.PROTOCOL),
        (dyt_driver.autograd_function, "dyt", dyt_driver.PROTOCOL),
        (softmax_driver.autograd_function, "softmax", softmax_driver.PROTOCOL),
        (sparsemax_driver.autograd_function, "sparsemax", sparsemax_driver.PROTOCOL),
    ],
)
def test_act_drivers_refuse_another_protocol(build, family, version):
    with pytest.raises(LigerBackendError, match=rf"drivers\.{family} must declare protocol = {version}\b.*got 0"):
        build(_WrongProtocol(), __name__)


class _TorchSoftmaxKernels:
    protocol = softmax_driver.PROTOCOL

    @staticmethod
    def forward(x2d):
        assert x2d.ndim == 2 and (x2d.stride(-1) == 1 or x2d.shape[-1] <= 1)
        return torch.softmax(x2d.float(), -1).to(x2d.dtype), ("state", x2d.shape)

    @staticmethod
    def backward(dy2d, y, state):
        assert state == ("state", y.shape)
        return (y * (dy2d - (dy2d * y).sum(-1, keepdim=True))).to(y.dtype)


class _TorchSparsemaxKernels:
    """Saves the input rows (CUDA's choice) to check that the driver hands the saved tuple back."""

    protocol = sparsemax_driver.PROTOCOL

    @staticmethod
    def forward(x2d):
        return sparsemax_math(x2d, -1), (x2d,), None

    @staticmethod
    def backward(dy2d, saved, state):
        (x2d,) = saved
        inside = sparsemax_math(x2d, -1) > 0
        mean = (dy2d * inside).sum(-1, keepdim=True) / inside.sum(-1, keepdim=True)
        return torch.where(inside, dy2d - mean, 0.0)


def test_softmax_driver_rows_and_state():
    fn = softmax_driver.autograd_function(_TorchSoftmaxKernels(), __name__)
    x = torch.randn(3, 5, 8, dtype=torch.float32).transpose(0, 1).requires_grad_()  # strided rows
    y = fn.apply(x)
    grad = torch.randn_like(y).expand(5, 3, 8)  # broadcast rows: passed as stride-0 rows
    y.backward(grad)
    x_ref = x.detach().clone().requires_grad_()
    torch.softmax(x_ref, -1).backward(grad)
    torch.testing.assert_close(y, torch.softmax(x.detach(), -1))
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_sparsemax_driver_moves_dim_and_returns_saved():
    fn = sparsemax_driver.autograd_function(_TorchSparsemaxKernels(), __name__)
    x = torch.randn(4, 6, 5, dtype=torch.float32, requires_grad=True)
    y = fn.apply(x, 1)
    grad = torch.randn_like(y)
    y.backward(grad)
    x_ref = x.detach().clone().requires_grad_()
    sparsemax_math(x_ref, 1).backward(grad)
    torch.testing.assert_close(y, sparsemax_math(x.detach(), 1))
    torch.testing.assert_close(x.grad, x_ref.grad)


class _TorchGLUKernels:
    protocol = glu_driver.PROTOCOL

    @staticmethod
    def _act(a, activation):
        if activation == glu_driver.SILU:
            return torch.nn.functional.silu(a)
        return torch.nn.functional.gelu(a, approximate="tanh")

    def forward(self, a, b, activation):
        return self._act(a, activation) * b, None

    def backward(self, dc, a, b, activation, in_place, state):
        with torch.enable_grad():
            a_, b_ = a.detach().requires_grad_(), b.detach().requires_grad_()
            da, db = torch.autograd.grad(self._act(a_, activation) * b_, (a_, b_), dc)
        if in_place:
            # Written through .data, as a kernel writes: behind autograd's version counters.
            a.data.copy_(da)
            b.data.copy_(db)
            return a, b
        return da, db

    def gate_up_forward(self, gate_up, activation):
        gate, up = gate_up.chunk(2, -1)
        return self._act(gate, activation) * up, None

    def gate_up_backward(self, dc, gate_up, activation, in_place, state):
        gate, up = gate_up.chunk(2, -1)
        dgate, dup = self.backward(dc, gate, up, activation, False, None)
        grad = torch.cat((dgate, dup), -1)
        if in_place:
            gate_up.data.copy_(grad)
            return gate_up
        return grad


def test_glu_driver_in_place_bumps_versions():
    fns = glu_driver.autograd_functions(_TorchGLUKernels(), __name__)
    a = torch.randn(2, 3, 4, dtype=torch.float32, requires_grad=True)
    b = torch.randn(2, 3, 4, dtype=torch.float32, requires_grad=True)
    a_mid, b_mid = a * 1, b * 1
    # A node made first (so its backward runs after the GLU's) that also saved a_mid: once the
    # in-place backward has overwritten a_mid, autograd must refuse it, not read gradients as a.
    other = (a_mid * a_mid).sum()
    loss = fns["swiglu"].apply(a_mid, b_mid, True).sum() + other
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_glu_driver_matches_torch():
    fns = glu_driver.autograd_functions(_TorchGLUKernels(), __name__)
    gate_up = torch.randn(2, 3, 8, dtype=torch.float32, requires_grad=True)
    out = fns["fused_gate_up_swiglu"].apply(gate_up, False)
    assert out.shape == (2, 3, 4)
    grad = torch.randn_like(out)
    out.backward(grad)
    ref = gate_up.detach().clone().requires_grad_()
    gate, up = ref.chunk(2, -1)
    (torch.nn.functional.silu(gate) * up).backward(grad)
    torch.testing.assert_close(gate_up.grad, ref.grad)
