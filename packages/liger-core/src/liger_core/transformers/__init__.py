"""Hugging Face transformers integration: ``apply_liger_kernel_to_<family>`` and `AutoLigerKernelForCausalLM`.

Needs ``transformers>=5.0`` (``pip install "liger-core[transformers]"``). Supported model types:
llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gemma, gemma2, gemma3_text, phi3, granite, olmo2.
"""

from liger_core.transformers.layers import LigerStockFallbackWarning
from liger_core.transformers.monkey_patch import (
    MIN_TRANSFORMERS,
    MODEL_TYPE_TO_APPLY_LIGER_FN,
    apply_liger_kernel_to_gemma,
    apply_liger_kernel_to_gemma2,
    apply_liger_kernel_to_gemma3_text,
    apply_liger_kernel_to_granite,
    apply_liger_kernel_to_llama,
    apply_liger_kernel_to_mistral,
    apply_liger_kernel_to_mixtral,
    apply_liger_kernel_to_olmo2,
    apply_liger_kernel_to_phi3,
    apply_liger_kernel_to_qwen2,
    apply_liger_kernel_to_qwen3,
    apply_liger_kernel_to_qwen3_moe,
    revert_liger_kernel_patches,
)


def __getattr__(name: str):
    # AutoLigerKernelForCausalLM imports transformers' auto classes (slow); load it on first use.
    if name == "AutoLigerKernelForCausalLM":
        from liger_core.transformers.auto_model import AutoLigerKernelForCausalLM

        return AutoLigerKernelForCausalLM
    raise AttributeError(name)


__all__ = [
    "MIN_TRANSFORMERS",
    "MODEL_TYPE_TO_APPLY_LIGER_FN",
    "AutoLigerKernelForCausalLM",
    "LigerStockFallbackWarning",
    "apply_liger_kernel_to_gemma",
    "apply_liger_kernel_to_gemma2",
    "apply_liger_kernel_to_gemma3_text",
    "apply_liger_kernel_to_granite",
    "apply_liger_kernel_to_llama",
    "apply_liger_kernel_to_mistral",
    "apply_liger_kernel_to_mixtral",
    "apply_liger_kernel_to_olmo2",
    "apply_liger_kernel_to_phi3",
    "apply_liger_kernel_to_qwen2",
    "apply_liger_kernel_to_qwen3",
    "apply_liger_kernel_to_qwen3_moe",
    "revert_liger_kernel_patches",
]
