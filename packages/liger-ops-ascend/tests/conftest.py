"""Run the kernels natively on an Ascend NPU, else in the Triton interpreter on CPU.

The source tree's backend is loaded the way an installed one is (liger-core's registry reads
LIGER_EXTRA_BACKENDS), so the environment is set before anything imports the registry.
"""

import os

# torch autoloads torch_npu when it is installed; without a working CANN that import fails
# and takes `import torch` with it. npu_available() below imports torch_npu itself, guarded.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_ascend")
os.environ.setdefault("LIGER_CONFORMANCE_BACKEND", "ascend")

from liger_core.device import npu_available

if not npu_available():
    # Must be set before triton is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

pytest_plugins = ["liger_core.conformance.plugin"]


@pytest.fixture(scope="session")
def backend(conformance_backend):
    """This package's backend as liger-core's registry loaded and validated it."""
    return conformance_backend


@pytest.fixture(scope="session")
def device(conformance_device):
    return conformance_device


@pytest.fixture
def few_cores(monkeypatch):
    """3 programs: each loops over several row blocks, the last iteration partly masked."""
    monkeypatch.setenv("LIGER_ASCEND_VECTOR_CORES", "3")


@pytest.fixture
def small_ub(monkeypatch):
    """A 16 KiB UB (8 KiB budget): a few hundred columns no longer fit one tile."""
    monkeypatch.setenv("LIGER_ASCEND_UB_BYTES", str(16 * 1024))


@pytest.fixture
def current_hw(device):
    """``current_hw()``: the hardware facts a launch on ``device`` plans with, read when called
    (after the environment fixtures above have set their overrides)."""
    import torch

    from liger_ops_ascend import hardware

    return lambda: hardware.current(torch.device(device))
