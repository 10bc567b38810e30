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
