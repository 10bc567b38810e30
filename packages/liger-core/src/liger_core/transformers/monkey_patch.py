"""``apply_liger_kernel_to_<family>()``: swap a transformers model family's layers for Liger's.

One table (`FAMILIES`) says, for every model family liger-kernel 0.8.5 patches, what its patch
swaps in the family's ``modeling_<module>`` module: the RMSNorm, LayerNorm and MLP classes by
their Liger subclasses (`liger_core.transformers.layers`), ``apply_rotary_pos_emb`` (and
Qwen2-VL's ``apply_multimodal_rotary_pos_emb``) by the Liger RoPE in front of the stock
function, and the ``forward`` of each causal-LM / conditional-generation class by the
fused-linear-cross-entropy forward (`liger_core.transformers.causal_lm`) and, for the families with
LLaMA's or Gemma 2/3's decoder layer, the ``forward`` of that layer class by one that computes the
residual add and the MLP's norm in one fused_add_rms_norm call (`layers.decoder_layer_forward`;
flag ``fused_add_rms_norm``, this project's beyond liger-kernel's). Each of them runs the
stock computation wherever Liger's does not fit, so every config the stock classes build still
builds and runs. Models built afterwards use Liger's layers. Given ``model=``, the patch also
converts that live model's modules (its norms, MLPs and experts; with ``layer_norm=True`` the
``torch.nn.LayerNorm`` modules of its vision tower, which no class-level swap can reach without
changing ``torch.nn`` for everyone) and its forward.

Multimodal wrappers whose language model is another family's (LLaVA, PaliGemma, InternVL,
SmolVLM: ``config.text_config.model_type``) patch their own classes; given ``model=`` (or
through `apply_liger_kernel_to_instance` and the Auto classes, which know the config) they also
apply the language model's and vision tower's own families.

Every patch is recorded; `revert_liger_kernel_patches` restores the stock objects.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MethodType
from typing import Any

import torch
from torch import nn

from liger_core import functional as F
from liger_core.transformers import layers
from liger_core.transformers.causal_lm import LogitsSpec, make_forward, packed_sequence_check

MIN_TRANSFORMERS = "5.0.0"

# The flags a patch may take, as liger-kernel names them; each family offers those liger-kernel 0.8.5
# offers for it (`Family.flags`), in its order, then ``model``.
MLP_FLAGS = ("swiglu", "geglu", "relu_squared")
_TEXT = ("rope", "cross_entropy", "fused_linear_cross_entropy", "rms_norm", "swiglu")
_TEXT_GEGLU = ("rope", "cross_entropy", "fused_linear_cross_entropy", "rms_norm", "geglu")
_VISION_LN = ("rope", "cross_entropy", "fused_linear_cross_entropy", "layer_norm", "rms_norm", "swiglu")
# Beyond liger-kernel's flags: the decoder layer's residual add and next norm in one fused_add_rms_norm call.
FUSED_ADD = "fused_add_rms_norm"
_TEXT_FUSED = (*_TEXT, FUSED_ADD)
_TEXT_GEGLU_FUSED = (*_TEXT_GEGLU, FUSED_ADD)


@dataclass(frozen=True)
class Norm:
    offset: float = 0.0
    casting_mode: str = "llama"
    # Only where the class serves solely as a pre-norm (see layers.rms_norm_class).
    in_place: bool = True


# Families whose norm classes also serve as q/k norms or post-norms: no in-place gradient.
_LLAMA = Norm(in_place=False)
# Scale in float32 and cast last (OLMo2/3, GPT-OSS, Gemma 4, DeepSeek-V4), no offset.
_F32_SCALE = Norm(0.0, "gemma", False)
# Gemma, Qwen3-Next, Qwen3.5: weight stored minus one, scaled in float32.
_GEMMA_NORM = Norm(offset=1.0, casting_mode="gemma", in_place=False)


@dataclass(frozen=True)
class Family:
    """What one model family's patch swaps (class names in its modeling module; a name the
    installed transformers lacks is skipped)."""

    module: str  # transformers.models.<module>.modeling_<module>
    heads: tuple[str, ...] = ()  # causal-LM / conditional-generation classes: fused linear cross-entropy
    norms: tuple[str, ...] = ()  # RMSNorm classes with the arithmetic `norm`
    norm: Norm = Norm()
    other_norms: tuple[tuple[str, Norm], ...] = ()  # RMSNorm classes with another arithmetic
    mlps: tuple[str, ...] = ()  # MLP classes of kind `mlp_kind`
    mlp_kind: str = "swiglu"  # swiglu, geglu, phi3 (one gate_up_proj), relu_squared (ungated), falcon_h1
    other_mlps: tuple[tuple[str, str], ...] = ()  # (class, kind): MLPs of another kind (vision towers)
    experts: tuple[str, ...] = ()  # fused-weight MoE experts classes (same activation as the MLPs)
    scaled_input_moes: tuple[str, ...] = ()  # MoE blocks that scale tokens before their experts (Llama 4)
    # (class, layers.CLAMPED_EXPERTS layout): experts with a clamped SwiGLU (GPT-OSS, DeepSeek-V4)
    clamped_experts: tuple[tuple[str, str], ...] = ()
    layer_norms: tuple[tuple[str, float], ...] = ()  # LayerNorm classes and their weight offset
    vision_layer_norm: bool = False  # layer_norm also converts a live model's torch.nn.LayerNorm modules
    rope: str | None = "full"  # layers.rope_function kind of `rope_fn`; None: not served
    rope_fn: str = "apply_rotary_pos_emb"  # the modeling module's RoPE function that `rope` swaps
    other_ropes: tuple[tuple[str, str], ...] = ()  # (function, kind): more RoPE functions the flag swaps
    mrope: bool = False  # apply_multimodal_rotary_pos_emb (Qwen2-VL, Qwen2.5-VL in transformers 5.0)
    logits: LogitsSpec = field(default_factory=LogitsSpec)
    flags: tuple[str, ...] = _TEXT
    off: tuple[str, ...] = ()  # flags whose default is False
    unavailable: tuple[tuple[str, str], ...] = ()  # (flag, why it cannot be True yet)
    composite: bool = False  # the language model and vision tower are other families (config.text_config)
    # Decoder layer classes whose forward the fused_add_rms_norm flag swaps, of layers.LAYER_PATTERNS
    # pattern `layer_pattern` (their stock forward must be exactly that pattern: tests/hf compare with stock).
    decoder_layers: tuple[str, ...] = ()
    layer_pattern: str = "pre_norm"
    lacks: str = ""  # what the catalogue lacks for this family yet (docstring)

    @property
    def modeling(self) -> str:
        return f"transformers.models.{self.module}.modeling_{self.module}"

    @property
    def mlp_flag(self) -> str | None:
        return next((f for f in self.flags if f in MLP_FLAGS), None)

    @property
    def defaults(self) -> dict[str, bool]:
        return {f: f != "cross_entropy" and f not in self.off for f in self.flags}


def _moe(module: str) -> LogitsSpec:
    return LogitsSpec(moe_module=f"transformers.models.{module}.modeling_{module}")


_NO_ROPE_INTERLEAVED = (
    "its RoPE rotates interleaved pairs (x[..., 0::2], x[..., 1::2]); the catalogue's rope rotates halves"
)


FAMILIES: dict[str, Family] = {
    # -- text families of the first release
    "llama": Family(
        "llama",
        ("LlamaForCausalLM",),
        ("LlamaRMSNorm",),
        mlps=("LlamaMLP",),
        flags=_TEXT_FUSED,
        decoder_layers=("LlamaDecoderLayer",),
    ),
    "mistral": Family(
        "mistral",
        ("MistralForCausalLM",),
        ("MistralRMSNorm",),
        mlps=("MistralMLP",),
        flags=_TEXT_FUSED,
        decoder_layers=("MistralDecoderLayer",),
    ),
    "mixtral": Family(
        "mixtral",
        ("MixtralForCausalLM",),
        ("MixtralRMSNorm",),
        experts=("MixtralExperts",),
        logits=_moe("mixtral"),
    ),
    "qwen2": Family(
        "qwen2",
        ("Qwen2ForCausalLM",),
        ("Qwen2RMSNorm",),
        mlps=("Qwen2MLP",),
        flags=_TEXT_FUSED,
        decoder_layers=("Qwen2DecoderLayer",),
    ),
    # Qwen3's norm class is also its q/k norm, whose output feeds RoPE: no in-place gradient.
    "qwen3": Family(
        "qwen3",
        ("Qwen3ForCausalLM",),
        ("Qwen3RMSNorm",),
        _LLAMA,
        mlps=("Qwen3MLP",),
        flags=_TEXT_FUSED,
        decoder_layers=("Qwen3DecoderLayer",),
    ),
    "qwen3_moe": Family(
        "qwen3_moe",
        ("Qwen3MoeForCausalLM",),
        ("Qwen3MoeRMSNorm",),
        _LLAMA,
        mlps=("Qwen3MoeMLP",),
        experts=("Qwen3MoeExperts",),
        logits=_moe("qwen3_moe"),
    ),
    "gemma": Family(
        "gemma",
        ("GemmaForCausalLM",),
        ("GemmaRMSNorm",),
        _GEMMA_NORM,
        mlps=("GemmaMLP",),
        mlp_kind="geglu",
        flags=_TEXT_GEGLU_FUSED,
        decoder_layers=("GemmaDecoderLayer",),
    ),
    "gemma2": Family(
        "gemma2",
        ("Gemma2ForCausalLM",),
        ("Gemma2RMSNorm",),
        _GEMMA_NORM,
        mlps=("Gemma2MLP",),
        mlp_kind="geglu",
        logits=LogitsSpec(softcap_attr="final_logit_softcapping"),
        flags=_TEXT_GEGLU_FUSED,
        decoder_layers=("Gemma2DecoderLayer",),
        layer_pattern="sandwich",
    ),
    "gemma3_text": Family(
        "gemma3",
        ("Gemma3ForCausalLM",),
        ("Gemma3RMSNorm",),
        _GEMMA_NORM,
        mlps=("Gemma3MLP",),
        mlp_kind="geglu",
        logits=LogitsSpec(softcap_attr="final_logit_softcapping"),
        flags=_TEXT_GEGLU_FUSED,
        decoder_layers=("Gemma3DecoderLayer",),
        layer_pattern="sandwich",
    ),
    "phi3": Family("phi3", ("Phi3ForCausalLM",), ("Phi3RMSNorm",), mlps=("Phi3MLP",), mlp_kind="phi3", rope="partial"),
    "granite": Family(
        "granite",
        ("GraniteForCausalLM",),
        ("GraniteRMSNorm",),
        mlps=("GraniteMLP",),
        logits=LogitsSpec(scale_attr="logits_scaling"),
    ),
    # OLMo2 scales in float32 and casts last (Gemma's casting, no offset); its norms are post-norms.
    "olmo2": Family("olmo2", ("Olmo2ForCausalLM",), ("Olmo2RMSNorm",), _F32_SCALE, mlps=("Olmo2MLP",)),
    # -- text families
    "smollm3": Family(
        "smollm3",
        ("SmolLM3ForCausalLM",),
        ("SmolLM3RMSNorm",),
        mlps=("SmolLM3MLP",),
        flags=_TEXT_FUSED,
        decoder_layers=("SmolLM3DecoderLayer",),
    ),
    "ministral": Family(
        "ministral",
        ("MinistralForCausalLM",),
        ("MinistralRMSNorm",),
        mlps=("MinistralMLP",),
        flags=_TEXT_FUSED,
        decoder_layers=("MinistralDecoderLayer",),
    ),
    "nemotron": Family(
        "nemotron",
        ("NemotronForCausalLM",),
        mlps=("NemotronMLP",),
        mlp_kind="relu_squared",
        # LayerNorm1P stores weight - 1; partial RoPE (the first partial_rotary_factor of each head).
        layer_norms=(("NemotronLayerNorm1P", 1.0),),
        rope="partial",
        flags=("rope", "cross_entropy", "fused_linear_cross_entropy", "layer_norm", "relu_squared"),
    ),
    "olmo3": Family("olmo3", ("Olmo3ForCausalLM",), ("Olmo3RMSNorm",), _F32_SCALE, mlps=("Olmo3MLP",)),
    "glm4": Family(
        "glm4",
        ("Glm4ForCausalLM",),
        ("Glm4RMSNorm",),
        _LLAMA,
        mlps=("Glm4MLP",),
        mlp_kind="phi3",
        rope="interleaved",
    ),
    "exaone4": Family("exaone4", ("Exaone4ForCausalLM",), ("Exaone4RMSNorm",), _LLAMA, mlps=("Exaone4MLP",)),
    "falcon_h1": Family(
        "falcon_h1",
        ("FalconH1ForCausalLM",),
        ("FalconH1RMSNorm",),
        _LLAMA,
        mlps=("FalconH1MLP",),
        mlp_kind="falcon_h1",
        logits=LogitsSpec(multiplier_attr="lm_head_multiplier"),
        lacks="the gated RMSNorm of its Mamba mixer (FalconH1RMSNormGated)",
    ),
    "gpt_oss": Family(
        "gpt_oss",
        ("GptOssForCausalLM",),
        ("GptOssRMSNorm",),
        _F32_SCALE,
        rope="half_table",
        logits=_moe("gpt_oss"),
        clamped_experts=(("GptOssExperts", "gpt_oss"),),
    ),
    "llama4": Family(
        "llama4",
        ("Llama4ForCausalLM",),
        ("Llama4TextRMSNorm",),
        _LLAMA,
        mlps=("Llama4TextMLP",),
        scaled_input_moes=("Llama4TextMoe",),
        vision_layer_norm=True,
        rope="complex",
        rope_fn="apply_rotary_emb",
        flags=_VISION_LN,
        lacks=(
            "Llama4ForConditionalGeneration keeps its stock forward (its language model is a Llama4ForCausalLM, "
            "whose forward is fused)"
        ),
    ),
    "gemma4_text": Family(
        "gemma4",
        ("Gemma4ForCausalLM",),
        ("Gemma4RMSNorm",),
        _F32_SCALE,
        mlps=("Gemma4TextMLP",),
        mlp_kind="geglu",
        rope="one_tensor",
        logits=LogitsSpec(softcap_attr="final_logit_softcapping"),
        flags=_TEXT_GEGLU,
    ),
    "qwen3_next": Family(
        "qwen3_next",
        ("Qwen3NextForCausalLM",),
        ("Qwen3NextRMSNorm",),
        _GEMMA_NORM,
        mlps=("Qwen3NextMLP",),
        experts=("Qwen3NextExperts",),
        rope="partial",
        logits=_moe("qwen3_next"),
        lacks="the gated RMSNorm of its linear attention (Qwen3NextRMSNormGated)",
    ),
    "qwen3_5": Family(
        "qwen3_5",
        ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"),
        ("Qwen3_5RMSNorm",),
        _GEMMA_NORM,
        mlps=("Qwen3_5MLP",),
        vision_layer_norm=True,
        rope="partial",
        flags=_VISION_LN,
        lacks="the gated RMSNorm of its linear attention; its vision MLP is ungated GELU (no catalogue op)",
    ),
    "qwen3_5_moe": Family(
        "qwen3_5_moe",
        ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"),
        ("Qwen3_5MoeRMSNorm",),
        _GEMMA_NORM,
        mlps=("Qwen3_5MoeMLP",),
        experts=("Qwen3_5MoeExperts",),
        vision_layer_norm=True,
        rope="partial",
        logits=_moe("qwen3_5_moe"),
        flags=_VISION_LN,
        lacks="the gated RMSNorm of its linear attention; its vision MLP is ungated GELU (no catalogue op)",
    ),
    "hunyuan_v1_dense": Family(
        "hunyuan_v1_dense",
        ("HunYuanDenseV1ForCausalLM",),
        ("HunYuanDenseV1RMSNorm",),
        _LLAMA,
        mlps=("HunYuanDenseV1MLP",),
    ),
    "hunyuan_v1_moe": Family(
        "hunyuan_v1_moe",
        ("HunYuanMoEV1ForCausalLM",),
        ("HunYuanMoEV1RMSNorm",),
        _LLAMA,
        mlps=("HunYuanMoEV1MLP",),
        experts=("HunYuanMoEV1Experts",),
    ),
    "deepseek_v2": Family(
        "deepseek_v2",
        ("DeepseekV2ForCausalLM",),
        ("DeepseekV2RMSNorm",),
        _LLAMA,
        mlps=("DeepseekV2MLP",),
        experts=("DeepseekV2Experts",),
        rope="complex_heads_major",
        rope_fn="apply_rotary_emb",
    ),
    "deepseek_v3": Family(
        "deepseek_v3",
        ("DeepseekV3ForCausalLM",),
        ("DeepseekV3RMSNorm",),
        _LLAMA,
        mlps=("DeepseekV3MLP",),
        experts=("DeepseekV3Experts",),
        # config.rope_interleave (the default) picks the second; both are served.
        other_ropes=(("apply_rotary_pos_emb_interleave", "deinterleaved"),),
    ),
    "deepseek_v4": Family(
        "deepseek_v4",
        ("DeepseekV4ForCausalLM",),
        ("DeepseekV4RMSNorm",),
        _F32_SCALE,
        clamped_experts=(("DeepseekV4Experts", "deepseek_v4"),),
        rope=None,
        logits=_moe("deepseek_v4"),
        off=("rope",),
        unavailable=(("rope", "DeepSeek-V4 " + _NO_ROPE_INTERLEAVED),),
        # The swiglu flag fuses the routed experts (fused_moe_clamped_swiglu); the dense and shared MLPs
        # clamp gate and up before the activation, which the catalogue's swiglu does not.
        lacks="RoPE (interleaved) and its clamped SwiGLU MLPs (the dense layers' and the shared experts')",
    ),
    # -- multimodal families: language model, vision tower, conditional-generation head
    "muse_glimmer": Family(
        "muse_glimmer",
        ("MuseGlimmerForConditionalGeneration",),
        ("MuseGlimmerRMSNorm",),
        _F32_SCALE,
        other_norms=(("MuseGlimmerTextCenteredRMSNorm", _GEMMA_NORM),),
        mlps=("MuseGlimmerTextMLP",),
        vision_layer_norm=True,
        logits=LogitsSpec(softcap_attr="final_logit_softcapping", multiplier_attr="output_multiplier"),
        flags=_VISION_LN,
        lacks="its vision MLP is ungated (no catalogue op)",
    ),
    "llava": Family(
        "llava",
        ("LlavaForConditionalGeneration",),
        rope=None,
        flags=("cross_entropy", "fused_linear_cross_entropy"),
        composite=True,
    ),
    "mllama": Family(
        "mllama",
        ("MllamaForCausalLM", "MllamaForConditionalGeneration"),
        ("MllamaTextRMSNorm",),
        _LLAMA,
        mlps=("MllamaTextMLP",),
        vision_layer_norm=True,
        flags=("rope", "cross_entropy", "fused_linear_cross_entropy", "layer_norm", "rms_norm", "swiglu"),
        lacks="its vision MLP is ungated GELU (no catalogue op)",
    ),
    # Pixtral is the vision tower (of LLaVA checkpoints such as pixtral-12b): no LM head.
    "pixtral": Family("pixtral", (), ("PixtralRMSNorm",), mlps=("PixtralMLP",), flags=("rope", "rms_norm", "swiglu")),
    "gemma3": Family(
        "gemma3",
        ("Gemma3ForConditionalGeneration",),
        ("Gemma3RMSNorm",),
        _GEMMA_NORM,
        mlps=("Gemma3MLP",),
        mlp_kind="geglu",
        vision_layer_norm=True,
        logits=LogitsSpec(softcap_attr="final_logit_softcapping"),
        flags=("rope", "cross_entropy", "fused_linear_cross_entropy", "layer_norm", "rms_norm", "geglu"),
        lacks="its SigLIP vision MLP is ungated (no catalogue op)",
    ),
    "gemma4": Family(
        "gemma4",
        ("Gemma4ForConditionalGeneration",),
        ("Gemma4RMSNorm",),
        _F32_SCALE,
        mlps=("Gemma4TextMLP", "Gemma4VisionMLP"),
        mlp_kind="geglu",
        vision_layer_norm=True,
        rope="one_tensor",
        logits=LogitsSpec(softcap_attr="final_logit_softcapping"),
        flags=("rope", "cross_entropy", "fused_linear_cross_entropy", "layer_norm", "rms_norm", "geglu"),
        off=("layer_norm",),
    ),
    "paligemma": Family(
        "paligemma",
        ("PaliGemmaForConditionalGeneration",),
        rope=None,
        vision_layer_norm=True,
        logits=LogitsSpec(softcap_attr="final_logit_softcapping"),
        flags=("cross_entropy", "fused_linear_cross_entropy", "layer_norm"),
        composite=True,
        lacks="its SigLIP vision MLP is ungated (no catalogue op)",
    ),
    "qwen2_vl": Family(
        "qwen2_vl",
        ("Qwen2VLForConditionalGeneration",),
        ("Qwen2VLRMSNorm", "Qwen2RMSNorm"),  # transformers 5.0 builds Qwen2's
        mlps=("Qwen2MLP",),
        vision_layer_norm=True,
        flags=("rope", "cross_entropy", "fused_linear_cross_entropy", "rms_norm", "layer_norm", "swiglu"),
        lacks="its vision MLP is ungated QuickGELU (no catalogue op)",
        mrope=True,
    ),
    "qwen2_5_vl": Family(
        "qwen2_5_vl",
        ("Qwen2_5_VLForConditionalGeneration",),
        ("Qwen2_5_VLRMSNorm", "Qwen2RMSNorm"),  # transformers 5.0 builds Qwen2's
        mlps=("Qwen2MLP", "Qwen2_5_VLMLP"),
        mrope=True,
    ),
    "qwen3_vl": Family(
        "qwen3_vl",
        ("Qwen3VLForConditionalGeneration",),
        ("Qwen3VLTextRMSNorm",),
        _LLAMA,
        mlps=("Qwen3VLTextMLP",),
        vision_layer_norm=True,
        flags=_VISION_LN,
        lacks="its vision MLP is ungated GELU (no catalogue op)",
    ),
    "qwen3_vl_moe": Family(
        "qwen3_vl_moe",
        ("Qwen3VLMoeForConditionalGeneration",),
        ("Qwen3VLMoeTextRMSNorm",),
        _LLAMA,
        mlps=("Qwen3VLMoeTextMLP",),
        experts=("Qwen3VLMoeTextExperts",),
        vision_layer_norm=True,
        logits=_moe("qwen3_vl_moe"),
        flags=_VISION_LN,
        lacks="its vision MLP is ungated GELU (no catalogue op)",
    ),
    "glm4v": Family(
        "glm4v",
        ("Glm4vForConditionalGeneration",),
        ("Glm4vRMSNorm",),
        _LLAMA,
        mlps=("Glm4vTextMLP",),
        mlp_kind="phi3",
        other_mlps=(("Glm4VisionMlp", "swiglu"),),
        rope="interleaved",
    ),
    "glm4v_moe": Family(
        "glm4v_moe",
        ("Glm4vMoeForConditionalGeneration",),
        ("Glm4vMoeRMSNorm", "Glm4vMoeTextRMSNorm"),
        _LLAMA,
        mlps=("Glm4vMoeTextMLP", "Glm4vMoeisionMlp", "Glm4vMoeVisionMlp"),  # transformers' spelling varies
        experts=("Glm4vMoeTextExperts", "Glm4vMoeTextNaiveMoe"),  # the latter: transformers 5.0
        rope="partial",
        logits=_moe("glm4v_moe"),
    ),
    "internvl": Family(
        "internvl",
        ("InternVLForConditionalGeneration",),
        ("InternVLVisionRMSNorm",),
        vision_layer_norm=True,
        rope=None,
        flags=("cross_entropy", "fused_linear_cross_entropy", "rms_norm", "layer_norm"),
        composite=True,
        lacks="its vision MLP is ungated GELU (no catalogue op)",
    ),
    "smolvlm": Family(
        "smolvlm",
        ("SmolVLMForConditionalGeneration",),
        vision_layer_norm=True,
        rope=None,
        flags=("cross_entropy", "fused_linear_cross_entropy", "rms_norm", "layer_norm"),
        composite=True,
        lacks="its vision MLP is ungated GELU (no catalogue op)",
    ),
}

# Model types of the sub-configs a family's classes are built from (text-only checkpoints of
# multimodal families), as liger-kernel maps them.
ALIASES: dict[str, str] = {
    "llama4_text": "llama4",
    "mllama_text_model": "mllama",
    "qwen2_vl_text": "qwen2_vl",
    "qwen2_5_vl_text": "qwen2_5_vl",
    "qwen3_vl_text": "qwen3_vl",
    "qwen3_vl_moe_text": "qwen3_vl_moe",
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5_moe",
    "glm4v_text": "glm4v",
    "glm4v_moe_text": "glm4v_moe",
    "muse_glimmer_text": "muse_glimmer",
}

SUPPORTED: tuple[str, ...] = tuple(sorted(FAMILIES))

# (object, attribute) -> the stock value, first patch wins; for revert_liger_kernel_patches.
_SAVED: dict[tuple[int, str], tuple[object, str, object]] = {}
_MISSING = object()


def _set(obj: object, name: str, value: object) -> None:
    key = (id(obj), name)
    if key not in _SAVED:
        _SAVED[key] = (obj, name, obj.__dict__.get(name, _MISSING) if hasattr(obj, "__dict__") else _MISSING)
    setattr(obj, name, value)


def _stock_value(obj: object, name: str) -> object:
    """``obj.name`` as it was before any patch."""
    saved = _SAVED.get((id(obj), name))
    value = getattr(obj, name, None) if saved is None or saved[2] is _MISSING else saved[2]
    # An inherited attribute (nothing saved of its own) reads the patched value: Liger's records the stock one.
    return getattr(value, "_liger_stock", value)


def revert_liger_kernel_patches() -> None:
    """Restore every class attribute and module function a patch replaced (live models stay patched)."""
    for obj, name, old in reversed(list(_SAVED.values())):
        if old is _MISSING:
            delattr(obj, name)
        else:
            setattr(obj, name, old)
    _SAVED.clear()


def _check_transformers() -> None:
    try:
        import transformers
        from packaging.version import Version
    except ImportError as e:
        raise ImportError(
            f'liger_core.transformers needs transformers >= {MIN_TRANSFORMERS}: pip install "liger-core[transformers]"'
        ) from e

    if Version(transformers.__version__) < Version(MIN_TRANSFORMERS):
        raise ImportError(
            f"liger_core.transformers needs transformers >= {MIN_TRANSFORMERS}; found {transformers.__version__} "
            f'(pip install -U "transformers>={MIN_TRANSFORMERS}")'
        )


def family_available(model_type: str) -> bool:
    """Whether the installed transformers has this family's modeling module."""
    try:
        return importlib.util.find_spec(FAMILIES[_canonical(model_type)].modeling) is not None
    except ModuleNotFoundError:  # not even its package (transformers.models.<module>)
        return False


