"""Rotary embeddings whose semantics transformers defines, checked against transformers' own
functions (whichever backend serves the op in this session: see conftest.py)."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama4.configuration_llama4 import Llama4TextConfig
from transformers.models.llama4.modeling_llama4 import Llama4TextRotaryEmbedding, apply_rotary_emb

from liger_core.functional import liger_llama4_text_rotary_pos_emb


def _assert_close_each(names, got, want, tol):
    for name, g, w in zip(names, got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        torch.testing.assert_close(g, w, **tol, msg=lambda m, name=name: f"{name}: {m}")


def _run_mla(fn, shape, tables, dtype, gen):
    """A RoPE function as DeepSeek's multi-head latent attention calls it: on the rope slice of the
    heads-major query projection and the single-head key view of the compressed projection.
    Returns (q_out, k_out, grad of the query projection, grad of the compressed projection);
    inputs and upstream gradients are drawn from ``gen``'s state, so two calls from the same
    state see the same ones."""
    batch, seq, heads, nope, rope_dim, latent = shape
    state = gen.get_state()
    q_proj = torch.randn(batch, seq, heads * (nope + rope_dim), generator=gen).to(dtype).requires_grad_()
    kv_proj = torch.randn(batch, seq, latent + rope_dim, generator=gen).to(dtype).requires_grad_()
    dq = torch.randn(batch, heads, seq, rope_dim, generator=gen).to(dtype)
    dk = torch.randn(batch, 1, seq, rope_dim, generator=gen).to(dtype)
    gen.set_state(state)
    q_rot = q_proj.view(batch, seq, heads, nope + rope_dim).transpose(1, 2)[..., nope:]
    k_rot = kv_proj[..., latent:].view(batch, 1, seq, rope_dim)
    q_out, k_out = fn(q_rot, k_rot, *tables)
    torch.autograd.backward((q_out, k_out), (dq, dk))
    return q_out, k_out, q_proj.grad, kv_proj.grad


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
    _assert_close_each(("q_out", "k_out", "grad_q", "grad_k"), got, want, tol)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
@pytest.mark.parametrize("partial", (0.5, 1.0), ids=("half_rotary", "full_rotary"))
@pytest.mark.parametrize("layout", ("heads_major", "seq_major"))
def test_interleaved_rope_is_glm4_apply_rotary_pos_emb(dtype, partial, layout):
    """GLM-4's RoPE (interleaved pairs, partial rotary): the patch's adapter over llama4_rope against
    transformers' own function, its tables from GLM-4's rotary embedding; q/k as its attention passes
    them (transposed views of the projections, unsqueeze_dim=1) or seq-major (unsqueeze_dim=2)."""
    from transformers.models.glm4.configuration_glm4 import Glm4Config
    from transformers.models.glm4.modeling_glm4 import Glm4RotaryEmbedding
    from transformers.models.glm4.modeling_glm4 import apply_rotary_pos_emb as glm4_rope

    from liger_core.transformers.layers import liger_interleaved_rope

    batch, seq, q_heads, k_heads, head_dim = 2, 7, 4, 2, 32
    config = Glm4Config(
        hidden_size=q_heads * head_dim,
        num_attention_heads=q_heads,
        num_key_value_heads=k_heads,
        head_dim=head_dim,
        partial_rotary_factor=partial,
    )
    gen = torch.Generator().manual_seed(1)
    positions = torch.stack((torch.arange(seq), torch.arange(seq) + 3))
    cos, sin = Glm4RotaryEmbedding(config)(torch.zeros(batch, seq, 1, dtype=dtype), positions)
    assert cos.shape[-1] == int(head_dim * partial)
    q_proj = torch.randn(batch, seq, q_heads * head_dim, generator=gen).to(dtype)
    k_proj = torch.randn(batch, seq, k_heads * head_dim, generator=gen).to(dtype)
    unsqueeze_dim = 1 if layout == "heads_major" else 2

    def arrange(t, heads):
        t = t.view(batch, seq, heads, head_dim)
        return t.transpose(1, 2) if layout == "heads_major" else t

    dq = torch.randn(arrange(q_proj, q_heads).shape, generator=gen).to(dtype)
    dk = torch.randn(arrange(k_proj, k_heads).shape, generator=gen).to(dtype)

    def run(fn):
        qp, kp = q_proj.clone().requires_grad_(), k_proj.clone().requires_grad_()
        q_out, k_out = fn(arrange(qp, q_heads), arrange(kp, k_heads), cos, sin, unsqueeze_dim=unsqueeze_dim)
        torch.autograd.backward((q_out, k_out), (dq, dk))
        return q_out, k_out, qp.grad, kp.grad

    got, want = run(liger_interleaved_rope), run(glm4_rope)
    # Stock rounds each product and sum to bf16; the kernel computes in float32 and rounds once.
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    _assert_close_each(("q_out", "k_out", "grad_q", "grad_k"), got, want, tol)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
def test_interleaved_rope_is_glm4v_apply_rotary_pos_emb(dtype):
    """GLM-4V's text RoPE (interleaved pairs over the first half of each head, M-RoPE sections of
    three position grids) as the patch installs it, against the installed transformers' function
    and rotary embedding: transformers 5.0 repeats the tables' first half pairwise inside the
    function as GLM-4 does, later releases hand it tables that already repeat each angle pairwise;
    the patch tells them apart by running the stock function (`interleaved_tables`)."""
    from transformers.models.glm4v.configuration_glm4v import Glm4vTextConfig
    from transformers.models.glm4v.modeling_glm4v import Glm4vTextRotaryEmbedding
    from transformers.models.glm4v.modeling_glm4v import apply_rotary_pos_emb as glm4v_rope

    from liger_core.transformers.layers import interleaved_tables, rope_function

    batch, seq, q_heads, k_heads, head_dim = 2, 7, 4, 2, 32
    config = Glm4vTextConfig(
        hidden_size=q_heads * head_dim,
        num_attention_heads=q_heads,
        num_key_value_heads=k_heads,
        head_dim=head_dim,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [2, 3, 3],
            "partial_rotary_factor": 0.5,
        },
    )
    gen = torch.Generator().manual_seed(5)
    # Three position grids (temporal, height, width) that differ, so each section's angles differ.
    positions = torch.stack([torch.arange(seq) * (i + 1) + i for i in range(3)])[:, None].expand(3, batch, seq)
    cos, sin = Glm4vTextRotaryEmbedding(config)(torch.zeros(batch, seq, 1, dtype=dtype), positions)
    assert cos.shape == (batch, seq, head_dim // 2)
    assert interleaved_tables(glm4v_rope) in ("interleaved", "paired_tables")
    q_proj = torch.randn(batch, seq, q_heads * head_dim, generator=gen).to(dtype)
    k_proj = torch.randn(batch, seq, k_heads * head_dim, generator=gen).to(dtype)
    dq = torch.randn(batch, q_heads, seq, head_dim, generator=gen).to(dtype)
    dk = torch.randn(batch, k_heads, seq, head_dim, generator=gen).to(dtype)

    def run(fn):
        qp, kp = q_proj.clone().requires_grad_(), k_proj.clone().requires_grad_()
        q = qp.view(batch, seq, q_heads, head_dim).transpose(1, 2)
        k = kp.view(batch, seq, k_heads, head_dim).transpose(1, 2)
        q_out, k_out = fn(q, k, cos, sin)
        torch.autograd.backward((q_out, k_out), (dq, dk))
        return q_out, k_out, qp.grad, kp.grad

    got, want = run(rope_function(glm4v_rope, "interleaved")), run(glm4v_rope)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    _assert_close_each(("q_out", "k_out", "grad_q", "grad_k"), got, want, tol)


def test_interleaved_tables_tells_the_conventions_apart():
    """The probe names GLM-4's convention, the pairwise one, and neither (a rotate-half RoPE)."""
    from transformers.models.glm4.modeling_glm4 import apply_rotary_pos_emb as glm4_rope
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_rope

    from liger_core.transformers.layers import interleaved_tables

    def paired(q, k, cos, sin, unsqueeze_dim=1):
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

        def rotate(x):
            return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)

        return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin

    assert interleaved_tables(glm4_rope) == "interleaved"
    assert interleaved_tables(paired) == "paired_tables"
    assert interleaved_tables(llama_rope) is None


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
def test_complex_heads_major_rope_is_deepseek_v2_apply_rotary_emb(dtype):
    """DeepSeek-V2's RoPE as its attention calls it: the rope slice of heads-major q and the
    single-head k_pe view of the compressed projection, freqs_cis (scaled) from its own rotary
    embedding; the patch's replacement against transformers' function, forward and both gradients."""
    from transformers.models.deepseek_v2.configuration_deepseek_v2 import DeepseekV2Config
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2RotaryEmbedding
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import apply_rotary_emb as deepseek_rope

    from liger_core.transformers.layers import rope_function

    batch, seq, heads, nope, rope_dim, latent = 2, 7, 4, 8, 16, 12
    config = DeepseekV2Config(
        hidden_size=64,
        num_attention_heads=heads,
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope_dim,
        kv_lora_rank=latent,
        rope_scaling={"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16},
    )
    gen = torch.Generator().manual_seed(2)
    positions = torch.stack((torch.arange(seq), torch.arange(seq) + 4))
    freqs_cis = DeepseekV2RotaryEmbedding(config)(torch.zeros(batch, seq, 1), positions)
    assert freqs_cis.dtype == torch.complex64 and freqs_cis.shape == (batch, seq, rope_dim // 2)
    shape = (batch, seq, heads, nope, rope_dim, latent)
    got, want = (
        _run_mla(fn, shape, (freqs_cis,), dtype, gen)
        for fn in (rope_function(deepseek_rope, "complex_heads_major"), deepseek_rope)
    )
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    _assert_close_each(("q_out", "k_out", "grad_q", "grad_kv"), got, want, tol)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
def test_deinterleaved_rope_is_deepseek_v3_apply_rotary_pos_emb_interleave(dtype):
    """DeepSeek-V3's interleaved RoPE (config.rope_interleave, its default) as its attention calls
    it: the rope slice of heads-major q and the single-head k view, tables from its own rotary
    embedding; the patch's replacement against transformers' function, forward and both gradients."""
    from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import apply_rotary_pos_emb_interleave as stock

    from liger_core.transformers.layers import rope_function

    batch, seq, heads, nope, rope_dim, latent = 2, 7, 4, 8, 16, 12
    config = DeepseekV3Config(
        hidden_size=64, num_attention_heads=heads, qk_nope_head_dim=nope, qk_rope_head_dim=rope_dim, kv_lora_rank=latent
    )
    gen = torch.Generator().manual_seed(3)
    positions = torch.stack((torch.arange(seq), torch.arange(seq) + 2))
    cos, sin = DeepseekV3RotaryEmbedding(config)(torch.zeros(batch, seq, 1, dtype=dtype), positions)
    shape = (batch, seq, heads, nope, rope_dim, latent)
    got, want = (_run_mla(fn, shape, (cos, sin), dtype, gen) for fn in (rope_function(stock, "deinterleaved"), stock))
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    _assert_close_each(("q_out", "k_out", "grad_q", "grad_kv"), got, want, tol)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("float32", "bfloat16"))
def test_one_tensor_rope_is_gemma4_apply_rotary_pos_emb(dtype):
    """Gemma 4's RoPE rotates q and k in separate calls (x, cos, sin, unsqueeze_dim=2 on
    (batch, seq, heads, dim) views of the projections); its vision tower's multidimensional RoPE
    calls it on column splits. The patch's replacement against transformers' function (looked
    up as the module global, as the model calls it), forward and gradient."""
    pytest.importorskip("transformers.models.gemma4")
    from transformers.models.gemma4 import modeling_gemma4 as gemma4

    from liger_core.transformers.layers import rope_function

    stock = gemma4.apply_rotary_pos_emb
    liger = rope_function(stock, "one_tensor")
    batch, seq, heads, head_dim = 2, 7, 3, 32
    gen = torch.Generator().manual_seed(4)
    angles = torch.rand(batch, seq, head_dim // 2, generator=gen) * 20
    cos, sin = torch.cat([angles.cos()] * 2, -1).to(dtype), torch.cat([angles.sin()] * 2, -1).to(dtype)
    proj = torch.randn(batch, seq, heads * head_dim, generator=gen).to(dtype)
    grad = torch.randn(batch, seq, heads, head_dim, generator=gen).to(dtype)

    def run(fn):
        p = proj.clone().requires_grad_()
        out = fn(p.view(batch, seq, heads, head_dim), cos, sin, unsqueeze_dim=2)
        out.backward(grad)
        return out, p.grad

    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    _assert_close_each(("out", "grad"), run(liger), run(stock), tol)

    # The vision tower's 2-D RoPE: two column splits, each rotated by its own tables.
    positions = torch.zeros(batch, seq, 2, dtype=torch.long)
    split_tables = torch.cat([cos[..., : head_dim // 2]] * 2, -1), torch.cat([sin[..., : head_dim // 2]] * 2, -1)
    x = proj.view(batch, seq, heads, head_dim)
    want = gemma4.apply_multidimensional_rope(x, *split_tables, positions, unsqueeze_dim=2)
    try:
        gemma4.apply_rotary_pos_emb = liger
        got = gemma4.apply_multidimensional_rope(x, *split_tables, positions, unsqueeze_dim=2)
    finally:
        gemma4.apply_rotary_pos_emb = stock
    torch.testing.assert_close(got, want, **tol)
