"""liger-core: the Liger op interface, dispatch, reference implementations and integrations."""

from liger_core.__about__ import __version__
from liger_core.backend import Backend, LigerBackendError
from liger_core.device import infer_device
from liger_core.functional import (
    liger_dyt,
    liger_fused_add_rms_norm,
    liger_group_norm,
    liger_layer_norm,
    liger_poly_norm,
    liger_rms_norm,
)
from liger_core.interface import CATALOGUE, INTERFACE_VERSION
from liger_core.nn import LigerDyT, LigerFusedAddRMSNorm, LigerGroupNorm, LigerLayerNorm, LigerPolyNorm, LigerRMSNorm
from liger_core.registry import LigerFallbackWarning, register_backend

__all__ = [
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