def _canonical(model_type: str) -> str:
    return ALIASES.get(model_type, model_type)


def _modeling(model_type: str, fam: Family):
    try:
        return importlib.import_module(fam.modeling)
    except ModuleNotFoundError as e:
        import transformers

        raise ImportError(
            f"transformers {transformers.__version__} has no model type {model_type!r} ({fam.modeling} not found); "
            f'a newer transformers release has it (pip install -U "transformers")'
        ) from e


def _classes(mod, names) -> list[type]:
    return [layers.stock_class(getattr(mod, n)) for n in names if isinstance(getattr(mod, n, None), type)]


def _mlp_class(stock: type, kind: str) -> type:
    if kind == "phi3":
        return layers.phi3_mlp_class(stock)
    if kind == "relu_squared":
        return layers.relu_squared_mlp_class(stock)
    if kind == "falcon_h1":
        return layers.gated_mlp_class(stock, "swiglu", multipliers=True)
    return layers.gated_mlp_class(stock, kind)


def _apply(model_type: str, flags: dict[str, bool], model: nn.Module | None, config: Any = None, **sub) -> None:
    """Patch ``model_type``'s classes as ``flags`` say (and ``model``'s modules); ``config``: the model's
    config when known without a model (composites then patch their language model's family too)."""
    fam = FAMILIES[model_type]
    on = {name for name, value in flags.items() if value}
    if "cross_entropy" in on and "fused_linear_cross_entropy" in on:
        raise ValueError(
            "cross_entropy=True and fused_linear_cross_entropy=True are exclusive: fused linear cross-entropy "
            "already computes the loss without logits; pick one"
        )
    for name, why in fam.unavailable:
        if name in on:
            raise ValueError(f"{name}=True is not available for model type {model_type!r}: {why}")
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be a transformers PreTrainedModel; got {type(model).__name__}")
    _check_transformers()
    mod = _modeling(model_type, fam)

    # Liger class for each stock class to swap, built first so a missing op fails before any change.
    swaps: dict[type, type] = {}
    if "rms_norm" in on:
        for stock in _classes(mod, fam.norms):
            swaps[stock] = layers.rms_norm_class(stock, fam.norm.offset, fam.norm.casting_mode, fam.norm.in_place)
        for name, norm in fam.other_norms:
            for stock in _classes(mod, (name,)):
                swaps[stock] = layers.rms_norm_class(stock, norm.offset, norm.casting_mode, norm.in_place)
    if fam.mlp_flag in on:
        for stock in _classes(mod, fam.mlps):
            swaps[stock] = _mlp_class(stock, fam.mlp_kind)
        for name, kind in fam.other_mlps:
            for stock in _classes(mod, (name,)):
                swaps[stock] = _mlp_class(stock, kind)
        for stock in _classes(mod, fam.experts):
            swaps[stock] = layers.experts_class(stock)
        for stock in _classes(mod, fam.scaled_input_moes):
            swaps[stock] = layers.scaled_input_moe_class(stock)
        for name, layout in fam.clamped_experts:
            for stock in _classes(mod, (name,)):
                swaps[stock] = layers.clamped_experts_class(stock, layout)
    vision_ln = None
    if "layer_norm" in on:
        for name, offset in fam.layer_norms:
            for stock in _classes(mod, (name,)):
                swaps[stock] = layers.layer_norm_class(stock, offset)
        if fam.vision_layer_norm:
            vision_ln = layers.layer_norm_class(nn.LayerNorm)
    ropes: dict[str, Callable] = {}
    if "rope" in on:
        # apply_multimodal_rotary_pos_emb: Qwen2-VL and Qwen2.5-VL before transformers merged the
        # M-RoPE sections inside the rotary embedding module.
        for name, kind in (
            (fam.rope_fn, fam.rope),
            ("apply_multimodal_rotary_pos_emb", fam.mrope and "mrope"),
            *fam.other_ropes,
        ):
            stock_fn = _stock_value(mod, name)
            if kind is not None and callable(stock_fn):
                ropes[name] = layers.rope_function(stock_fn, kind)
    heads: dict[type, Callable] = {}
    if "fused_linear_cross_entropy" in on:
        for head in _classes(mod, fam.heads):
            heads[head] = make_forward(fam.logits, _stock_value(head, "forward"))
    layer_forwards: dict[type, Callable] = {}
    # The fused norm is the family's RMSNorm computed by the op: only where rms_norm swaps that norm in.
    if FUSED_ADD in on and "rms_norm" in on:
        for cls in _classes(mod, fam.decoder_layers):
            layer_forwards[cls] = layers.decoder_layer_forward(cls, _stock_value(cls, "forward"), fam.layer_pattern)
    subs = _sub_families(model_type, fam, model, config, on, sub)

    for stock, liger in swaps.items():
        _set(mod, stock.__name__, liger)
    if vision_ln is not None and getattr(mod, "LayerNorm", None) in (nn.LayerNorm, vision_ln):
        _set(mod, "LayerNorm", vision_ln)  # a module that imports LayerNorm by name builds Liger's
    for name, fn in ropes.items():
        _set(mod, name, fn)
    if "cross_entropy" in on:
        _patch_cross_entropy()
    for head, forward in heads.items():
        _set(head, "forward", forward)
    for cls, forward in layer_forwards.items():
        _set(cls, "forward", forward)  # class-level: live models of the family get it too

    if model is not None:
        stock_ropes = {_stock_value(mod, name): fn for name, fn in ropes.items()}
        for module in model.modules():
            liger = swaps.get(layers.stock_class(type(module)))
            if liger is None and vision_ln is not None and type(module) is nn.LayerNorm:
                liger = vision_ln
            if liger is not None and type(module) is not liger:
                module.__class__ = liger
                layers.prepare_live(module)  # what the Liger __init__ decides for a module built after the patch
            rotary = module.__dict__.get("rotary_fn")
            if rotary is not None and rotary in stock_ropes:
                # transformers 5.0 attention modules keep a reference to the RoPE function (unused by
                # forward); point it at Liger's, or pickling the model finds two functions by one name.
                module.rotary_fn = stock_ropes[rotary]
        for head, forward in heads.items():
            # The class is patched above; an instance may carry its own bound forward too. Only a bound stock
            # forward is replaced: a wrapper installed on the instance (TRL's fused LM head, accelerate's
            # mixed-precision wrapper) is kept, or the patch would silently drop what it adds.
            own = model.__dict__.get("forward")
            if isinstance(model, head) and getattr(own, "__func__", None) in (_stock_value(head, "forward"), forward):
                model.forward = MethodType(forward, model)
    for fn, kwargs in subs:
        fn(**kwargs)
    _patch_compiled_causal_mask()


