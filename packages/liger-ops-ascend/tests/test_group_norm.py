"""Ascend GroupNorm code paths the shared suite may not reach, forced and checked against the
float64 oracle: groups split over channel and spatial chunks (a small UB) walked by few
programs, and many single-tile groups per program."""

from __future__ import annotations

import math

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import group_norm as group_norm_op

from liger_ops_ascend import group_norm


@pytest.mark.parametrize("shape,groups", [((3, 12, 40, 5), 3), ((2, 6, 700), 2)], ids=["channels", "spatial"])
def test_group_norm_chunked(small_ub, few_cores, backend, device, current_hw, shape, groups):
    dtype = torch.float32
    p = group_norm.plan_groups(shape[0], shape[1], groups, math.prod(shape[2:]), dtype, dtype, dtype, current_hw())
    assert not p.single_tile and p.n_iters > 1
    check(backend, "group_norm", group_norm_op.args(device, shape=shape, groups=groups, dtype=dtype))
    args = group_norm_op.args(device, shape=shape, groups=groups, dtype=dtype, weight=False, bias=False)
    check(backend, "group_norm", args)


def test_group_norm_many_groups_single_tile(few_cores, backend, device, current_hw):
    dtype = torch.bfloat16
    assert group_norm.plan_groups(5, 16, 8, 3, dtype, dtype, dtype, current_hw()).single_tile
    check(backend, "group_norm", group_norm_op.args(device, shape=(5, 16, 3), groups=8, dtype=dtype))
