"""The backend object liger-core discovers through the `liger.backends` entry point: every
`implements`-marked Function of this package, at the interface version they add up to."""

from __future__ import annotations

from liger_core.backend import triton_runtime, vendor_backend
from liger_ops_cuda.__about__ import __version__

BACKEND = vendor_backend(
    "cuda",
    "liger-ops-cuda",
    __version__,
    ("cuda",),
    __package__,
    runtime=lambda: triton_runtime("triton", "pytorch-triton"),
)
