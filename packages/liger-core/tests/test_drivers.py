"""The drivers of `liger_core.drivers` refuse kernels built for another protocol version.

Other families append their own blocks; each block names its driver module.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from liger_core.backend import LigerBackendError

# -- cross_entropy, fused_linear_cross_entropy, vocab_parallel_cross_entropy -----------------


class _KernelsOfAnotherVersion:
    protocol = 0


@pytest.mark.parametrize(
    "family",
    [
        "cross_entropy",
        "fused_linear_cross_entropy",
        "fused_linear_scaled_cross_entropy",
        "vocab_parallel_cross_entropy",
    ],
)
def test_cross_entropy_drivers_refuse_another_protocol(family):
    import importlib

    driver = importlib.import_module(f"liger_core.drivers.{family}")
    with pytest.raises(
        LigerBackendError, match=rf"liger_core\.drivers\.{family} must declare protocol = {driver.PROTOCOL}"
    ):
        driver.autograd_function(_KernelsOfAnotherVersion(), __name__)


class _TorchCrossEntropyKernels:
    """cross_entropy's protocol in plain torch (mean reduction only), recording what the driver passes."""

    protocol = 1

    def __init__(self):
        self.outs = []

    def rows(self, logits):
        return logits if logits.stride(-1) == 1 else logits.contiguous()

    def forward(self, x, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, rz):
        lse = torch.logsumexp(x.float(), dim=-1)
        loss = (lse - x.float().gather(1, target[:, None])[:, 0]).mean()
        return loss.to(x.dtype), torch.zeros((), dtype=x.dtype), (target, lse), reduction

    def backward(self, grad_loss, x, saved, state, out):
        target, lse = saved
        self.outs.append(out)
        grad = torch.softmax(x.float(), dim=-1)
        grad[torch.arange(x.shape[0]), target] -= 1
        grad = (grad * grad_loss / x.shape[0]).to(x.dtype)
        return grad if out is None else out.copy_(grad)


@pytest.mark.parametrize("in_place", [False, True])
def test_cross_entropy_driver_in_place_policy(in_place):
    from liger_core.drivers import cross_entropy as driver

    kernels = _TorchCrossEntropyKernels()
    function = driver.autograd_function(kernels, __name__)
    logits = torch.randn(4, 7, requires_grad=True)
    target = torch.tensor([0, 3, 6, 2])
    x = logits * 1.0  # a non-leaf the gradient may overwrite
    loss, z = function.apply(x, target, None, -100, 0.0, 0.0, "mean", None, True, in_place)
    assert not z.requires_grad
    loss.backward()
    torch.testing.assert_close(logits.grad, torch.autograd.grad(F.cross_entropy(logits, target), logits)[0])
    # The kernel gets the logits as its output buffer only when the caller opted in.
    assert (kernels.outs[0] is not None) == in_place


class _TorchFusedLinearCrossEntropyKernels:
    """fused_linear_cross_entropy's protocol in plain torch ("mean" and "none"), recording the calls."""

    protocol = 1

    def __init__(self):
        self.calls = []

    def _grads(self, x, w, target, up):
        x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
        with torch.enable_grad():
            rows = F.cross_entropy(x @ w.t(), target, reduction="none")
            return torch.autograd.grad(rows, (x, w), up.expand_as(rows))

    def forward(self, x, w, target, bias, ce_weight, ii, lss, ls, reduction, softcap, rz, accum, needs, grads_now):
        self.calls.append(("forward", needs, grads_now))
        rows = F.cross_entropy(x @ w.t(), target, reduction="none")
        loss = rows.mean() if reduction == "mean" else rows
        grads = None
        if grads_now:
            gx, gw = self._grads(x, w, target, torch.full((1,), 1.0 / len(target)))
            grads = (gx, gw, None)
        return loss, torch.zeros(()), grads, (x, w, target), None

    def scale_grads(self, grads, grad_loss, state):
        self.calls.append(("scale_grads",))
        return tuple(None if g is None else g.mul_(grad_loss) for g in grads)

    def backward(self, grad_loss, saved, state, needs):
        self.calls.append(("backward", needs))
        x, w, target = saved
        return (*self._grads(x, w, target, grad_loss), None)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_fused_linear_cross_entropy_driver_gradients_in_forward_or_backward(reduction):
    from liger_core.drivers import fused_linear_cross_entropy as driver

    kernels = _TorchFusedLinearCrossEntropyKernels()
    function = driver.autograd_function(kernels, __name__)
    x = torch.randn(5, 3, requires_grad=True)
    w = torch.randn(6, 3, requires_grad=True)
    target = torch.tensor([0, 1, 5, 2, 4])
    loss = function.apply(x, w, target, None, None, -100, 0.0, 0.0, reduction, None, False, None)
    (loss.sum() * 2.0).backward()
    ref_x, ref_w = x.detach().requires_grad_(), w.detach().requires_grad_()
    (F.cross_entropy(ref_x @ ref_w.t(), target, reduction=reduction).sum() * 2.0).backward()
    torch.testing.assert_close(x.grad, ref_x.grad)
    torch.testing.assert_close(w.grad, ref_w.grad)
    # A scalar loss: gradients in the forward, scaled in the backward; "none": recomputed in the backward.
    fused = reduction == "mean"
    assert kernels.calls[0] == ("forward", (True, True, False), fused)
    assert kernels.calls[1][0] == ("scale_grads" if fused else "backward")
