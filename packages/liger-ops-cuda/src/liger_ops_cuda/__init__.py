"""liger-ops-cuda: the Liger op interface as Triton kernels tuned for NVIDIA GPUs."""

from liger_ops_cuda.__about__ import __version__
from liger_ops_cuda.backend import BACKEND

__all__ = ["BACKEND", "__version__"]