def _export_check(stock: Callable) -> Callable:
    """transformers' ``is_torchdynamo_exporting`` reading ``torch.export``'s flag as a value, which Dynamo traces
    as it is (torch's own ``is_exporting()`` is folded to True by Dynamo before torch 2.14)."""

    def is_torchdynamo_exporting() -> bool:
        return torch.compiler._is_exporting_flag

    return layers.carry_stock_metadata(is_torchdynamo_exporting, stock)


def _patch_compiled_causal_mask() -> None:
    """Let compiled models skip the materialised causal mask where eager ones do.

    Two checks in transformers' mask building read tensor values, so under torch.compile they answer "build a
    (batch, 1, seq, seq) mask" and SDPA runs masked (on an H200, LLaMA-3.2-1B's attention took 87 ms a step
    compiled against 32 ms eager):
    - the packed-sequence check on the position ids, when no attention mask is given (a training batch):
      `causal_lm.packed_sequence_check` answers it without reading when the patched model numbered the
      positions itself;
    - with no padding mask and as many queries as keys, transformers (5.2x) calls SDPA with ``is_causal=True``
      unless ``is_torchdynamo_exporting()`` says an export is tracing, and before torch 2.14 Dynamo folds
      ``torch.compiler.is_exporting()`` to True in every compiled frame. Reading the export flag itself gives
      the answer torch 2.14's Dynamo gives. Older transformers never skip while compiling (they test
      ``is_tracing``); nothing is changed there.
    """
    from transformers import masking_utils

    stock_check = getattr(masking_utils, "find_packed_sequence_indices", None)
    if stock_check is not None and _stock_value(masking_utils, "find_packed_sequence_indices") is stock_check:
        _set(masking_utils, "find_packed_sequence_indices", packed_sequence_check(stock_check))
    if not hasattr(masking_utils, "is_torchdynamo_exporting") or not hasattr(torch.compiler, "_is_exporting_flag"):
        return
    if _stock_value(masking_utils, "is_torchdynamo_exporting") is not masking_utils.is_torchdynamo_exporting:
        return  # done already
    _set(masking_utils, "is_torchdynamo_exporting", _export_check(masking_utils.is_torchdynamo_exporting))


