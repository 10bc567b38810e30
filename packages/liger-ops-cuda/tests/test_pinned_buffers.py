"""The target check's pinned host buffer is allocated on the host whatever the default device is
(under ``torch.set_default_device("cuda")`` a bare pinned ``torch.empty`` fails). Pinning needs an
accelerator, so on a CPU machine the test records the device the pinned ``torch.empty`` call
resolves to under a ``meta`` default device, and stops there."""

from __future__ import annotations

import types

import pytest
import torch

from liger_ops_cuda import _cross_entropy


class _Stop(Exception):
    pass


def test_target_check_pins_on_the_host_under_another_default_device(monkeypatch):
    devices: list[torch.device] = []
    real_empty = torch.empty

    def spy(*args, **kwargs):
        if not kwargs.get("pin_memory"):
            return real_empty(*args, **kwargs)
        device = kwargs.get("device")
        devices.append(torch.device(device) if device is not None else torch.get_default_device())
        raise _Stop

    monkeypatch.setattr(torch, "empty", spy)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    target = types.SimpleNamespace(is_cuda=True)  # a CUDA target without a GPU: only `is_cuda` is read first
    count = real_empty((), dtype=torch.int32)
    previous = torch.get_default_device()
    torch.set_default_device("meta")
    try:
        with pytest.raises(_Stop):
            _cross_entropy.TargetCheck("cross_entropy", target, -100, 8, None, count)
    finally:
        torch.set_default_device(previous)
    assert devices == [torch.device("cpu")]
