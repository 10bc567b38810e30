"""liger-ops-xpu: the Liger op interface as Triton kernels tuned for Intel GPUs."""

from liger_ops_xpu.__about__ import __version__
from liger_ops_xpu.backend import BACKEND

__all__ = ["BACKEND", "__version__"]
