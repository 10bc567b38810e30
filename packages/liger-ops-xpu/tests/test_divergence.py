"""XPU-specific paths of the divergence kernels (divergence.py): several tiles in both
directions for kl_div, tvd and jsd, with and without labels. The tiles are lowered so shapes
stay small; checked against the declarations' float64 oracles."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import jsd, kl_div, tvd

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import plan_blocks


@pytest.fixture
def small_tiles(monkeypatch):
    """Divergence tiles of 2 rows x 16 columns: several tiles in both directions."""
    monkeypatch.setattr(hardware, "ELEMENTWISE_COL_BLOCK", 16)
    monkeypatch.setattr(hardware, "ELEMENTWISE_BLOCK", 32)
    plan = plan_blocks(37)
    assert (plan.block_m, plan.block_n) == (2, 16)


@pytest.mark.parametrize("reduction", ["none", "batchmean"])
def test_kl_div_several_tiles(small_tiles, device, reduction):
    args = kl_div.args(device, shape=(7, 37), dtype=torch.bfloat16, log_target=True)
    check(BACKEND, "kl_div", args, reduction=reduction, grad_scalar=0.5)


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_tvd_several_tiles_with_labels(small_tiles, device, reduction):
    check(BACKEND, "tvd", tvd.args(device, shape=(7, 37)), reduction=reduction)


def test_jsd_several_tiles_with_labels(small_tiles, device):
    check(BACKEND, "jsd", jsd.args(device, shape=(7, 37)), beta=0.7, grad_scalar=3.0)
