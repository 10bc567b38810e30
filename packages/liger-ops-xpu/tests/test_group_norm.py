"""XPU-specific GroupNorm paths: a group's run walked in channel chunks and spatial chunks, with
a large mean (the shifted sums). Caps are lowered so shapes stay small; checked against the
declaration's float64 oracle."""

import pytest
from liger_core.conformance.check import check
from liger_core.ops import group_norm

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu.group_norm import plan_groups


@pytest.mark.parametrize("has_weight,has_bias", [(True, True), (False, True), (True, False)])
def test_group_norm_channel_and_spatial_chunks(monkeypatch, device, has_weight, has_bias):
    # 6 channels per group in 2-channel chunks, 37 positions in 16-wide chunks.
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 16)
    monkeypatch.setattr(hardware, "TARGET_TILE_ELEMENTS", 32)
    plan = plan_groups(6, 37)
    assert (plan.block_c, plan.block_s, plan.n_c_chunks, plan.n_s_chunks) == (2, 16, 3, 3)
    # A mean of 101.5 against a spread of 2: the shifted sums must not cancel.
    args = group_norm.args(device, shape=(2, 12, 37), groups=2, weight=has_weight, bias=has_bias, mean=101.5)
    check(BACKEND, "group_norm", args)
