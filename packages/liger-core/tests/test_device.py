"""Device detection: no vendor runtime is imported unless installed; unknown types are refused."""

from __future__ import annotations

import sys

import pytest
import torch

from liger_core import device
from liger_core.device import DEVICE_TYPES, device_available, infer_device, npu_available


def test_infer_device_is_cpu_without_accelerators():
    if any(device_available(d) for d in ("cuda", "npu", "xpu")):
        pytest.skip("this machine has an accelerator")
    assert infer_device() == "cpu"


@pytest.mark.parametrize(
    "available,expected",
    [({"cuda", "npu", "xpu"}, "cuda"), ({"npu", "xpu"}, "npu"), ({"xpu"}, "xpu"), (set(), "cpu")],
)
def test_infer_device_order(monkeypatch, available, expected):
    monkeypatch.setattr(device, "device_available", lambda t: t == "cpu" or t in available)
    assert infer_device() == expected


def test_npu_unavailable_without_torch_npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # find_spec says: not installed
    assert npu_available() is False
    assert device_available("npu") is False


def test_npu_unavailable_when_torch_npu_fails_to_import(monkeypatch, tmp_path):
    if "torch_npu" in sys.modules:
        pytest.skip("torch_npu is already imported here")
    (tmp_path / "torch_npu.py").write_text("raise RuntimeError('libascendcl.so: cannot open shared object file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert npu_available() is False
    finally:
        sys.modules.pop("torch_npu", None)


def test_cpu_always_available():
    assert device_available("cpu") is True
    assert device_available("cuda") is torch.cuda.is_available()


@pytest.mark.parametrize("bad", ["tpu", "CUDA", "cuda:0", ""])
def test_device_available_rejects_unknown_types(bad):
    with pytest.raises(ValueError) as info:
        device_available(bad)
    assert str(info.value) == f"device_type must be one of {DEVICE_TYPES}; got {bad!r}"