def _sub_families(model_type: str, fam: Family, model, config, on: set[str], sub: dict) -> list[tuple[Callable, dict]]:
    """For a composite family: (patch, keyword arguments) of its language model's and vision tower's
    families, from the model's config (none without a model or config)."""
    if not fam.composite:
        if sub:
            raise TypeError(f"apply_liger_kernel_to_{model_type}() got unexpected keyword arguments {sorted(sub)}")
        return []
    unknown = sorted(set(sub) - set(_ALL_FLAGS))
    if unknown:
        raise TypeError(
            f"apply_liger_kernel_to_{model_type}() got unexpected keyword arguments {unknown}; "
            f"the language model's and vision tower's patches take {list(_ALL_FLAGS)}"
        )
    config = model.config if model is not None and config is None else config
    if config is None:
        return []
    out = []
    for part in ("text_config", "vision_config"):
        sub_type = _canonical(getattr(getattr(config, part, None), "model_type", None) or "")
        if sub_type not in FAMILIES or FAMILIES[sub_type].composite:
            continue
        fn = MODEL_TYPE_TO_APPLY_LIGER_FN[sub_type]
        accepted = inspect.signature(fn).parameters
        # The wrapper's own forward computes the loss: the language model's patch swaps layers only.
        own = {f: f in on for f in ("rms_norm", "layer_norm") if f in fam.flags}
        kwargs = {k: v for k, v in {**own, **sub}.items() if k in accepted}
        kwargs.update({k: False for k in ("cross_entropy", "fused_linear_cross_entropy") if k in accepted})
        out.append((fn, {**kwargs, "model": model}))
    return out


