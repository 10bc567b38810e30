"""liger-core: the Liger op interface, dispatch, reference implementations and integrations.

The public API: the nn modules (``LigerRMSNorm``...) and functional entry points
(``liger_rms_norm``...) under Liger Kernel's names, the catalogue of op declarations, and what a
vendor package needs (``Backend``).
"""

from liger_core import compile as _compile
from liger_core import functional as _functional
from liger_core import nn as _nn
from liger_core.__about__ import __version__
from liger_core.backend import Backend, LigerBackendError
from liger_core.device import infer_device
from liger_core.functional import *  # noqa: F403 (liger_<op>: every functional entry point)
from liger_core.interface import CATALOGUE, INTERFACE_VERSION
from liger_core.memory_budget import fused_linear_memory_budget
from liger_core.nn import *  # noqa: F403 (Liger<Module>: every nn module)
from liger_core.registry import LigerFallbackWarning, register_backend

__all__ = [
    "CATALOGUE",
    "INTERFACE_VERSION",
    "Backend",
    "LigerBackendError",
    "LigerFallbackWarning",
    "__version__",
    "fused_linear_memory_budget",
    "infer_device",
    "register_backend",
    *_functional.__all__,
    *_nn.__all__,
]

# torch.compile: while Dynamo traces, dispatch hands out the liger:: custom ops (liger_core.compile).
# Here, not in the registry: the package's __init__ runs before any of its modules is used, and
# the registry stays below compile (compile uses the registry; the registry never imports compile).
_compile.install_when_dynamo_loads()
