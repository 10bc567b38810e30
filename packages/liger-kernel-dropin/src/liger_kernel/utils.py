"""``liger_kernel.utils``: the helpers frameworks import from liger-kernel, liger-core's where it has them."""

from __future__ import annotations

import importlib.util

from liger_core.device import infer_device, npu_available


def is_npu_available() -> bool:
    """Whether torch_npu is installed and an Ascend NPU is usable."""
    return npu_available()


def is_peft_available() -> bool:
    return importlib.util.find_spec("peft") is not None


def __getattr__(name: str):
    from liger_kernel._surface import missing

    raise missing(__name__, name)


__all__ = ["infer_device", "is_npu_available", "is_peft_available"]
