"""What the drop-in does not offer: one error naming the missing symbol and this project's equivalent."""

from __future__ import annotations

# Upstream names with no counterpart here -> what to use instead (shown in the error).
EQUIVALENTS: dict[str, str] = {
    "liger_kernel.transformers.LigerMLP": "liger_core.nn.LigerSwiGLUMLP / LigerGEGLUMLP (gated MLPs)",
    "liger_kernel.transformers.LigerFalconH1MLP": "apply_liger_kernel_to_falcon_h1 (patches FalconH1MLP)",
    "liger_kernel.transformers.LigerFalconH1SwiGLUMLP": "apply_liger_kernel_to_falcon_h1 (patches FalconH1MLP)",
    "liger_kernel.transformers.LigerBlockSparseTop2MLP": "liger_core.nn.LigerExperts (fused MoE experts)",
    "liger_kernel.transformers.LigerQwen3MoeSwiGLUMLP": "apply_liger_kernel_to_qwen3_moe (patches Qwen3MoeMLP)",
    "liger_kernel.transformers.LigerRMSNormForMuseGlimmer": "apply_liger_kernel_to_muse_glimmer",
    "liger_kernel.transformers.LigerRMSNormForMuseGlimmerTextCentered": "apply_liger_kernel_to_muse_glimmer",
    "liger_kernel.transformers.LigerSwiGLUMLPForMuseGlimmer": "apply_liger_kernel_to_muse_glimmer",
    "liger_kernel.transformers.liger_llama4_vision_rotary_pos_emb": (
        "apply_liger_kernel_to_llama4 (the text RoPE; the vision RoPE is not served yet)"
    ),
    "liger_kernel.transformers.functional.liger_mhc_apply": "liger_core.nn.LigerMHC",
    "liger_kernel.transformers.functional.liger_mhc_forward": "liger_core.nn.LigerMHC",
    "liger_kernel.transformers.functional.liger_fused_linear_scaled_cross_entropy_tp": (
        "liger_core.functional (fused_linear_scaled_cross_entropy op) under liger_core.distributed"
    ),
}


def missing(module: str, name: str) -> AttributeError:
    """The error for ``module.name`` that the drop-in does not provide."""
    if name.startswith("__"):  # dunder probes (copy, pickle, IDEs): plain AttributeError
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    what = f"{module}.{name}"
    instead = EQUIVALENTS.get(what)
    hint = (
        f"use {instead}"
        if instead
        else "see `liger families` and liger_core's nn, functional and transformers modules for what liger-core serves"
    )
    return AttributeError(
        f"{what} is liger-kernel's, and liger-kernel-dropin (the liger_kernel name served by liger-core) does not "
        f"offer it: {hint}"
    )
