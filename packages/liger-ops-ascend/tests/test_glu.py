"""Ascend swiglu/geglu code paths the shared suite may not reach, forced and checked against the
float64 oracle: elementwise blocks walked by few programs with a ragged last block, in place."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check, make_args

from liger_ops_ascend import glu


@pytest.mark.parametrize("op,act", [("swiglu", glu.SILU), ("geglu", glu.GELU_TANH)], ids=["swiglu", "geglu"])
@pytest.mark.parametrize("in_place", [False, True], ids=["copy", "inplace"])
def test_glu_sub_blocks_over_few_programs(small_ub, few_cores, backend, device, current_hw, op, act, in_place):
    p = glu.plan_tiles(act, "backward", 7 * 301, torch.bfloat16, current_hw())
    assert p.programs == 3 and p.n_iters > 1 and (7 * 301) % p.block
    check(backend, op, make_args(op, device, shape=(7, 301), dtype=torch.bfloat16), in_place=in_place)


@pytest.mark.parametrize("in_place", [False, True], ids=["copy", "inplace"])
def test_gate_up_column_blocks_over_few_programs(small_ub, few_cores, backend, device, current_hw, in_place):
    p = glu.plan_gate_up("backward", 7, 301, torch.bfloat16, current_hw())
    # Several column blocks per row, the last one ragged, walked by 3 programs in several trips.
    assert p.n_col_blocks > 1 and 301 % p.flat.block and p.flat.programs == 3 and p.flat.n_iters > 1
    args = make_args("fused_gate_up_swiglu", device, shape=(7, 602), dtype=torch.bfloat16)
    check(backend, "fused_gate_up_swiglu", args, in_place=in_place)


def test_gate_up_in_place_reuses_the_projection_buffer(backend, device):
    gate_up = make_args("fused_gate_up_swiglu", device, shape=(4, 100))["gate_up"]
    leaf = gate_up.clone().requires_grad_()
    buf = leaf * 1  # a buffer the caller owns, as LigerPhi3SwiGLUMLP's projection output
    dy = torch.randn(4, 50, generator=torch.Generator().manual_seed(1)).to(device)
    backend.op("fused_gate_up_swiglu")(buf, True).backward(dy)
    # The gradient was written over the activation (no new activation-sized buffer).
    torch.testing.assert_close(buf.detach(), leaf.grad)
    gate = gate_up.chunk(2, dim=-1)[0]
    torch.testing.assert_close(leaf.grad[:, 50:], dy * torch.nn.functional.silu(gate))
