"""The norm-family modules and functional API (interface 1.1) on the reference backend:
forward and every gradient equal the contract's math, constructors match Liger Kernel's."""

from __future__ import annotations

import pytest
import torch

from liger_core import (
    LigerDyT,
    LigerFallbackWarning,
    LigerFusedAddRMSNorm,
    LigerGroupNorm,
    LigerLayerNorm,
    LigerPolyNorm,
    liger_dyt,
    liger_fused_add_rms_norm,
    liger_group_norm,
    liger_layer_norm,
    liger_poly_norm,
)
from liger_core.ops import dyt, fused_add_rms_norm, group_norm, layer_norm, poly_norm

pytestmark = [
    pytest.mark.usefixtures("clean_registry"),
    pytest.mark.filterwarnings(f"ignore::{LigerFallbackWarning.__module__}.{LigerFallbackWarning.__name__}"),
]


def _randomise(module: torch.nn.Module) -> None:
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.3)


def _check_module(module, inputs, math_fn):
    """``module(*inputs)`` against ``math_fn(*inputs, *params)``: outputs and all gradients."""
    _randomise(module)
    params = [p for _, p in module.named_parameters()]
    ins = [t.clone().requires_grad_() for t in inputs]
    ins_ref = [t.clone().requires_grad_() for t in inputs]
    params_ref = [p.detach().clone().requires_grad_() for p in params]
    out = module(*ins)
    ref = math_fn(*ins_ref, *params_ref)
    out, ref = (out if isinstance(out, tuple) else (out,)), (ref if isinstance(ref, tuple) else (ref,))
    grads = [torch.randn_like(o) for o in out]
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r)
    torch.autograd.backward(out, grads)
    torch.autograd.backward(ref, grads)
    for a, b in zip(ins + params, ins_ref + params_ref):
        torch.testing.assert_close(a.grad, b.grad)


def test_fused_add_rms_norm_module():
    module = LigerFusedAddRMSNorm(24, eps=1e-5, offset=1.0, casting_mode="gemma", init_fn="zeros")
    x, r = torch.randn(3, 5, 24), torch.randn(3, 5, 24)
    _check_module(module, (x, r), lambda x, r, w: fused_add_rms_norm.math(x, r, w, 1e-5, 1.0, "gemma", False))
    assert module.extra_repr() == "24, eps=1e-05, offset=1.0, casting_mode='gemma', in_place=False"
    assert torch.equal(LigerFusedAddRMSNorm(4).weight, torch.ones(4))
    with pytest.raises(ValueError, match="init_fn must be 'ones' or 'zeros'; got 'twos'"):
        LigerFusedAddRMSNorm(4, init_fn="twos")
    with pytest.raises(ValueError, match="casting_mode must be one of"):
        LigerFusedAddRMSNorm(4, casting_mode="bogus")


def test_layer_norm_module():
    module = LigerLayerNorm(40, eps=1e-5)
    assert torch.equal(module.weight, torch.ones(40)) and torch.equal(module.bias, torch.zeros(40))
    _check_module(module, (torch.randn(6, 40) + 2,), lambda x, w, b: layer_norm.math(x, w, b, 1e-5))
    # Matches torch's LayerNorm with the same parameters.
    ref = torch.nn.LayerNorm(40, eps=1e-5)
    ref.load_state_dict(module.state_dict())
    x = torch.randn(2, 3, 40)
    torch.testing.assert_close(module(x), ref(x))
    assert LigerLayerNorm(4, init_fn="zeros").weight.abs().sum() == 0
    assert LigerLayerNorm(8, bias=True).bias.abs().sum() > 0  # Liger Kernel's random bias init


def test_group_norm_module():
    module = LigerGroupNorm(12, 4, eps=1e-5)
    _check_module(module, (torch.randn(3, 12, 7) * 2 + 1,), lambda x, w, b: group_norm.math(x, w, b, 12, 4, 1e-5))
    ref = torch.nn.GroupNorm(4, 12, eps=1e-5)
    ref.load_state_dict(module.state_dict())
    x = torch.randn(2, 12, 3, 5)
    torch.testing.assert_close(module(x), ref(x))
    assert module.extra_repr() == "num_channels=12, num_groups=4, eps=1e-05"
    with pytest.raises(ValueError, match="num_groups must be > 0 and divide num_channels=12; got num_groups=5"):
        LigerGroupNorm(12, 5)


def test_poly_norm_module():
    module = LigerPolyNorm(eps=1e-6)
    assert torch.allclose(module.weight, torch.full((3,), 1 / 3)) and torch.equal(module.bias, torch.ones(1))
    _check_module(module, (torch.randn(5, 33),), lambda x, w, b: poly_norm.math(x, w, b, 1e-6))
    assert LigerPolyNorm(in_place=False).extra_repr() == "eps=1e-06"


@pytest.mark.parametrize("beta", [True, False])
def test_dyt_module(beta):
    module = LigerDyT(20, beta=beta, init_alpha=0.7)
    assert torch.equal(module.alpha, torch.full((1,), 0.7)) and torch.equal(module.gamma, torch.ones(20))
    assert (module.beta is not None) == beta
    if beta:
        _check_module(module, (torch.randn(4, 20),), lambda x, a, g, b: dyt.math(x, a, g, b))
    else:
        _check_module(module, (torch.randn(4, 20),), lambda x, a, g: dyt.math(x, a, g, None))
    assert module.extra_repr() == f"20, init_alpha=0.7, beta={beta}"


def test_module_dtype_and_device():
    for module in (
        LigerFusedAddRMSNorm(8, dtype=torch.bfloat16),
        LigerLayerNorm(8, dtype=torch.bfloat16),
        LigerGroupNorm(8, 2, dtype=torch.bfloat16),
        LigerPolyNorm(dtype=torch.bfloat16),
        LigerDyT(8, dtype=torch.bfloat16),
    ):
        assert {p.dtype for p in module.parameters()} == {torch.bfloat16}


def test_functional_api_dispatches_and_checks():
    x, r, w = torch.randn(3, 8), torch.randn(3, 8), torch.rand(8) + 0.5
    y, s = liger_fused_add_rms_norm(x, r, w)
    torch.testing.assert_close(s, x + r)
    torch.testing.assert_close(y, fused_add_rms_norm.math(x, r, w, 1e-6, 0.0, "llama", False)[0])
    torch.testing.assert_close(liger_layer_norm(x, w, w), torch.nn.functional.layer_norm(x, (8,), w, w, 1e-5))
    xg = torch.randn(2, 8, 3)
    torch.testing.assert_close(liger_group_norm(xg, w, w, 8, 2), torch.nn.functional.group_norm(xg, 2, w, w, 1e-5))
    torch.testing.assert_close(liger_poly_norm(x, w[:3], w[:1]), poly_norm.math(x, w[:3], w[:1], 1e-6))
    torch.testing.assert_close(liger_dyt(x, w[:1], w, None), w * torch.tanh(w[:1] * x))
    with pytest.raises(ValueError, match=r"layer_norm: bias must have shape \(hidden,\) = \(8,\)"):
        liger_layer_norm(x, w, w[:3])
    with pytest.raises(ValueError, match=r"group_norm: num_channels=4 must equal x.shape\[1\]"):
        liger_group_norm(xg, None, None, 4, 2)
