"""Pinned host buffers are allocated on the host whatever the default device is.

Under ``torch.set_default_device("cuda")`` (or ``with torch.device("cuda")``) a bare
``torch.empty(..., pin_memory=True)`` allocates on the GPU and fails ("Only dense CPU tensors can be
pinned"). Pinning needs an accelerator, so on a CPU machine the test records the device each pinned
``torch.empty`` call resolves to, under a ``meta`` default device, and stops there."""

from __future__ import annotations

import pytest
import torch

from liger_core.ops import _losses


class _Stop(Exception):
    pass


@pytest.fixture
def pinned_devices(monkeypatch):
    """The device of every pinned ``torch.empty`` call, which then raises `_Stop`."""
    devices: list[torch.device] = []
    real_empty = torch.empty

    def spy(*args, **kwargs):
        if not kwargs.get("pin_memory"):
            return real_empty(*args, **kwargs)
        device = kwargs.get("device")
        devices.append(torch.device(device) if device is not None else torch.get_default_device())
        raise _Stop

    monkeypatch.setattr(torch, "empty", spy)
    previous = torch.get_default_device()
    torch.set_default_device("meta")
    try:
        yield devices
    finally:
        torch.set_default_device(previous)


def test_host_copy_pins_on_the_host_under_another_default_device(pinned_devices):
    values = torch.zeros(3, dtype=torch.int64, device="meta")  # not on the CPU: the copy path
    with pytest.raises(_Stop):
        _losses.HostCopy(values)
    assert pinned_devices == [torch.device("cpu")]
