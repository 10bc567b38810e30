"""`AutoLigerKernelForCausalLM` and `AutoLigerKernelForImageTextToText`: transformers' Auto classes that
apply the family's Liger patch first (class level, so every model the call builds gets Liger's layers)
and convert the built model (the ``torch.nn.LayerNorm`` modules of vision towers, which only a live
model's patch reaches)."""

from __future__ import annotations

from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

from liger_core.transformers.monkey_patch import (
    _ALL_FLAGS,
    MODEL_TYPE_TO_APPLY_LIGER_FN,
    apply_for_config,
    unknown_model_type,
)

# AutoConfig.from_pretrained arguments that say where and how to read the config.
_CONFIG_KWARGS = (
    "cache_dir",
    "force_download",
    "local_files_only",
    "proxies",
    "revision",
    "subfolder",
    "token",
    "trust_remote_code",
)


def _split(model_type: str, kwargs: dict) -> tuple[dict, dict]:
    """(the patch's flags, the rest for transformers); ValueError listing the supported types for an unknown one."""
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        raise unknown_model_type(model_type)
    ours = {k: v for k, v in kwargs.items() if k in _ALL_FLAGS}
    return ours, {k: v for k, v in kwargs.items() if k not in ours}


class _LigerAuto:
    """Mixin: ``from_pretrained``/``from_config`` of the stock Auto class ``_stock``, patched first."""

    _stock: type

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        config = kwargs.get("config")
        if config is None or isinstance(config, str):
            where = config if isinstance(config, str) else pretrained_model_name_or_path
            config = AutoConfig.from_pretrained(where, **{k: kwargs[k] for k in _CONFIG_KWARGS if k in kwargs})
        ours, rest = _split(config.model_type, kwargs)
        apply_for_config(config, **ours)
        model = cls._stock.from_pretrained(pretrained_model_name_or_path, *model_args, **rest)
        apply_for_config(model.config, model=model, **ours)
        return model

    @classmethod
    def from_config(cls, config, **kwargs):
        ours, rest = _split(config.model_type, kwargs)
        apply_for_config(config, **ours)
        model = cls._stock.from_config(config, **rest)
        apply_for_config(model.config, model=model, **ours)
        return model


class AutoLigerKernelForCausalLM(_LigerAuto, AutoModelForCausalLM):
    """Build any patched family's causal LM with Liger's kernels.

    The patch is picked from the config's ``model_type``; keyword arguments the patches take
    (``rope``, ``swiglu``, ``fused_linear_cross_entropy``, ...) go to it (another family's flags
    are ignored), the rest to transformers. An unknown ``model_type`` is a ValueError that lists
    the supported ones.
    """

    _stock = AutoModelForCausalLM


class AutoLigerKernelForImageTextToText(_LigerAuto, AutoModelForImageTextToText):
    """``AutoModelForImageTextToText`` with Liger's kernels: the multimodal families (LLaVA, Mllama,
    Gemma 3/4, PaliGemma, Qwen2/2.5/3-VL, GLM-4V, InternVL, SmolVLM, ...), their language model's and
    vision tower's families included. Arguments as `AutoLigerKernelForCausalLM`."""

    _stock = AutoModelForImageTextToText
