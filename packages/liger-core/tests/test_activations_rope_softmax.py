"""Interface 1.2 on the reference backend: the modules and drop-ins against hand-written
transformers code, and the references' math against independent formulas."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from liger_core import (
    LigerGEGLUMLP,
    LigerSoftmax,
    LigerSparsemax,
    LigerSwiGLUMLP,
    liger_multimodal_rotary_pos_emb,
    liger_rotary_pos_emb,
)
from liger_core.ops import sparsemax as sparsemax_op


@pytest.fixture(autouse=True)
def _core_only(clean_registry, monkeypatch):
    """Core alone, every op forced onto the reference backend (no fallback warning)."""
    monkeypatch.setenv("LIGER_BACKEND", "reference")


class _HFMLP(torch.nn.Module):
    """transformers' LlamaMLP / GemmaMLP, written out."""

    def __init__(self, hidden, intermediate, act):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = torch.nn.Linear(intermediate, hidden, bias=False)
        self.act = act

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


@pytest.mark.parametrize(
    "cls,config,act",
    [
        (LigerSwiGLUMLP, dict(hidden_act="silu"), torch.nn.functional.silu),
        (LigerGEGLUMLP, dict(hidden_act="gelu", hidden_activation="gelu_pytorch_tanh"),
         lambda a: torch.nn.functional.gelu(a, approximate="tanh")),
    ],
    ids=("swiglu", "geglu"),
)  # fmt: skip
def test_mlp_matches_the_transformers_mlp(cls, config, act):
    torch.manual_seed(0)
    cfg = SimpleNamespace(hidden_size=16, intermediate_size=40, **config)
    hf = _HFMLP(16, 40, act)
    liger = cls(cfg)
    liger.load_state_dict(hf.state_dict())  # same parameter names, no bias
    assert set(liger.state_dict()) == {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}
    x = torch.randn(3, 5, 16)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    dy = torch.randn(3, 5, 16)
    y_hf, y_liger = hf(x1), liger(x2)
    y_hf.backward(dy)
    y_liger.backward(dy)
    torch.testing.assert_close(y_liger, y_hf)
    torch.testing.assert_close(x2.grad, x1.grad)
    for name, p in liger.named_parameters():
        torch.testing.assert_close(p.grad, dict(hf.named_parameters())[name].grad, msg=name)


def test_mlp_intermediate_size_override_and_config_errors():
    cfg = SimpleNamespace(hidden_size=8, intermediate_size=24, hidden_act="silu")
    assert LigerSwiGLUMLP(cfg, intermediate_size=12).up_proj.out_features == 12
    with pytest.raises(ValueError, match=r"hidden_act must be one of \('silu', 'swish'\); got 'relu'"):
        LigerSwiGLUMLP(SimpleNamespace(hidden_size=8, intermediate_size=24, hidden_act="relu"))
    with pytest.raises(ValueError, match=r"must be one of .*gelu_pytorch_tanh.*; got 'gelu'"):
        LigerGEGLUMLP(SimpleNamespace(hidden_size=8, intermediate_size=24, hidden_act="gelu"))
    assert LigerGEGLUMLP(SimpleNamespace(hidden_size=8, intermediate_size=24, hidden_act="gelu_pytorch_tanh"))


def _rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _hf_apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (_rotate_half(q) * sin), (k * cos) + (_rotate_half(k) * sin)


def _hf_apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    mrope_section = mrope_section * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(mrope_section, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(mrope_section, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    return (q * cos) + (_rotate_half(q) * sin), (k * cos) + (_rotate_half(k) * sin)


@pytest.mark.parametrize("unsqueeze_dim", (1, 2))
def test_liger_rotary_pos_emb_is_a_drop_in(unsqueeze_dim):
    torch.manual_seed(0)
    b, s, qh, kh, d = 2, 7, 8, 2, 16
    q = torch.randn(b, s, qh, d)
    k = torch.randn(b, s, kh, d)
    if unsqueeze_dim == 1:
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    cos, sin = torch.randn(b, s, d), torch.randn(b, s, d)
    ids = torch.arange(s).expand(b, s)
    for got, want in zip(
        liger_rotary_pos_emb(q, k, cos, sin, ids, unsqueeze_dim=unsqueeze_dim),
        _hf_apply_rotary_pos_emb(q, k, cos, sin, ids, unsqueeze_dim=unsqueeze_dim),
    ):
        torch.testing.assert_close(got, want)


def test_liger_multimodal_rotary_pos_emb_is_a_drop_in():
    torch.manual_seed(0)
    b, s, qh, kh, d = 2, 5, 4, 2, 32
    q = torch.randn(b, qh, s, d)
    k = torch.randn(b, kh, s, d)
    cos, sin = torch.randn(3, b, s, d), torch.randn(3, b, s, d)
    for got, want in zip(
        liger_multimodal_rotary_pos_emb(q, k, cos, sin, [4, 6, 6]),
        _hf_apply_multimodal_rotary_pos_emb(q, k, cos, sin, [4, 6, 6]),
    ):
        torch.testing.assert_close(got, want)


def _sparsemax_bisection(z: torch.Tensor) -> torch.Tensor:
    """Independent oracle: tau by bisection on sum(max(z - tau, 0)) = 1, one row at a time."""
    out = torch.empty_like(z)
    for i, row in enumerate(z.reshape(-1, z.shape[-1])):
        lo, hi = float(row.max()) - 1, float(row.max())
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if float((row - mid).clamp_min(0).sum()) > 1 else (lo, mid)
        out.view(-1, z.shape[-1])[i] = (row - hi).clamp_min(0)
    return out


def test_sparsemax_reference_is_the_simplex_projection():
    torch.manual_seed(0)
    x = torch.randn(6, 9, dtype=torch.float64) * torch.tensor([0.05, 0.3, 1, 2, 5, 20], dtype=torch.float64)[:, None]
    y = sparsemax_op.math(x, -1)
    torch.testing.assert_close(y, _sparsemax_bisection(x))
    torch.testing.assert_close(y.sum(-1), torch.ones(6, dtype=torch.float64))
    # Gradient: on the support, grad_y minus its mean over the support; zero elsewhere.
    x = x.requires_grad_()
    dy = torch.randn(6, 9, dtype=torch.float64)
    sparsemax_op.math(x, -1).backward(dy)
    support = y > 0
    mean = (dy * support).sum(-1, keepdim=True) / support.sum(-1, keepdim=True)
    torch.testing.assert_close(x.grad, torch.where(support, dy - mean, torch.zeros_like(dy)))


def test_softmax_and_sparsemax_modules():
    x = torch.randn(3, 4, 5)
    torch.testing.assert_close(LigerSoftmax()(x), torch.softmax(x, -1))
    m = LigerSparsemax(dim=1)
    assert "dim=1" in repr(m)
    torch.testing.assert_close(m(x), sparsemax_op.math(x, 1))
    torch.testing.assert_close(m(x).sum(1), torch.ones(3, 5))
    assert math.isclose(float(LigerSparsemax()(torch.tensor([0.0, 10.0]))[1]), 1.0)
