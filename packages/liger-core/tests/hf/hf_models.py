"""Mini models of every patched family, from their configs (random weights), and a training loop.

Sizes: ``tiny`` (CI, the Triton interpreter on CPU: hidden 32, 2 layers, vocab 128,
sequence 16) and ``mid`` (an H100/H200: hidden 1024, 4 layers, vocab 32000, sequence 512).

Multimodal families are built with a tiny vision tower (2 layers, hidden 16; 32 at mid size)
and take random pixel inputs that run through it: each sequence holds one image whose
placeholder tokens the family's processor would have inserted (`model_inputs`).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForImageTextToText

from liger_core.transformers import monkey_patch as mp

# Families built as causal LMs from a text config (every test of test_families.py runs on them).
TEXT_FAMILIES = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "granite",
    "olmo2",
    "smollm3",
    "ministral",
    "nemotron",
    "olmo3",
    "glm4",
    "exaone4",
    "falcon_h1",
    "gpt_oss",
    "llama4",
    "gemma4_text",
    "qwen3_next",
    "hunyuan_v1_dense",
    "hunyuan_v1_moe",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v4",
)
# Families built as image-text-to-text models, with pixel inputs through the vision tower;
# pixtral is a vision tower, tested inside a LLaVA model (mistral text) and alone.
MULTIMODAL_FAMILIES = (
    "llava",
    "mllama",
    "pixtral",
    "gemma3",
    "gemma4",
    "paligemma",
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "qwen3_vl_moe",
    "glm4v",
    "glm4v_moe",
    "internvl",
    "smolvlm",
    "muse_glimmer",
    "qwen3_5",
    "qwen3_5_moe",
)
FAMILIES = TEXT_FAMILIES + MULTIMODAL_FAMILIES
MOE_FAMILIES = (
    "mixtral",
    "qwen3_moe",
    "gpt_oss",
    "llama4",
    "qwen3_next",
    "hunyuan_v1_moe",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v4",
    "gemma4",
    "qwen3_vl_moe",
    "glm4v_moe",
    "qwen3_5_moe",
)
# Class names of the table that only some transformers releases have (the others name them otherwise).
NAMES_OF_OTHER_RELEASES: dict[str, set[str]] = {
    "glm4v_moe": {"Glm4vMoeisionMlp", "Glm4vMoeVisionMlp", "Glm4vMoeTextExperts", "Glm4vMoeTextNaiveMoe"},
    "qwen2_vl": {"Qwen2VLRMSNorm", "Qwen2RMSNorm"},
    "qwen2_5_vl": {"Qwen2_5_VLRMSNorm", "Qwen2RMSNorm"},
    "deepseek_v3": {"DeepseekV3Experts"},  # transformers 5.0: a list of DeepseekV3MLP experts
}
# Run-time fallbacks a family legitimately has in some transformers release (message fragment).
KNOWN_FALLBACKS: dict[str, str] = {
    # transformers 5.0's HunYuan-MoE routes with one weight per expert, which its stock experts read their own way.
    "hunyuan_v1_moe": "routing weights other than one per selected expert",
}
# The text config a text family's causal LM is built from, where the family's model type is a composite's.
_TEXT_CONFIG = {"llama4": "llama4_text"}


def require_family(model_type: str) -> None:
    """Skip (with the reason) where the installed transformers has no such model type."""
    if not mp.family_available(model_type):
        pytest.skip(f"transformers {transformers.__version__} has no model type {model_type!r}")


@dataclass(frozen=True)
class Size:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    batch: int
    seq: int
    steps: int
    lr: float  # AdamW's; must keep training stable, or the two runs drift apart chaotically


SIZES = {
    # Odd-ish shapes on purpose: rows shorter than a block, vocab not a power of two.
    # CI runs tiny in the Triton interpreter, whose cost grows with rows (batch x seq) and launches.
    "tiny": Size(
        hidden=32,
        layers=2,
        heads=4,
        kv_heads=2,
        head_dim=8,
        intermediate=64,
        vocab=128,
        batch=2,
        seq=16,
        # test_convergence's "learning happened" check (mean loss of the last 3 steps at least 0.05 under
        # the first 3's) holds for every family at 8 steps: the smallest margin, granite in bf16, is 0.067
        # (0.036 at 6 steps, 0.088 at 10). Each step costs every patched kernel in the interpreter.
        steps=8,
        lr=3e-3,
    ),
    "mid": Size(
        hidden=1024,
        layers=4,
        heads=16,
        kv_heads=4,
        head_dim=64,
        intermediate=2816,
        vocab=32000,
        batch=4,
        seq=512,
        steps=32,
        # On an H200 at 3e-3 the stock loss *rose* (llama 10.59 -> 11.08 in 32 steps) and any two
        # runs diverged (fp32 loss 0.1 apart); at 3e-4 it learns (10.59 -> 10.21) and stock vs
        # patched agree to ~2e-6 in fp32.
        lr=3e-4,
    ),
}


# Families whose stock training at the default rate is chaotic at tiny size: stock against stock with every
# weight perturbed by 1e-7 differs by 0.047 (gemma4_text) and 0.0095 (muse_glimmer) in loss within 10 steps,
# at 3e-4 by 1.6e-3 and 6e-4, while stock against Liger then agree to 2.4e-6 and 6.7e-6 (both models normalise
# near-zero vectors without a scale: Gemma 4's value norm, MuseGlimmer's q/k and embedding norms). They train
# at 3e-4, where the loss barely falls in a few steps: their check is agreement step by step and in the parameters.
# Gemma 4 with its vision tower (gemma4) is as chaotic as its language model: at 3e-3 stock against stock with
# every weight perturbed by 1e-7 differs by 2.7e-3 in fp32 loss and 0.10 in top-k log-probs (stock against Liger:
# 1.3e-5 and 4e-4), and in bf16 stock against Liger differed by 0.47 in top-k log-probs with liger-ops-cuda in
# the Triton interpreter; at 3e-4 that is 2.3e-3 in loss and 0.014 in top-k log-probs.
STABLE_LR = {"gemma4_text": 3e-4, "gemma4": 3e-4, "muse_glimmer": 3e-4}


def mini_config(model_type: str, size: Size, **overrides):
    """A small config of ``model_type`` exercising each family's particular paths; ``overrides`` last."""
    kw = dict(
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        head_dim=size.head_dim,
        vocab_size=size.vocab,
        max_position_embeddings=max(64, size.seq),
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        attention_dropout=0.0,
    )
    if model_type in ("mixtral",):
        kw.update(num_local_experts=4, num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.02)
    if model_type == "qwen3_moe":
        # layer 0 sparse (experts), layer 1 dense (Qwen3MoeMLP): both paths patched.
        kw.update(
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=size.intermediate // 2,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
            output_router_logits=True,
            router_aux_loss_coef=0.02,
            norm_topk_prob=True,
        )
    if model_type.startswith("gemma"):
        kw.update(hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)
    if model_type in ("gemma2", "gemma3_text"):
        kw.update(
            query_pre_attn_scalar=size.head_dim,
            sliding_window=size.seq // 2,
            final_logit_softcapping=30.0,
            attn_logit_softcapping=50.0 if model_type == "gemma2" else None,
        )
    if model_type == "phi3":
        kw.pop("head_dim")
        kw.update(partial_rotary_factor=0.5)  # Phi-3's partial RoPE path
    if model_type == "granite":
        kw.update(logits_scaling=4.0, embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.1)
    kw.update(_TEXT_EXTRA.get(model_type, lambda size: {})(size))
    if model_type in ("deepseek_v2", "deepseek_v3"):
        kw.pop("head_dim")  # MLA: the heads' dims come from qk_rope/qk_nope/v_head_dim
        kw["num_key_value_heads"] = size.heads
    if model_type in MULTIMODAL_FAMILIES:
        return _multimodal_config(model_type, size, kw, overrides)
    kw.update(overrides)
    return AutoConfig.for_model(_TEXT_CONFIG.get(model_type, model_type), **kw)


