"""The backend object liger-core discovers through the `liger.backends` entry point: every op
implementation of this package (marked ``@implements``), at the interface version they reach."""

from __future__ import annotations

from liger_core.backend import triton_runtime, vendor_backend

from liger_ops_xpu.__about__ import __version__

# Distributions that install the `triton` module for Intel GPUs, most common first.
_TRITON_DISTRIBUTIONS = ("pytorch-triton-xpu", "triton-xpu", "triton")

BACKEND = vendor_backend(
    "xpu",
    "liger-ops-xpu",
    __version__,
    ("xpu",),
    __package__,
    runtime=lambda: triton_runtime(*_TRITON_DISTRIBUTIONS),
)
