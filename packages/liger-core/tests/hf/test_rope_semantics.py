"""Rotary embeddings whose semantics transformers defines, checked against transformers' own
functions (whichever backend serves the op in this session: see conftest.py)."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama4.configuration_llama4 import Llama4TextConfig
from transformers.models.llama4.modeling_llama4 import Llama4TextRotaryEmbedding, apply_rotary_emb

from liger_core.functional import liger_llama4_text_rotary_pos_emb


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
def test_llama4_rope_is_transformers_apply_rotary_emb(dtype):
    """Llama 4's text RoPE: q/k (batch, seq, heads, head_dim) as its attention passes them (views
    of the projections), freqs_cis from its own rotary embedding at per-sequence positions;
    forward and both gradients."""
    batch, seq, q_heads, k_heads, head_dim = 2, 7, 4, 2, 32
    config = Llama4TextConfig(
        hidden_size=q_heads * head_dim, num_attention_heads=q_heads, num_key_value_heads=k_heads, head_dim=head_dim
    )
    gen = torch.Generator().manual_seed(0)
    positions = torch.stack((torch.arange(seq), torch.arange(seq) + 5))
    freqs_cis = Llama4TextRotaryEmbedding(config)(torch.zeros(batch, seq, 1), positions)
    assert freqs_cis.dtype == torch.complex64 and freqs_cis.shape == (batch, seq, head_dim // 2)
    q_proj = torch.randn(batch, seq, q_heads * head_dim, generator=gen).to(dtype)
    k_proj = torch.randn(batch, seq, k_heads * head_dim, generator=gen).to(dtype)
    dq = torch.randn(batch, seq, q_heads, head_dim, generator=gen).to(dtype)
    dk = torch.randn(batch, seq, k_heads, head_dim, generator=gen).to(dtype)

    def run(fn):
        qp, kp = q_proj.clone().requires_grad_(), k_proj.clone().requires_grad_()
        q_out, k_out = fn(qp.view(batch, seq, q_heads, head_dim), kp.view(batch, seq, k_heads, head_dim), freqs_cis)
        torch.autograd.backward((q_out, k_out), (dq, dk))
        return q_out, k_out, qp.grad, kp.grad

    got, want = run(liger_llama4_text_rotary_pos_emb), run(apply_rotary_emb)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    for name, g, w in zip(("q_out", "k_out", "grad_q", "grad_k"), got, want):
        assert g.dtype == w.dtype, name
        torch.testing.assert_close(g, w, **tol, msg=lambda m, name=name: f"{name}: {m}")
