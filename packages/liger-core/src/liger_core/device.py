"""Which accelerator this machine has, without importing vendor runtimes it does not need."""

from __future__ import annotations

import importlib.util

import torch

DEVICE_TYPES = ("cuda", "npu", "xpu", "cpu")


def npu_available() -> bool:
    # torch_npu registers torch.npu; only import it when it is installed at all.
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        import torch_npu  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken CANN install means no usable NPU
        return False
    return hasattr(torch, "npu") and torch.npu.is_available()


def device_available(device_type: str) -> bool:
    if device_type == "cpu":
        return True
    if device_type == "cuda":
        return torch.cuda.is_available()
    if device_type == "npu":
        return npu_available()
    if device_type == "xpu":
        return hasattr(torch, "xpu") and torch.xpu.is_available()
    raise ValueError(f"device_type must be one of {DEVICE_TYPES}; got {device_type!r}")


def infer_device() -> str:
    """The first available of cuda, npu, xpu; else cpu."""
    for device_type in DEVICE_TYPES:
        if device_available(device_type):
            return device_type
    return "cpu"
