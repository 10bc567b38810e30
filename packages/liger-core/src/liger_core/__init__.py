"""liger-core: the Liger op interface, dispatch, reference implementations and integrations."""

from liger_core.__about__ import __version__
from liger_core.backend import Backend, LigerBackendError
from liger_core.device import infer_device
from liger_core.functional import (
    liger_dyt,
    liger_fused_add_rms_norm,
    liger_geglu,
    liger_group_norm,
    liger_layer_norm,
    liger_multimodal_rotary_pos_emb,
    liger_poly_norm,
    liger_qwen2vl_mrope,
    liger_rms_norm,
    liger_rope,
    liger_rotary_pos_emb,
    liger_softmax,
    liger_sparsemax,
    liger_swiglu,
)
from liger_core.interface import CATALOGUE, INTERFACE_VERSION
from liger_core.nn import (
    LigerDyT,
    LigerFusedAddRMSNorm,
    LigerGEGLUMLP,
    LigerGroupNorm,
    LigerLayerNorm,
    LigerPolyNorm,
    LigerRMSNorm,
    LigerSoftmax,
    LigerSparsemax,
    LigerSwiGLUMLP,
)
from liger_core.registry import LigerFallbackWarning, register_backend

__all__ = [
    "CATALOGUE",
    "INTERFACE_VERSION",
    "Backend",
    "LigerBackendError",
    "LigerDyT",
    "LigerFallbackWarning",
    "LigerFusedAddRMSNorm",
    "LigerGEGLUMLP",
    "LigerGroupNorm",
    "LigerLayerNorm",
    "LigerPolyNorm",
    "LigerRMSNorm",
    "LigerSoftmax",
    "LigerSparsemax",
    "LigerSwiGLUMLP",
    "__version__",
    "infer_device",
    "liger_dyt",
    "liger_fused_add_rms_norm",
    "liger_geglu",
    "liger_group_norm",
    "liger_layer_norm",
    "liger_multimodal_rotary_pos_emb",
    "liger_poly_norm",
    "liger_qwen2vl_mrope",
    "liger_rms_norm",
    "liger_rope",
    "liger_rotary_pos_emb",
    "liger_softmax",
    "liger_sparsemax",
    "liger_swiglu",
    "register_backend",
]