def _patch_cross_entropy() -> None:
    """Route transformers' loss functions through Liger's cross-entropy (logits still materialised).

    Replaces ``transformers.loss.loss_utils.fixed_cross_entropy`` (what ``ForCausalLMLoss`` calls),
    not torch's ``cross_entropy``, so nothing outside transformers' losses changes.
    """
    from transformers.loss import loss_utils

    liger_ce = F.liger_cross_entropy

    def fixed_cross_entropy(source, target, num_items_in_batch=None, ignore_index: int = -100, **kwargs):
        reduction = "sum" if num_items_in_batch is not None else "mean"
        loss = liger_ce(source, target, ignore_index=ignore_index, reduction=reduction)
        if reduction == "sum":
            if torch.is_tensor(num_items_in_batch):
                num_items_in_batch = num_items_in_batch.to(loss.device)
            loss = loss / num_items_in_batch
        return loss

    stock = _stock_value(loss_utils, "fixed_cross_entropy")
    _set(loss_utils, "fixed_cross_entropy", layers.carry_stock_metadata(fixed_cross_entropy, stock))


_ALL_FLAGS = ("rope", "cross_entropy", "fused_linear_cross_entropy", "rms_norm", "layer_norm", *MLP_FLAGS, FUSED_ADD)

# What each flag swaps, for the docstrings.
_FLAG_DOC = {
    "rope": "swap the RoPE function ({rope_fn}{mrope}) for Liger's",
    "cross_entropy": "compute the stock loss with Liger's cross-entropy (logits still materialised)",
    "fused_linear_cross_entropy": (
        "{heads}.forward skips the logits under training with labels and uses fused linear "
        "cross-entropy. Exclusive with ``cross_entropy``"
    ),
    "rms_norm": "swap {norms} for Liger's RMSNorm",
    "layer_norm": "swap {layer_norms} for Liger's LayerNorm",
    "swiglu": "swap {mlps} for Liger's swiglu",
    "geglu": "swap {mlps} for Liger's geglu",
    "relu_squared": "swap {mlps} for Liger's relu_squared MLP",
    FUSED_ADD: (
        "{decoder_layers}.forward adds the attention output to the residual and computes the MLP's norm in one "
        "fused_add_rms_norm call (with rms_norm=True; a no-op without it)"
    ),
}


