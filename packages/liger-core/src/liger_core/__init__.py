"""liger-core: the Liger op interface, dispatch, reference implementations and integrations.

The public API: the nn modules (``LigerRMSNorm``...) and functional entry points
(``liger_rms_norm``...) under Liger Kernel's names, the catalogue of op declarations, and what a
vendor package needs (``Backend``).
"""

from liger_core import functional as _functional
from liger_core import nn as _nn
from liger_core.__about__ import __version__
from liger_core.backend import Backend, LigerBackendError
from liger_core.device import infer_device
from liger_core.functional import *  # noqa: F403 (liger_<op>: every functional entry point)
from liger_core.interface import CATALOGUE, INTERFACE_VERSION
from liger_core.nn import *  # noqa: F403 (Liger<Module>: every nn module)
from liger_core.registry import LigerFallbackWarning, register_backend

__all__ = [
    "CATALOGUE",
    "INTERFACE_VERSION",
    "Backend",
    "LigerBackendError",
    "LigerFallbackWarning",
    "__version__",
    "infer_device",
    "register_backend",
    *_functional.__all__,
    *_nn.__all__,
]
