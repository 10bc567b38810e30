"""Run the kernels natively on an Intel GPU, else in the Triton interpreter on CPU."""

import os

import torch

if not (hasattr(torch, "xpu") and torch.xpu.is_available()):
    # Must be set before triton is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from liger_core.registry import register_backend

from liger_ops_xpu import BACKEND

register_backend(BACKEND)
os.environ.setdefault("LIGER_CONFORMANCE_BACKEND", BACKEND.name)

pytest_plugins = ["liger_core.conformance.plugin"]
