"""XPU-specific paths of the gated activations (glu.py): several flat blocks with a ragged
tail, in_place, for both activations. The block is lowered so shapes stay small; checked
against the declarations' float64 oracles."""

import pytest
import torch
from liger_core.conformance.check import check, make_args

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import plan_flat


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("op", ["swiglu", "geglu"])
def test_several_blocks_with_a_ragged_tail(monkeypatch, device, op, in_place):
    monkeypatch.setattr(hardware, "ELEMENTWISE_BLOCK", 128)
    assert plan_flat(7 * 45).programs == 3
    # (The gated ops' builder is liger_core.ops._glu.args, their default one.)
    check(BACKEND, op, make_args(op, device, shape=(7, 45), dtype=torch.bfloat16), in_place=in_place)
