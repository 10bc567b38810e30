"""`AutoLigerKernelForCausalLM`: ``AutoModelForCausalLM`` that applies the family's Liger patch first."""

from __future__ import annotations

import inspect
import warnings

from transformers import AutoConfig, AutoModelForCausalLM

from liger_core.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

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
    """(the patch's keyword arguments, the rest for transformers); warns for an unknown model_type."""
    fn = MODEL_TYPE_TO_APPLY_LIGER_FN.get(model_type)
    if fn is None:
        warnings.warn(
            f"AutoLigerKernelForCausalLM: no Liger patch for model_type {model_type!r}; loading the stock model "
            f"(patched families: {sorted(MODEL_TYPE_TO_APPLY_LIGER_FN)})",
            stacklevel=3,
        )
        return {}, kwargs
    params = inspect.signature(fn).parameters
    ours = {k: v for k, v in kwargs.items() if k in params and k != "model"}
    return ours, {k: v for k, v in kwargs.items() if k not in ours}


class AutoLigerKernelForCausalLM(AutoModelForCausalLM):
    """Build any patched family's causal LM with Liger's kernels.

    The patch is picked from the config's ``model_type``; keyword arguments the patch takes
    (``rope``, ``swiglu``, ``fused_linear_cross_entropy``, ...) go to it, the rest to transformers.
    """

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        config = kwargs.get("config")
        if config is None or isinstance(config, str):
            where = config if isinstance(config, str) else pretrained_model_name_or_path
            config = AutoConfig.from_pretrained(where, **{k: kwargs[k] for k in _CONFIG_KWARGS if k in kwargs})
        ours, rest = _split(config.model_type, kwargs)
        if ours or config.model_type in MODEL_TYPE_TO_APPLY_LIGER_FN:
            MODEL_TYPE_TO_APPLY_LIGER_FN[config.model_type](**ours)
        return AutoModelForCausalLM.from_pretrained(pretrained_model_name_or_path, *model_args, **rest)

    @classmethod
    def from_config(cls, config, **kwargs):
        ours, rest = _split(config.model_type, kwargs)
        if config.model_type in MODEL_TYPE_TO_APPLY_LIGER_FN:
            MODEL_TYPE_TO_APPLY_LIGER_FN[config.model_type](**ours)
        return AutoModelForCausalLM.from_config(config, **rest)
