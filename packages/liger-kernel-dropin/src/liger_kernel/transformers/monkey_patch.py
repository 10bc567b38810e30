"""``liger_kernel.transformers.monkey_patch``: liger-kernel 0.8.5's patch functions, served by liger-core.

Every ``apply_liger_kernel_to_<model_type>`` liger-kernel 0.8.5 has, plus ``_qwen3_5_text`` and
``_qwen3_5_moe_text`` (LLaMA-Factory's v1 plugin calls them; liger-core maps those text configs to
its Qwen3.5 families). Each takes liger-kernel's flag names (``rope``, ``cross_entropy``,
``fused_linear_cross_entropy``, ``rms_norm``, ``layer_norm``, ``swiglu``/``geglu``, ``model``), which
are liger-core's, and returns None. Defaults are liger-core's: where liger-core serves a kernel
liger-kernel 0.8.5 left off by default (the RoPE of GLM-4, Qwen3-Next, Qwen3.5, DeepSeek-V2/V3 and
Gemma 4; the experts of GPT-OSS, DeepSeek-V4 and Qwen3-VL), it is on, and Granite's loss is the
fused linear cross-entropy. Pass the flag to choose.

Given ``model=``, the converted modules also print under liger-kernel's module names
(``LigerRMSNorm(...)``), as liger-kernel's patched modules do.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable

from torch import nn

from liger_core.transformers import monkey_patch as _core

logger = logging.getLogger(__name__)

# liger-kernel 0.8.5's apply_liger_kernel_to_<model_type> functions (its monkey_patch module), and the two
# text-config names LLaMA-Factory's v1 plugin calls.
UPSTREAM_FAMILIES: tuple[str, ...] = (
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v4",
    "exaone4",
    "falcon_h1",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "gemma4",
    "gemma4_text",
    "glm4",
    "glm4v",
    "glm4v_moe",
    "gpt_oss",
    "granite",
    "hunyuan_v1_dense",
    "hunyuan_v1_moe",
    "internvl",
    "llama",
    "llama4",
    "llava",
    "ministral",
    "mistral",
    "mixtral",
    "mllama",
    "muse_glimmer",
    "nemotron",
    "olmo2",
    "olmo3",
    "paligemma",
    "phi3",
    "pixtral",
    "qwen2",
    "qwen2_5_vl",
    "qwen2_vl",
    "qwen3",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_vl",
    "qwen3_vl_moe",
    "smollm3",
    "smolvlm",
)
TEXT_CONFIG_NAMES: tuple[str, ...] = ("qwen3_5_text", "qwen3_5_moe_text")

# liger-core's layer kind -> the module name liger-kernel's patched modules print under.
_UPSTREAM_NAMES = {
    "rms_norm": "LigerRMSNorm",
    "layer_norm": "LigerLayerNorm",
    "swiglu": "LigerSwiGLUMLP",
    "geglu": "LigerGEGLUMLP",
}


def _named(name: str) -> str:
    return name


def name_like_upstream(model: nn.Module | None) -> None:
    """Make the Liger modules of ``model`` print as liger-kernel's do (``LigerRMSNorm(...)``); their class stays
    liger-core's (``isinstance(m, LlamaRMSNorm)`` still holds). A picklable per-instance ``_get_name``."""
    if not isinstance(model, nn.Module):
        return
    for module in model.modules():
        name = _UPSTREAM_NAMES.get(getattr(type(module), "_liger_kind", None))
        if name is not None:
            module._get_name = functools.partial(_named, name)


def _wrap(core_fn: Callable, name: str) -> Callable:
    @functools.wraps(core_fn)
    def apply(*args, **kwargs) -> None:
        core_fn(*args, **kwargs)
        bound = inspect.signature(core_fn).bind_partial(*args, **kwargs)
        name_like_upstream(bound.arguments.get("model"))

    apply.__name__ = apply.__qualname__ = name
    apply.__module__ = __name__
    return apply


for _model_type in (*UPSTREAM_FAMILIES, *TEXT_CONFIG_NAMES):
    _name = f"apply_liger_kernel_to_{_model_type}"
    globals()[_name] = _wrap(_core.MODEL_TYPE_TO_APPLY_LIGER_FN[_model_type], _name)
del _model_type, _name

# model_type -> patch function, as liger-kernel's table (axolotl and LLaMA-Factory look patches up here).
MODEL_TYPE_TO_APPLY_LIGER_FN: dict[str, Callable] = {
    model_type: globals().get(f"apply_liger_kernel_to_{model_type}") or _wrap(fn, f"apply_liger_kernel_to_{model_type}")
    for model_type, fn in _core.MODEL_TYPE_TO_APPLY_LIGER_FN.items()
}


def _apply_liger_kernel_to_instance(model: nn.Module, **kwargs) -> None:
    """liger-kernel's entry point for a built model (transformers' Trainer and verl call it).

    As liger-kernel does: the family comes from ``model.config.model_type``; keyword arguments the family's
    patch does not take are dropped (one config serves every model); a model without a config or of a model
    type no patch covers is left as it is, with a warning (liger-kernel logs it at info level) naming the
    supported types.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    fn = MODEL_TYPE_TO_APPLY_LIGER_FN.get(model_type) if model_type else None
    if fn is None:
        logger.warning("%s; no Liger kernels applied", _core.unknown_model_type(model_type))
        return
    params = inspect.signature(fn).parameters
    composite = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kept = {k: v for k, v in kwargs.items() if k in params or (composite and k in _core._ALL_FLAGS)}
    kept.pop("model", None)
    _core.apply_liger_kernel_to_instance(model, **kept)
    name_like_upstream(model)


# liger-core's public name for the same call.
apply_liger_kernel_to_instance = _apply_liger_kernel_to_instance


def __getattr__(name: str):
    from liger_kernel._surface import missing

    raise missing(__name__, name)
