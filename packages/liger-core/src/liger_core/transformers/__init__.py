"""Hugging Face transformers integration: ``apply_liger_kernel_to_<family>``, `apply_liger_kernel_to_instance`,
`AutoLigerKernelForCausalLM` and `AutoLigerKernelForImageTextToText`.

Needs ``transformers>=5.0`` (``pip install "liger-core[transformers]"``). Supported model types: every
family liger-kernel 0.8.5 patches (`SUPPORTED`; ``liger families`` lists them with the ops each uses).
Families a transformers release lacks raise ImportError naming it when patched.
"""

from liger_core.transformers import monkey_patch as _mp
from liger_core.transformers.layers import LigerStockFallbackWarning
from liger_core.transformers.monkey_patch import (
    ALIASES,
    FAMILIES,
    MIN_TRANSFORMERS,
    MODEL_TYPE_TO_APPLY_LIGER_FN,
    SUPPORTED,
    apply_liger_kernel_to_instance,
    revert_liger_kernel_patches,
)

_AUTO = ("AutoLigerKernelForCausalLM", "AutoLigerKernelForImageTextToText")
_APPLY = tuple(f"apply_liger_kernel_to_{model_type}" for model_type in FAMILIES)
globals().update({name: getattr(_mp, name) for name in _APPLY})


def __getattr__(name: str):
    # The Auto classes import transformers' auto classes (slow); load them on first use.
    if name in _AUTO:
        from liger_core.transformers import auto_model

        return getattr(auto_model, name)
    if name == "register_kernels_hub":
        # Hugging Face's kernels library provider (liger_core.transformers.kernels_hub).
        from liger_core.transformers import kernels_hub

        return kernels_hub.register_kernels_hub
    raise AttributeError(name)


__all__ = [
    "ALIASES",
    "FAMILIES",
    "MIN_TRANSFORMERS",
    "MODEL_TYPE_TO_APPLY_LIGER_FN",
    "SUPPORTED",
    "LigerStockFallbackWarning",
    "apply_liger_kernel_to_instance",
    "register_kernels_hub",
    "revert_liger_kernel_patches",
    *_AUTO,
    *_APPLY,
]
