"""liger-core: the Liger op interface, dispatch, reference implementations and integrations."""

from liger_core.__about__ import __version__
from liger_core.backend import Backend, LigerBackendError
from liger_core.device import infer_device
from liger_core.functional import (
    liger_cross_entropy,
    liger_dyt,
    liger_fused_add_rms_norm,
    liger_fused_linear_cross_entropy,
    liger_fused_linear_jsd,
    liger_group_norm,
    liger_jsd,
    liger_kl_div,
    liger_layer_norm,
    liger_poly_norm,
    liger_rms_norm,
    liger_tvd,
)
from liger_core.interface import CATALOGUE, INTERFACE_VERSION
from liger_core.nn import (
    LigerCrossEntropyLoss,
    LigerDyT,
    LigerFusedAddRMSNorm,
    LigerFusedLinearCrossEntropyLoss,
    LigerFusedLinearJSD,
    LigerGroupNorm,
    LigerJSD,
    LigerKLDIVLoss,
    LigerLayerNorm,
    LigerPolyNorm,
    LigerRMSNorm,
    LigerTVDLoss,
)
from liger_core.registry import LigerFallbackWarning, register_backend

__all__ = [
    "LigerCrossEntropyLoss",
    "LigerFusedLinearCrossEntropyLoss",
    "LigerFusedLinearJSD",
    "LigerJSD",
    "LigerKLDIVLoss",
    "LigerTVDLoss",
    "liger_cross_entropy",
    "liger_fused_linear_cross_entropy",
    "liger_fused_linear_jsd",
    "liger_jsd",
    "liger_kl_div",
    "liger_tvd",
    "CATALOGUE",
    "INTERFACE_VERSION",
    "Backend",
    "LigerBackendError",
    "LigerDyT",
    "LigerFallbackWarning",
    "LigerFusedAddRMSNorm",
    "LigerGroupNorm",
    "LigerLayerNorm",
    "LigerPolyNorm",
    "LigerRMSNorm",
    "__version__",
    "infer_device",
    "liger_dyt",
    "liger_fused_add_rms_norm",
    "liger_group_norm",
    "liger_layer_norm",
    "liger_poly_norm",
    "liger_rms_norm",
    "register_backend",
]
