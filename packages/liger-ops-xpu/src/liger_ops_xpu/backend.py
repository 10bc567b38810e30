"""The backend object liger-core discovers through the `liger.backends` entry point."""

from __future__ import annotations

from liger_core.backend import Backend

from liger_ops_xpu import rms_norm
from liger_ops_xpu.__about__ import __version__

INTERFACE_VERSION = "1.0"

# Distributions that install the `triton` module for Intel GPUs, most common first.
_TRITON_DISTRIBUTIONS = ("pytorch-triton-xpu", "triton-xpu", "triton")


def _runtime() -> str:
    from importlib.metadata import PackageNotFoundError, version

    import triton

    for dist in _TRITON_DISTRIBUTIONS:
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return f"triton {triton.__version__}"


BACKEND = Backend(
    name="xpu",
    distribution="liger-ops-xpu",
    version=__version__,
    device_types=("xpu",),
    interface_version=INTERFACE_VERSION,
    ops={"rms_norm": rms_norm.rms_norm},
    runtime=_runtime,
)
