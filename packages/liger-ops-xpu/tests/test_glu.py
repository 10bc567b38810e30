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


@pytest.mark.parametrize("in_place", [False, True])
def test_gate_up_column_blocks_with_a_ragged_tail(monkeypatch, device, in_place):
    monkeypatch.setattr(hardware, "ELEMENTWISE_BLOCK", 64)
    assert plan_flat(100).programs == 2  # halves of 100: 2 column blocks per row, the last partial
    args = make_args("fused_gate_up_swiglu", device, shape=(3, 200), dtype=torch.bfloat16)
    check(BACKEND, "fused_gate_up_swiglu", args, in_place=in_place)


def test_gate_up_in_place_reuses_the_projection_buffer(device):
    gate_up = make_args("fused_gate_up_swiglu", device, shape=(4, 100))["gate_up"]
    leaf = gate_up.clone().requires_grad_()
    buf = leaf * 1  # a buffer the caller owns, as LigerPhi3SwiGLUMLP's projection output
    dy = torch.randn(4, 50, generator=torch.Generator().manual_seed(1)).to(device)
    BACKEND.op("fused_gate_up_swiglu")(buf, True).backward(dy)
    # The gradient was written over the activation (no new activation-sized buffer).
    torch.testing.assert_close(buf.detach(), leaf.grad)
    gate = gate_up.chunk(2, dim=-1)[0]
    torch.testing.assert_close(leaf.grad[:, 50:], dy * torch.nn.functional.silu(gate))
