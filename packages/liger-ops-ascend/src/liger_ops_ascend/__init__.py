"""liger-ops-ascend: the Liger op interface as triton-ascend kernels for Huawei Ascend NPUs."""

from liger_ops_ascend.__about__ import __version__
from liger_ops_ascend.backend import BACKEND

__all__ = ["BACKEND", "__version__"]
