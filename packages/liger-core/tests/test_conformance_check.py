"""The generic conformance check (`liger_core.conformance.check`) fails every way a kernel can
be wrong: values, gradients, dtypes, devices, and memory it was not allowed to touch."""

from __future__ import annotations

import pytest
import torch

from liger_core.backend import Backend
from liger_core.conformance.check import check, check_sample, make_args
from liger_core.interface import CATALOGUE, format_version
from liger_core.ops import cross_entropy, rms_norm, swiglu


def backend(**ops) -> Backend:
    return Backend("fake", "liger-ops-fake", "0", ("cpu",), format_version((1, 3)), ops)


class ScaledGradRMSNorm(torch.autograd.Function):
    """The reference's forward, a gradient off by 2%: an autograd Function as an op."""

    @staticmethod
    def forward(ctx, x, weight, eps, offset, casting_mode, in_place):
        with torch.enable_grad():
            xd, wd = x.detach().requires_grad_(), weight.detach().requires_grad_()
            y = rms_norm.rms_norm(xd, wd, eps, offset, casting_mode, in_place)
        ctx.save_for_backward(xd, wd, y)
        return y.detach()

    @staticmethod
    def backward(ctx, dy):
        xd, wd, y = ctx.saved_tensors
        gx, gw = torch.autograd.grad(y, (xd, wd), dy)
        return gx * 1.02, gw, None, None, None, None


def test_reference_passes_and_returns_outputs_and_grads():
    args = make_args("rms_norm", "cpu", shape=(5, 40))
    outs, grads = check(backend(rms_norm=rms_norm.rms_norm), "rms_norm", args)
    assert set(outs) == {"output"} and set(grads) == {"x", "weight"}


def test_wrong_output_fails():
    def off(x, weight, eps, offset, casting_mode, in_place):
        return rms_norm.rms_norm(x, weight, eps, offset, casting_mode) * 1.001

    with pytest.raises(AssertionError, match=r"rms_norm output \(float32\): \d+ of 200 elements outside"):
        check(backend(rms_norm=off), "rms_norm", make_args("rms_norm", "cpu", shape=(5, 40)))


def test_wrong_gradient_fails_through_an_autograd_function():
    with pytest.raises(AssertionError, match=r"rms_norm grad_x \(float32\)"):
        check(backend(rms_norm=ScaledGradRMSNorm), "rms_norm", make_args("rms_norm", "cpu", shape=(5, 40)))


def test_wrong_dtype_fails():
    def upcast(x, weight, eps, offset, casting_mode, in_place):
        return rms_norm.rms_norm(x.float(), weight.float(), eps, offset, casting_mode)

    with pytest.raises(AssertionError, match="rms_norm output: dtype torch.float32, expected torch.bfloat16"):
        check(backend(rms_norm=upcast), "rms_norm", make_args("rms_norm", "cpu", dtype=torch.bfloat16))


def test_missing_gradient_fails():
    def detached_weight(x, weight, eps, offset, casting_mode, in_place):
        return rms_norm.rms_norm(x, weight.detach(), eps, offset, casting_mode)

    with pytest.raises(AssertionError, match="rms_norm grad_weight: missing"):
        check(backend(rms_norm=detached_weight), "rms_norm", make_args("rms_norm", "cpu"))


def test_touching_an_input_fails_unless_opted_in():
    def scribble(a, b, in_place):
        out = swiglu.swiglu(a, b)
        a.data.mul_(0.5)  # memory the caller still owns (unless in_place)
        return out

    args = make_args("swiglu", "cpu", shape=(4, 16))
    with pytest.raises(AssertionError, match="swiglu modified its input a"):
        check(backend(swiglu=scribble), "swiglu", args)
    # With in_place the op gets copies it may overwrite; the caller's tensors stay intact.
    check(backend(swiglu=lambda a, b, in_place: swiglu.swiglu(a.clone(), b) if in_place else a), "swiglu", args,
          in_place=True)  # fmt: skip


class ClobberIncomingGradient(ScaledGradRMSNorm):
    """Exact results, but backward writes into the incoming gradient's memory."""

    @staticmethod
    def backward(ctx, dy):
        xd, wd, y = ctx.saved_tensors
        gx, gw = torch.autograd.grad(y, (xd, wd), dy)
        dy.copy_(gx)
        return dy, gw, None, None, None, None


def test_touching_the_incoming_gradient_fails_unless_opted_in():
    args = make_args("rms_norm", "cpu")
    with pytest.raises(AssertionError, match="rms_norm modified the incoming gradient of output"):
        check(backend(rms_norm=ClobberIncomingGradient), "rms_norm", args)
    check(backend(rms_norm=ClobberIncomingGradient), "rms_norm", args, in_place=True)  # the opt-in allows it


def test_loss_options_and_samples():
    op = CATALOGUE["cross_entropy"]
    fake = backend(cross_entropy=cross_entropy.cross_entropy)
    for s in list(op.samples())[:12]:
        check_sample(fake, op, s, "cpu")
    outs, _ = check(fake, op, make_args(op, "cpu", weighted=True), lse_square_scale=0.1, return_z_loss=True)
    assert set(outs) == {"loss", "z_loss"}


def test_an_input_reached_only_through_an_unused_output_has_a_zero_gradient():
    from liger_core.ops import rope

    fake = backend(rope=rope.rope)
    _, grads = check(fake, "rope", make_args("rope", "cpu"), unused_outputs=("k_out",))
    assert "k" not in grads or not grads["k"].any()  # None or zeros

    class Leaky(torch.autograd.Function):
        """Exact outputs; a backward that gives k a gradient although k_out got none."""

        @staticmethod
        def forward(ctx, q, k, cos, sin, position_ids, unsqueeze_dim):
            ctx.args = (q.detach(), k.detach(), cos, sin, position_ids, unsqueeze_dim)
            return rope.rope(*ctx.args)

        @staticmethod
        def backward(ctx, dq, dk):
            q, k, *rest = ctx.args
            with torch.enable_grad():
                q = q.clone().requires_grad_()
                (gq,) = torch.autograd.grad(rope.rope(q, k, *rest)[0], q, dq)
            return gq, torch.ones_like(k), None, None, None, None

    with pytest.raises(AssertionError, match="rope grad_k"):
        check(backend(rope=Leaky), "rope", make_args("rope", "cpu"), unused_outputs=("k_out",))
