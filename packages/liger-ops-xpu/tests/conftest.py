"""Run the kernels natively on an Intel GPU, else in the Triton interpreter on CPU.

The source tree's backend is loaded the one way liger-core loads backends that are not
installed, ``LIGER_EXTRA_BACKENDS``, set before anything imports the registry.
"""

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_xpu")
os.environ.setdefault("LIGER_CONFORMANCE_BACKEND", "xpu")
if not (hasattr(torch, "xpu") and torch.xpu.is_available()):
    # Must be set before triton is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest_plugins = ["liger_core.conformance.plugin"]

# Kernel loops must not lean on the interpreter's deprecated array-to-int conversion (an error
# from NumPy 2.4), so that deprecation fails every test here.
_NUMPY_2_4_ERROR = pytest.mark.filterwarnings("error:Conversion of an array with ndim > 0:DeprecationWarning")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(_NUMPY_2_4_ERROR)


@pytest.fixture
def device(conformance_device: str) -> str:
    """Where the vendor-path tests put their tensors: the XPU when present, else the CPU."""
    return conformance_device


@pytest.fixture
def small_chunks(monkeypatch):
    """Lowered caps: rows wider than 64 columns go in 64-wide chunks (the heavy norms' too), 4
    rows per tile, 2 backward programs; so chunked multi-row paths run on small shapes."""
    from liger_ops_xpu import hardware  # after the environment above is set

    for name in ("MAX_FUSED_BLOCK", "MAX_FUSED_BLOCK_HEAVY", "CHUNK_BLOCK"):
        monkeypatch.setattr(hardware, name, 64)
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 256)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