def _doc(model_type: str, fam: Family) -> str:
    pretty = (fam.heads[0] if fam.heads else fam.module).split("For")[0]
    layer_norms = [n for n, _ in fam.layer_norms] + (
        ["the torch.nn.LayerNorm modules of a live model's vision tower"] if fam.vision_layer_norm else []
    )
    fill = {
        "rope_fn": ", ".join((fam.rope_fn, *(name for name, _ in fam.other_ropes))),
        "mrope": " and apply_multimodal_rotary_pos_emb, Liger's M-RoPE, where transformers has it" if fam.mrope else "",
        "heads": " and ".join(fam.heads) or "(no LM head)",
        "norms": ", ".join([*fam.norms, *(n for n, _ in fam.other_norms)]) or "(none of its own)",
        "layer_norms": ", ".join(layer_norms) or "(none of its own)",
        "mlps": ", ".join(
            [
                *fam.mlps,
                *(n for n, _ in fam.other_mlps),
                *fam.experts,
                *fam.scaled_input_moes,
                *(n for n, _ in fam.clamped_experts),
            ]
        )
        or "(none of its own)",
        "decoder_layers": " and ".join(fam.decoder_layers) or "(no decoder layer)",
    }
    defaults = fam.defaults
    args = []
    for flag in fam.flags:
        why = dict(fam.unavailable).get(flag)
        text = f"not available yet: {why}" if why else _FLAG_DOC[flag].format(**fill)
        if fam.composite and flag in ("rms_norm", "layer_norm"):
            text += " (and passed to the language model's and vision tower's patches)"
        args.append(f"        {flag}: {text}. Default {defaults[flag]}.")
    args.append("        model: a model already built: its modules and forward are converted too.")
    if fam.composite:
        args.append(
            "        **kwargs: flags for the language model's and vision tower's own patches (rope=, swiglu=, ...),"
            "\n            applied given ``model=`` (or by apply_liger_kernel_to_instance and the Auto classes)."
        )
    composite = (
        "\n    Its language model and vision tower are other families (``config.text_config``,\n"
        "    ``config.vision_config``): given ``model=``, their own patches are applied to it too.\n"
        if fam.composite
        else ""
    )
    lacks = f"\n    Not patched yet (the catalogue lacks it): {fam.lacks}.\n" if fam.lacks else ""
    return f"""Use Liger's kernels in transformers' {pretty} models (model_type {model_type!r}).
{composite}{lacks}
    Args:
{chr(10).join(args)}

    Every config the stock classes serve still builds and runs: a module whose config or inputs Liger's
    kernel does not fit (another activation, float64, the meta device) runs the stock computation and
    warns once per reason (``LigerStockFallbackWarning``).
    """


