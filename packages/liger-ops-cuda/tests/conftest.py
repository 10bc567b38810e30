"""Run the kernels natively on an NVIDIA GPU, else in the Triton interpreter on CPU."""

import os

import torch

if not torch.cuda.is_available():
    # Must be set before triton is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from liger_core.registry import register_backend  # noqa: E402
from liger_ops_cuda import BACKEND  # noqa: E402

register_backend(BACKEND)
os.environ.setdefault("LIGER_CONFORMANCE_BACKEND", BACKEND.name)

pytest_plugins = ["liger_core.conformance.plugin"]