# Tiny models' logits stay within about +-0.7, where a cap of 30 changes them by less than the tests' tolerances:
# tests of the logit path use this cap instead, so a soft-cap applied where stock does not (or the reverse) fails.
BITING_SOFTCAP = 0.25


def biting_softcap(model_type: str) -> dict:
    """``mini_config`` overrides giving ``model_type``'s text config a soft-cap that changes tiny logits, for the
    families whose logits spec names one (empty for the others)."""
    if mp.FAMILIES[mp._canonical(model_type)].logits.softcap_attr is None:
        return {}
    return {"final_logit_softcapping": BITING_SOFTCAP}


def _alternate(size: Size, kind: str) -> list[str]:
    """Layer types: ``kind`` and full attention in turn, over every layer."""
    return [kind, "full_attention"] * (size.layers // 2)


def _moe(size: Size, **kw) -> dict:
    return {"num_experts_per_tok": 2, "output_router_logits": True, "router_aux_loss_coef": 0.02, **kw}


_LINEAR_ATTENTION = dict(
    linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=8
)
_DEEPSEEK = dict(
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_shared_experts=1,
    first_k_dense_replace=1,  # layer 0 dense (MLP), layer 1 routed (experts)
    kv_lora_rank=16,
    q_lora_rank=16,
    qk_rope_head_dim=4,
    qk_nope_head_dim=4,
    v_head_dim=8,
    n_group=1,
    topk_group=1,
)
# What each newer text family needs beyond mini_config's common keys (its particular paths included).
_TEXT_EXTRA = {
    "nemotron": lambda size: dict(partial_rotary_factor=0.5, hidden_act="relu2"),
    "falcon_h1": lambda size: dict(
        mamba_d_ssm=size.hidden,
        mamba_n_heads=size.heads,
        mamba_d_head=size.hidden // size.heads,
        mamba_d_state=8,
        mamba_n_groups=1,
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_chunk_size=16,
        lm_head_multiplier=0.5,  # logits scaled: inside the fused loss
        mlp_multipliers=[0.7, 1.3],  # gate and down multipliers of its MLP
    ),
    "gpt_oss": lambda size: _moe(
        size,
        num_local_experts=4,
        sliding_window=size.seq // 2,
        layer_types=_alternate(size, "sliding_attention"),
    ),
    "llama4": lambda size: dict(
        num_local_experts=4,
        num_experts_per_tok=1,
        intermediate_size_mlp=size.intermediate,
        moe_layers=[1],  # layer 0 dense (Llama4TextMLP), layer 1 routed with a shared expert
        interleave_moe_layer_step=2,
        attention_chunk_size=size.seq,
    ),
    "gemma4_text": lambda size: dict(
        hidden_size_per_layer_input=0,  # no per-layer input embeddings (a 262144-row table by default)
        vocab_size_per_layer_input=size.vocab,
        final_logit_softcapping=30.0,
        sliding_window=size.seq // 2,
        layer_types=_alternate(size, "sliding_attention"),
    ),
    "qwen3_next": lambda size: _moe(
        size,
        # transformers 5.0.0's stock router loss fails for this config (one_hot over fewer classes than the
        # router's indices); newer releases compute it.
        output_router_logits=transformers.__version__ != "5.0.0",
        num_experts=4,
        moe_intermediate_size=size.intermediate // 2,
        shared_expert_intermediate_size=size.intermediate // 2,
        layer_types=_alternate(size, "linear_attention"),
        partial_rotary_factor=0.5,
        **_LINEAR_ATTENTION,
    ),
    # Both names: the router reads num_experts, the experts num_local_experts (transformers 5.0).
    "hunyuan_v1_moe": lambda size: dict(num_experts=4, num_local_experts=4, moe_topk=2, num_shared_expert=1),
    "deepseek_v2": lambda size: dict(_DEEPSEEK, moe_intermediate_size=size.intermediate // 2),
    "deepseek_v3": lambda size: dict(_DEEPSEEK, moe_intermediate_size=size.intermediate // 2),
    # No router loss: transformers' DeepSeek-V4 model returns no router logits to balance (stock fails with it on).
    "deepseek_v4": lambda size: dict(
        _moe(size, n_routed_experts=4, moe_intermediate_size=size.intermediate // 2, n_shared_experts=1),
        output_router_logits=False,
    ),
}

# -- multimodal ------------------------------------------------------------------------------------

# Token ids inside the tiny vocab (128) for the image placeholder and the vision start/end markers.
IMAGE, VISION_START, VISION_END = 120, 121, 122
IMAGE_TOKENS = {"internvl": 1, "mllama": 1}  # per image; 4 for every other family


def _vision(size: Size) -> dict:
    return dict(hidden_size=16 if size.hidden <= 64 else 32, intermediate_size=32 if size.hidden <= 64 else 64)


def _qwen_vision(size: Size, **kw) -> dict:
    # 4 x 4 patches of 4 x 4 pixels (2 frames), merged 2 x 2: 4 image tokens.
    return dict(depth=2, num_heads=2, in_channels=3, patch_size=4, spatial_merge_size=2, temporal_patch_size=2, **kw)


def _mrope(section: list[int], **kw) -> dict:
    return {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section, **kw}}


def _multimodal_config(model_type: str, size: Size, text: dict, overrides: dict):
    """A tiny (or mid) composite config: ``text`` as its text config, a small vision tower, the image tokens."""
    v = _vision(size)
    half = size.head_dim // 2
    mrope = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
    qwen = dict(image_token_id=IMAGE, vision_start_token_id=VISION_START, vision_end_token_id=VISION_END)
    siglip = dict(v, num_hidden_layers=2, num_attention_heads=2, image_size=8, patch_size=4)
    text_moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=size.intermediate // 2)
    if model_type == "llava":
        kw = dict(
            text_config=dict(text, model_type="llama"),
            vision_config=dict(siglip, model_type="clip_vision_model", projection_dim=v["hidden_size"]),
            image_token_index=IMAGE,
            image_seq_length=4,
            vision_feature_layer=-1,
        )
    elif model_type == "pixtral":  # a LLaVA model with a Pixtral vision tower and a Mistral language model
        kw = dict(
            text_config=dict(text, model_type="mistral"),
            vision_config=dict(  # pixtral-12b's activation; head_dim is the heads' share of the width
                siglip,
                model_type="pixtral",
                head_dim=v["hidden_size"] // siglip["num_attention_heads"],
                hidden_act="silu",
            ),
            image_token_index=IMAGE,
            vision_feature_layer=-1,
            vision_feature_select_strategy="full",  # Pixtral has no CLS token to drop
        )
        model_type = "llava"
    elif model_type == "mllama":
        text = dict(text, cross_attention_layers=[1], rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
        kw = dict(
            text_config=dict(text, model_type="mllama_text_model"),
            vision_config=dict(
                v,
                num_hidden_layers=2,
                num_global_layers=1,
                attention_heads=2,
                image_size=8,
                patch_size=4,
                max_num_tiles=2,
                vision_output_dim=2 * v["hidden_size"],
                intermediate_layers_indices=[0],
                supported_aspect_ratios=[[1, 1], [1, 2]],
            ),
            image_token_index=IMAGE,
        )
    elif model_type == "gemma3":
        kw = dict(
            text_config=dict(text, query_pre_attn_scalar=size.head_dim, final_logit_softcapping=30.0),
            vision_config=siglip,
            mm_tokens_per_image=4,
            image_token_id=IMAGE,
            boi_token_id=VISION_START,
            eoi_token_id=VISION_END,
        )
    elif model_type == "gemma4":
        kw = dict(
            text_config=dict(
                text,
                final_logit_softcapping=30.0,
                sliding_window=size.seq // 2,
                layer_types=_alternate(size, "sliding_attention"),
                global_head_dim=size.head_dim,
                num_global_key_value_heads=size.kv_heads,
                hidden_size_per_layer_input=0,
                vocab_size_per_layer_input=size.vocab,
            ),
            vision_config=dict(
                v,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=2,
                head_dim=8,
                patch_size=4,
                pooling_kernel_size=2,
                position_embedding_size=64,
            ),
            audio_config=None,
            image_token_id=IMAGE,
            boi_token_id=VISION_START,
            eoi_token_id=VISION_END,
        )
    elif model_type == "paligemma":
        kw = dict(
            text_config=dict(text, model_type="gemma"),
            vision_config=dict(siglip, projection_dim=size.hidden),
            image_token_index=IMAGE,
            projection_dim=size.hidden,
            hidden_size=size.hidden,
            vocab_size=size.vocab,
        )
    elif model_type == "qwen2_vl":
        vision = _qwen_vision(size, embed_dim=v["hidden_size"], mlp_ratio=2, hidden_size=size.hidden)
        kw = dict(text_config=dict(text, **_mrope(mrope)), vision_config=vision, **qwen)
    elif model_type == "qwen2_5_vl":
        vision = _qwen_vision(size, **v, out_hidden_size=size.hidden, fullatt_block_indexes=[1], window_size=16)
        kw = dict(text_config=dict(text, **_mrope(mrope)), vision_config=vision, **qwen)
    elif model_type in ("qwen3_vl", "qwen3_vl_moe"):
        vision = _qwen_vision(
            size, **v, out_hidden_size=size.hidden, num_position_embeddings=16, deepstack_visual_indexes=[1]
        )
        moe = dict(text_moe, output_router_logits=True, router_aux_loss_coef=0.02) if model_type.endswith("moe") else {}
        kw = dict(text_config=dict(text, **_mrope(mrope, mrope_interleaved=True), **moe), vision_config=vision, **qwen)
    elif model_type in ("qwen3_5", "qwen3_5_moe"):
        vision = _qwen_vision(size, **v, out_hidden_size=size.hidden, num_position_embeddings=16)
        text = dict(text, layer_types=_alternate(size, "linear_attention"), **_LINEAR_ATTENTION)
        text.update(_mrope([1, 1, 0] if half == 4 else mrope, mrope_interleaved=True, partial_rotary_factor=0.5))
        if model_type.endswith("moe"):
            text.update(text_moe, shared_expert_intermediate_size=size.intermediate // 2, output_router_logits=True)
        kw = dict(text_config=text, vision_config=vision, **qwen)
    elif model_type in ("glm4v", "glm4v_moe"):
        vision = _qwen_vision(size, **v, out_hidden_size=size.hidden, image_size=16)
        # Half the head rotates: the sections split the rotated half's frequencies (head_dim // 4 of them).
        rotated = half // 2
        sections = [1, 1] if half == 4 else [rotated // 4, (rotated - rotated // 4) // 2]
        sections.append(rotated - sum(sections))
        text = dict(text, **_mrope(sections, partial_rotary_factor=0.5))
        if model_type.endswith("moe"):
            text.update(
                n_routed_experts=4,
                num_experts_per_tok=2,
                moe_intermediate_size=size.intermediate // 2,
                n_shared_experts=1,
                first_k_dense_replace=1,
                n_group=1,
                topk_group=1,
            )
        kw = dict(
            text_config=text,
            vision_config=vision,
            image_token_id=IMAGE,
            image_start_token_id=VISION_START,
            image_end_token_id=VISION_END,
        )
    elif model_type == "internvl":
        vision = dict(v, num_hidden_layers=2, num_attention_heads=2, image_size=[8, 8], patch_size=[4, 4])
        kw = dict(
            text_config=dict(text, model_type="qwen2"),
            vision_config=vision,
            image_token_id=IMAGE,
            image_seq_length=1,
            downsample_ratio=0.5,
        )
    elif model_type == "smolvlm":
        vision = dict(v, num_hidden_layers=2, num_attention_heads=2, image_size=8, patch_size=4)
        kw = dict(
            text_config=dict(text, model_type="llama"), vision_config=vision, image_token_id=IMAGE, scale_factor=2
        )
    elif model_type == "muse_glimmer":
        vision = dict(
            v,
            patch_size=4,
            pos_emb_height=8,
            pos_emb_width=8,
            num_attention_heads=2,
            num_hidden_layers=2,
            merge_size=2,
            patch_temporal=2,
        )
        kw = dict(
            text_config=dict(text, final_logit_softcapping=20.0, output_multiplier=0.5),
            vision_config=vision,
            image_token_id=IMAGE,
            out_hidden_size=4 * v["hidden_size"],
            projector_hidden_size=size.hidden,
        )
    else:
        raise ValueError(f"no multimodal mini config for {model_type!r}")
    text_overrides = {k: v for k, v in overrides.items() if k != "tie_word_embeddings"}
    kw["text_config"] = {**kw["text_config"], **text_overrides}
    if "tie_word_embeddings" in overrides:
        kw["tie_word_embeddings"] = overrides["tie_word_embeddings"]
    return AutoConfig.for_model(model_type, **kw)


def model_inputs(model_type: str, config, size: Size, batch: int, seq: int, seed: int, ids=None) -> dict:
    """``input_ids`` and ``attention_mask`` (``ids`` if given) and, for a multimodal family, one random image per
    row: its pixel inputs and, at positions 1..n, the placeholder tokens its processor would insert."""
    g = torch.Generator().manual_seed(seed)
    if ids is None:
        ids = torch.randint(3, min(size.vocab, IMAGE), (batch, seq), generator=g)
    out = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if model_type not in MULTIMODAL_FAMILIES:
        return out
    # The special tokens' ids appear only where the processor would put them.
    ids = ids.masked_fill(ids >= IMAGE, 3)
    batch = ids.shape[0]
    n = IMAGE_TOKENS.get(model_type, 4)
    ids[:, 1 : 1 + n] = IMAGE
    out["input_ids"] = ids
    rand = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    if model_type in (
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen3_vl",
        "qwen3_vl_moe",
        "qwen3_5",
        "qwen3_5_moe",
        "glm4v",
        "glm4v_moe",
    ):
        ids[:, 0] = VISION_START
        ids[:, 1 + n] = VISION_END
        vision = config.vision_config
        out["pixel_values"] = rand(batch * 16, 3 * vision.temporal_patch_size * vision.patch_size**2)
        out["image_grid_thw"] = torch.tensor([[1, 4, 4]] * batch)
    elif model_type == "muse_glimmer":
        out["pixel_values"] = rand(batch * 16, 3 * 2 * 4 * 4)
        out["image_grid_thw"] = torch.tensor([[1, 4, 4]] * batch)
    elif model_type == "gemma4":
        out["pixel_values"] = rand(batch, 16, 3 * 4 * 4)
        pos = torch.stack(torch.meshgrid(torch.arange(4), torch.arange(4), indexing="xy"), -1).reshape(16, 2)
        out["image_position_ids"] = pos[None].expand(batch, 16, 2).clone()
    elif model_type == "smolvlm":
        out["pixel_values"] = rand(batch, 1, 3, 16, 16)
    elif model_type == "mllama":
        out["pixel_values"] = rand(batch, 1, 2, 3, 8, 8)
        out["aspect_ratio_ids"] = torch.tensor([[2]] * batch)
        out["aspect_ratio_mask"] = torch.ones(batch, 1, 2, dtype=torch.long)
        out["cross_attention_mask"] = torch.ones(batch, ids.shape[1], 1, 2, dtype=torch.long)
    else:  # llava, pixtral (in LLaVA), gemma3, paligemma, internvl
        out["pixel_values"] = rand(batch, 3, 8, 8)
        if model_type == "pixtral":
            out["image_sizes"] = torch.tensor([[8, 8]] * batch)
    if model_type in ("gemma3", "paligemma"):
        out["token_type_ids"] = (ids == IMAGE).long()
    if "mm_token_type_ids" in inspect.signature(model_class(config).forward).parameters:
        # Newer transformers compute M-RoPE positions from it (what the processor returns beside input_ids).
        out["mm_token_type_ids"] = (ids == IMAGE).long()
    return out


def auto_class(model_type: str) -> type:
    return AutoModelForImageTextToText if model_type in MULTIMODAL_FAMILIES else AutoModelForCausalLM


def model_class(config) -> type:
    """The class ``build`` builds for ``config``."""
    for auto in (AutoModelForImageTextToText, AutoModelForCausalLM, AutoModel):
        cls = auto._model_mapping.get(type(config), None)
        if cls is not None:
            return cls
    raise ValueError(f"no model class for {type(config).__name__}")


def _wake(model) -> None:
    """Re-initialise the parameters some families start at zero (Gemma 3's image projection, Mllama's
    cross-attention gates): at zero the image would not reach the loss, and the vision tower would go untested."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ("gate" in name or "mm_input_projection" in name) and p.numel() and not p.any():
                p.copy_(torch.randn(p.shape, generator=g).to(p.dtype) * 0.5)


# Non-default configs of each family, for the tests that patched classes serve every config stock serves:
# "kernel" keeps the activation Liger's MLP computes, "other_act" swaps it (the MLP then runs the stock
# forward); both flip tied/untied embeddings from mini_config's and set the family's sliding window and partial
# RoPE where it has them. Window 4 is shorter than the test sequences, so the window masks something.
VARIANTS = ("kernel", "other_act")
_SLIDING = {
    "mistral": {"sliding_window": 4},
    "mixtral": {"sliding_window": 4},
    "phi3": {"sliding_window": 4},
    # Layers from max_window_layers on use the window: layer 0 full, layer 1 sliding.
    "qwen2": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
    "qwen3": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
    "qwen3_moe": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
    "gemma2": {"sliding_window": 4},
    "gemma3_text": {"sliding_window": 4},
}


def variant_config(model_type: str, variant: str, size: Size):
    """``mini_config`` of ``model_type`` changed as ``variant`` (one of VARIANTS) says."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}; got {variant!r}")
    require_family(model_type)
    gemma = model_type.startswith("gemma")
    kw = dict(_SLIDING.get(model_type, {}))
    kw["tie_word_embeddings"] = not gemma  # mini_config ties gemma's only
    if model_type == "gemma3_text":
        kw["layer_types"] = _alternate(size, "sliding_attention")  # both RoPE tables (local and global)
    if model_type == "phi3":
        kw["partial_rotary_factor"] = 0.75  # head_dim 8: rotates 6 of 8 dims (mini_config's 0.5 rotates 4)
    if model_type in ("llama", "granite"):
        kw["mlp_bias"] = True  # biased projections into the fused MLP
    if model_type in ("llama", "granite", "qwen3", "olmo2"):
        kw["attention_bias"] = True
    if variant == "other_act":
        # silu families get gelu (exact erf); gemma's tanh-GELU families get silu (Gemma reads hidden_act,
        # Gemma 2/3 hidden_activation).
        kw["hidden_act"] = "silu" if gemma else "gelu"
        if gemma:
            kw["hidden_activation"] = "silu"
    kw["classifier_dropout"] = 0.0  # token classification heads: no dropout, so stock and patched runs agree
    config = mini_config(model_type, size, **kw)
    config._attn_implementation = "eager"
    return config


def build(model_type: str, size: Size, dtype: torch.dtype, device: str, state: dict | None = None, **overrides):
    """A model from ``mini_config`` (``overrides`` passed on); ``state`` (a state dict) makes its weights exactly
    those."""
    config = mini_config(model_type, size, **overrides)
    config._attn_implementation = "eager"  # the same attention in both runs, on every device
    torch.manual_seed(0)
    model = auto_class(model_type).from_config(config, dtype=dtype).to(device)
    _wake(model)
    if state is not None:
        model.load_state_dict(state)
    return model


def batches(
    size: Size, steps: int, device: str, seed: int = 1234, model_type: str = "llama", config=None
) -> list[dict[str, torch.Tensor]]:
    """Generated token batches with something to learn: a fixed random successor table, followed
    with probability 3/4 (so the loss falls over a few dozen steps). Each row ignores a 'prompt' of
    random length (labels -100), so the mean is over a varying number of tokens. A multimodal
    family's batches hold one random image per row (its placeholder tokens in the prompt).
    """
    g = torch.Generator().manual_seed(seed)
    successor = torch.randint(3, size.vocab, (size.vocab,), generator=g)
    out = []
    for _ in range(steps):
        ids = torch.empty(size.batch, size.seq, dtype=torch.long)
        ids[:, 0] = torch.randint(3, size.vocab, (size.batch,), generator=g)
        noise = torch.randint(3, size.vocab, (size.batch, size.seq), generator=g)
        follow = torch.rand(size.batch, size.seq, generator=g) < 0.75
        for t in range(1, size.seq):
            ids[:, t] = torch.where(follow[:, t], successor[ids[:, t - 1]], noise[:, t])
        inputs = model_inputs(model_type, config, size, size.batch, size.seq, seed + len(out), ids=ids)
        labels = inputs["input_ids"].clone()
        prompt = torch.randint(1, size.seq // 3, (size.batch,), generator=g)
        if model_type in MULTIMODAL_FAMILIES:
            prompt = prompt.clamp(min=IMAGE_TOKENS.get(model_type, 4) + 3)  # the image is part of the prompt
        labels[torch.arange(size.seq)[None, :] < prompt[:, None]] = -100
        inputs = {k: v.to(device) for k, v in inputs.items()}
        out.append({**inputs, "labels": labels.to(device)})
    return out


@dataclass
class Run:
    losses: list[float]
    params: dict[str, torch.Tensor]
    eval_logprobs: torch.Tensor  # (positions, vocab) float32, on CPU


def train(model, data, lr: float) -> Run:
    """AdamW over ``data``; then the model's log-probs on an eval batch (first row of the first batch)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, eps=1e-6)
    model.train()
    losses = []
    for batch in data:
        loss = model(**_cast(batch, model.dtype)).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        first = {
            k: v[:1] if k not in ("pixel_values", "image_grid_thw") else v for k, v in data[0].items() if k != "labels"
        }
        if "image_grid_thw" in first:  # one image per row: the first row's patches
            first["pixel_values"] = first["pixel_values"][: int(first["image_grid_thw"][0].prod())]
            first["image_grid_thw"] = first["image_grid_thw"][:1]
        elif "pixel_values" in first:
            first["pixel_values"] = first["pixel_values"][:1]
        logits = model(**_cast(first, model.dtype)).logits
    logp = torch.log_softmax(logits.float(), dim=-1)[0].cpu()
    params = {n: p.detach().float().cpu().clone() for n, p in model.named_parameters()}
    return Run(losses, params, logp)


def _cast(batch: dict, dtype: torch.dtype) -> dict:
    """Pixel inputs in the model's dtype, as a processor's output is cast before the call."""
    return {k: v.to(dtype) if k == "pixel_values" else v for k, v in batch.items()}


def initial_state(model) -> dict:
    return copy.deepcopy(model.state_dict())


@contextlib.contextmanager
def stock_transformers(reapply: Callable[[], None]) -> Iterator[None]:
    """Stock transformers inside the block, ``reapply()`` (the test's patch) after it.

    A class-level patch also changes models built before it: ``<Family>ForCausalLM.forward`` and the
    module-level ``apply_rotary_pos_emb`` are looked up at call time. A stock reference must therefore
    run (forward, generate) with the patches reverted, and so must its backward under gradient
    checkpointing, which runs the forward again.
    """
    from liger_core.transformers import revert_liger_kernel_patches

    revert_liger_kernel_patches()
    try:
        yield
    finally:
        reapply()
