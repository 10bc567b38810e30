"""The backend object liger-core discovers through the `liger.backends` entry point."""

from __future__ import annotations

from liger_core.backend import Backend
from liger_ops_cuda import rms_norm
from liger_ops_cuda.__about__ import __version__

INTERFACE_VERSION = "1.0"


def _runtime() -> str:
    from importlib.metadata import PackageNotFoundError, version

    import triton

    for dist in ("triton", "pytorch-triton"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return f"triton {triton.__version__}"


BACKEND = Backend(
    name="cuda",
    distribution="liger-ops-cuda",
    version=__version__,
    device_types=("cuda",),
    interface_version=INTERFACE_VERSION,
    ops={"rms_norm": rms_norm.rms_norm},
    runtime=_runtime,
)
