"""Activations whose semantics transformers defines, checked against transformers' own modules
(whichever backend serves the op in this session: see conftest.py)."""

from __future__ import annotations

import pytest
import torch
from transformers.activations import ACT2FN

from liger_core import LigerReLUSquared


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
def test_relu_squared_is_transformers_relu2(dtype):
    """Nemotron's ``relu2`` (ReLUSquaredActivation): forward and gradient."""
    stock = ACT2FN["relu2"]
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 300, generator=gen) * 2).to(dtype)
    dy = torch.randn(5, 300, generator=gen).to(dtype)
    got_x, want_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = LigerReLUSquared()(got_x), stock(want_x)
    got.backward(dy)
    want.backward(dy)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(got_x.grad, want_x.grad, **tol)
