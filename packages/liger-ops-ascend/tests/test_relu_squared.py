"""Ascend relu_squared code paths the shared suite may not reach, forced and checked against the
float64 oracle: elementwise blocks walked by few programs with a ragged last block (the loads
skip their fill, care_padding=False: only masked-off stores see the padded lanes)."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.check import check, make_args

from liger_ops_ascend import relu_squared


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_relu_squared_blocks_over_few_programs(small_ub, few_cores, backend, device, current_hw, dtype):
    for direction in ("forward", "backward"):
        p = relu_squared.plan_tiles(direction, 7 * 301, dtype, current_hw())
        assert p.programs == 3 and p.n_iters > 1 and (7 * 301) % p.block, (direction, p)
    check(backend, "relu_squared", make_args("relu_squared", device, shape=(7, 301), dtype=dtype))