def _make_apply(model_type: str) -> Callable:
    fam = FAMILIES[model_type]
    defaults = fam.defaults
    params = [
        inspect.Parameter(f, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults[f], annotation="bool")
        for f in fam.flags
    ]
    params.append(
        inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation="nn.Module | None")
    )
    if fam.composite:
        params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD, annotation="bool"))
    signature = inspect.Signature(params, return_annotation=None)

    def apply(*args, **kwargs) -> None:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        model = values.pop("model")
        sub = values.pop("kwargs", {})
        _apply(model_type, values, model, **sub)

    apply.__signature__ = signature
    apply.__name__ = apply.__qualname__ = f"apply_liger_kernel_to_{model_type}"
    apply.__module__ = __name__
    apply.__doc__ = _doc(model_type, fam)
    return apply


# The public functions, one per family, by liger-kernel's names.
for _model_type in FAMILIES:
    globals()[f"apply_liger_kernel_to_{_model_type}"] = _make_apply(_model_type)
del _model_type

MODEL_TYPE_TO_APPLY_LIGER_FN: dict[str, Callable] = {
    **{t: globals()[f"apply_liger_kernel_to_{t}"] for t in FAMILIES},
    **{alias: globals()[f"apply_liger_kernel_to_{t}"] for alias, t in ALIASES.items()},
}


