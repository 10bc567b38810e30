"""The op catalogue: every op of the interface, in one list of declarations.

Each op is declared once, in ``liger_core/ops/<op>.py`` (its ``OP``, a `liger_core.op.Op`):
contract, reference, oracle, samples, bad inputs, benchmark spec. This module lists them. A new
op bumps the minor version (its declaration's ``since``); a changed signature or semantics bumps
the major version.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from liger_core.op import Op, implementation_signature
from liger_core.ops import (
    attn_res,
    cross_entropy,
    dyt,
    embedding,
    fused_add_rms_norm,
    fused_ce_tvd,
    fused_gate_up_swiglu,
    fused_linear_cosine_similarity,
    fused_linear_cpo,
    fused_linear_cross_entropy,
    fused_linear_dpo,
    fused_linear_grpo,
    fused_linear_jsd,
    fused_linear_jsd_loss,
    fused_linear_kl_div,
    fused_linear_kto,
    fused_linear_orpo,
    fused_linear_scaled_cross_entropy,
    fused_linear_simpo,
    fused_moe,
    fused_moe_clamped_swiglu,
    fused_neighborhood_attention,
    geglu,
    group_norm,
    grpo_loss,
    jsd,
    kl_div,
    layer_norm,
    llama4_rope,
    mhc_coeffs,
    mhc_post_res,
    mhc_pre,
    modulated_rms_norm,
    multi_token_attention,
    poly_norm,
    qwen2vl_mrope,
    relu_squared,
    rms_norm,
    rope,
    softmax,
    sparsemax,
    swiglu,
    tiled_mlp,
    tvd,
    vocab_parallel_cross_entropy,
)

# Catalogue order: by interface version, then family (`liger info`, `liger check` and the
# benchmark tables follow it).
CATALOGUE: dict[str, Op] = {
    op.name: op
    for op in (
        rms_norm.OP,  # 1.0
        # 1.1: the norm family.
        fused_add_rms_norm.OP,
        layer_norm.OP,
        group_norm.OP,
        poly_norm.OP,
        dyt.OP,
        # 1.2: activations, rotary embeddings, softmax.
        swiglu.OP,
        geglu.OP,
        rope.OP,
        qwen2vl_mrope.OP,
        softmax.OP,
        sparsemax.OP,
        # 1.3: losses.
        cross_entropy.OP,
        fused_linear_cross_entropy.OP,
        kl_div.OP,
        jsd.OP,
        fused_linear_jsd.OP,
        tvd.OP,
        # 1.4: the rest of liger-kernel's ops.
        relu_squared.OP,
        # 1.5: tensor-parallel losses.
        vocab_parallel_cross_entropy.OP,
        # 1.6: the MLP family (fused gate-up SwiGLU, tiled MLP).
        fused_gate_up_swiglu.OP,
        tiled_mlp.OP,
        # 1.6: Llama 4's complex-form RoPE.
        llama4_rope.OP,
        # 1.6: post-training preference losses.
        fused_linear_dpo.OP,
        fused_linear_orpo.OP,
        fused_linear_cpo.OP,
        fused_linear_simpo.OP,
        # 1.6: mixture of experts.
        fused_moe.OP,
        # 1.6: GRPO and distillation losses.
        fused_linear_grpo.OP,
        grpo_loss.OP,
        fused_linear_kl_div.OP,
        fused_linear_cosine_similarity.OP,
        fused_linear_jsd_loss.OP,
        # 1.7: norm-emb
        embedding.OP,
        modulated_rms_norm.OP,
        # 1.7: residual
        attn_res.OP,
        # 1.7: scaled-ce (temperature-scaled fused linear cross-entropy, fused CE + TVD).
        fused_ce_tvd.OP,
        # 1.7: kto
        fused_linear_kto.OP,
        # 1.7: attention
        multi_token_attention.OP,
        # 1.7: scaled-ce2
        fused_linear_scaled_cross_entropy.OP,
        # 1.7: mhc
        mhc_coeffs.OP,
        # 1.8: mhc (the pre-mix and the post + residual mix)
        mhc_pre.OP,
        mhc_post_res.OP,
        # 1.8: neighborhood attention
        fused_neighborhood_attention.OP,
        # 1.9: GPT-OSS's experts (biased, interleaved, clamped SwiGLU).
        fused_moe_clamped_swiglu.OP,
    )
}

# The interface version is the newest op's: adding an op cannot forget the bump.
INTERFACE_VERSION: tuple[int, int] = max(op.since for op in CATALOGUE.values())


def format_version(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def parse_version(text: str | tuple[int, int]) -> tuple[int, int]:
    """Parse ``"major.minor"``; raise ValueError naming the bad text."""
    if isinstance(text, tuple):
        return text
    try:
        major, minor = (int(p) for p in str(text).split("."))
    except ValueError:
        raise ValueError(f"interface version must look like 'MAJOR.MINOR'; got {text!r}") from None
    return major, minor


def ops_for_version(version: tuple[int, int]) -> list[Op]:
    """The ops a backend implementing ``version`` must provide (same major, since <= version)."""
    return [op for op in CATALOGUE.values() if op.since[0] == version[0] and op.since <= version]


def signature_mismatch(op: Op, impl: Callable) -> str | None:
    """Describe how an implementation's signature differs from the contract, or None if it fits.

    Names, kinds and order must match. Defaults may be left out (dispatch passes every
    argument); one that is given must equal the contract's. Annotations are not compared.
    """
    try:
        got = implementation_signature(impl)
    except (TypeError, ValueError) as e:
        return f"its signature cannot be read ({e})"
    want = op.signature

    def shape(sig: inspect.Signature) -> list[tuple]:
        return [(p.name, p.kind) for p in sig.parameters.values()]

    defaults_ok = all(
        p.default is p.empty or p.default == want.parameters[p.name].default
        for p in got.parameters.values()
        if p.name in want.parameters
    )
    if shape(got) == shape(want) and defaults_ok:
        return None

    def text(sig: inspect.Signature) -> str:
        return str(
            sig.replace(
                parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                return_annotation=inspect.Signature.empty,
            )
        )

    return f"expected {op.name}{text(want)}, got {op.name}{text(got)}"
