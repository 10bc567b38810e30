"""Run the kernels natively on an Ascend NPU, else in the Triton interpreter on CPU."""

import os

# torch autoloads torch_npu when it is installed; without a working CANN that import fails
# and takes `import torch` with it. npu_available() below imports torch_npu itself, guarded.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from liger_core.device import npu_available

NPU = npu_available()
if not NPU:
    # Must be set before triton is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from liger_core.registry import register_backend

from liger_ops_ascend import BACKEND

register_backend(BACKEND)
os.environ.setdefault("LIGER_CONFORMANCE_BACKEND", BACKEND.name)

pytest_plugins = ["liger_core.conformance.plugin"]