def unknown_model_type(model_type: object) -> ValueError:
    """The error for a model type no patch covers, listing those that are."""
    return ValueError(
        f"no Liger patch for model_type {model_type!r}; supported model types: {', '.join(SUPPORTED)} "
        f"(and the text configs {', '.join(sorted(ALIASES))})"
    )


def _split_flags(fn: Callable, kwargs: dict) -> dict:
    """The flags ``fn`` takes from ``kwargs``: another family's flags (``geglu`` for a SwiGLU model, as
    a trainer's one config for every model passes them) are dropped; anything else is an error."""
    params = inspect.signature(fn).parameters
    unknown = sorted(set(kwargs) - set(_ALL_FLAGS) - {"model"})
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        raise TypeError(f"unknown Liger patch argument(s) {unknown}; patches take {list(_ALL_FLAGS)}")
    composite = any(p.kind is p.VAR_KEYWORD for p in params.values())
    return {k: v for k, v in kwargs.items() if k != "model" and (k in params or composite)}


def apply_for_config(config: Any, model: nn.Module | None = None, **kwargs: bool) -> None:
    """Patch the family of ``config.model_type`` (and, for LLaVA-like wrappers, of its language model and
    vision tower); ``model=``: convert that live model too. Raises ValueError for an unknown model type."""
    model_type = getattr(config, "model_type", None)
    fn = MODEL_TYPE_TO_APPLY_LIGER_FN.get(model_type)
    if fn is None:
        raise unknown_model_type(model_type)
    values = _split_flags(fn, kwargs)
    fam_type = _canonical(model_type)
    if FAMILIES[fam_type].composite:
        bound = inspect.signature(fn).bind_partial(**values)
        bound.apply_defaults()
        own = dict(bound.arguments)
        own.pop("model", None)
        sub = own.pop("kwargs", {})
        _apply(fam_type, own, model, config=config, **sub)
    else:
        fn(model=model, **values)


def apply_liger_kernel_to_instance(model: nn.Module, **kwargs: bool) -> None:
    """Patch a model already built, picking its family from ``model.config.model_type``.

    What Hugging Face's Trainer does with liger-kernel (``use_liger_kernel=True``), for this
    project's kernels: call it on the model before handing it to ``Trainer``/``SFTTrainer``.
    ``kwargs`` are the family's flags (``rope=False``, ...); flags of other families (``geglu``
    for a SwiGLU model) are ignored, so one set of flags serves every model. The family's classes
    are patched too, so models built afterwards (a reference model, say) get Liger's layers.
    Raises ValueError naming the supported model types when the model's is not one of them.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a transformers PreTrainedModel; got {type(model).__name__}")
    config = getattr(model, "config", None)
    if config is None:
        raise unknown_model_type(None)
    apply_for_config(config, model=model, **kwargs)


# liger-kernel's private name, which Hugging Face's Trainer imports from it.
_apply_liger_kernel_to_instance = apply_liger_kernel_to_instance


def family_ops(model_type: str) -> dict[str, list[str]]:
    """For ``liger families``: each flag of the family's patch -> the catalogue ops it uses ([] where the flag
    is not available yet)."""
    fam = FAMILIES[_canonical(model_type)]
    unavailable = dict(fam.unavailable)
    ops = {
        "rope": (
            ["llama4_rope"]
            if fam.rope in ("complex", "complex_heads_major", "interleaved")
            else ["rope", *(["qwen2vl_mrope"] if fam.mrope else [])]
        )
        if fam.rope
        else [],
        "layer_norm": ["layer_norm"],
        "fused_linear_cross_entropy": ["fused_linear_cross_entropy"] if fam.heads else [],
    }
    mlp = fam.mlp_flag
    if mlp is not None:
        # One gate_up_proj: the fused op (swiglu where the projection is a tensor-parallel DTensor).
        ops[mlp] = [mlp, *(["fused_gate_up_swiglu"] if fam.mlp_kind == "phi3" else [])]
        if (fam.experts or fam.scaled_input_moes) and mlp == "swiglu":
            ops[mlp].append("fused_moe")
        if fam.clamped_experts:
            ops[mlp] = ["fused_moe_clamped_swiglu"]
    return {flag: [] if flag in unavailable else ops.get(flag, [flag]) for flag in fam.flags}
