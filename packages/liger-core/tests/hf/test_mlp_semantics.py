"""The MLP modules whose semantics transformers defines, against transformers' own modules
(whichever backend serves the ops in this session: see conftest.py): LLaMA's MLP for the tiled
MLPs, Phi-3's fused gate-up MLP for `LigerPhi3SwiGLUMLP`. Forward and every gradient."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE
from transformers import LlamaConfig, Phi3Config
from transformers.models.llama.modeling_llama import LlamaMLP
from transformers.models.phi3.modeling_phi3 import Phi3MLP

from liger_core import LigerPhi3SwiGLUMLP, LigerTiledGEGLUMLP, LigerTiledSwiGLUMLP

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def _close(got, want, dtype, what):
    """Within the dtype's tolerance, the absolute part scaled by the result's peak magnitude (as
    the conformance suite's): a weight gradient sums a product over every token, and in bfloat16
    the tiled MLP rounds that sum once per tile where the stock GEMM rounds once, so an element
    that cancels to near 0 differs by rounding of the terms, not of itself."""
    tol = TOL[dtype]
    atol = tol["atol"] * max(float(want.detach().abs().max()), 1e-3)
    torch.testing.assert_close(got, want, rtol=tol["rtol"], atol=atol, msg=lambda m: f"{what}: {m}")


def _compare(stock, liger, dtype, shape):
    liger.load_state_dict(stock.state_dict())
    stock, liger = stock.to(DEVICE, dtype), liger.to(DEVICE, dtype)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen).to(DEVICE, dtype)
    dy = torch.randn(*shape, generator=gen).to(DEVICE, dtype)
    x_stock, x_liger = x.clone().requires_grad_(), x.clone().requires_grad_()
    want, got = stock(x_stock), liger(x_liger)
    want.backward(dy)
    got.backward(dy)
    _close(got, want, dtype, "output")
    _close(x_liger.grad, x_stock.grad, dtype, "grad_x")
    theirs = dict(stock.named_parameters())
    for name, p in liger.named_parameters():
        _close(p.grad, theirs[name].grad, dtype, f"grad {name}")


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
@pytest.mark.parametrize("num_shards", (None, 3), ids=("default_shards", "3_shards"))
def test_tiled_swiglu_mlp_is_llama_mlp(dtype, num_shards):
    config = LlamaConfig(hidden_size=32, intermediate_size=88, hidden_act="silu")
    torch.manual_seed(0)
    stock = LlamaMLP(config)
    # 2 x 41 tokens: the default cuts them into ceil(82 / 32) = 3 tiles, 3 shards into uneven ones.
    _compare(stock, LigerTiledSwiGLUMLP(config, num_shards=num_shards), dtype, (2, 41, 32))


def test_tiled_geglu_mlp_is_llama_mlp_with_tanh_gelu():
    config = LlamaConfig(hidden_size=32, intermediate_size=88, hidden_act="gelu_pytorch_tanh")
    torch.manual_seed(0)
    _compare(LlamaMLP(config), LigerTiledGEGLUMLP(config, num_shards=4), torch.float32, (2, 41, 32))


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
def test_phi3_swiglu_mlp_is_phi3_mlp(dtype):
    config = Phi3Config(hidden_size=32, intermediate_size=88, hidden_act="silu")
    torch.manual_seed(0)
    _compare(Phi3MLP(config), LigerPhi3SwiGLUMLP(config), dtype, (2, 9, 32))
