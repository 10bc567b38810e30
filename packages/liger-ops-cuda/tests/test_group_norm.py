"""group_norm.py's fused (one program per group) and split (two-phase) plans, forced at small
sizes so that a group spans several tiles, channel blocks and chunks."""

import math

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda.group_norm import plan_groups


def _small_tiles(monkeypatch, split):
    monkeypatch.setattr(hardware, "GROUP_NORM_TILE_ELEMENTS", 32)
    monkeypatch.setattr(hardware, "GROUP_NORM_CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "GROUP_NORM_SPLIT_PROGRAMS_PER_SM", 1000 if split else 0)


@pytest.mark.parametrize(
    "shape,groups",
    [((2, 6, 50), 3), ((3, 4, 7, 9), 2), ((1, 16, 20), 4)],
    ids=["2-spans", "ragged-tiles", "channel-blocks"],
)
@pytest.mark.parametrize("split", [True, False], ids=["split", "fused"])
def test_plans(backend, device, monkeypatch, shape, groups, split):
    _small_tiles(monkeypatch, split)
    batch, channels = shape[:2]
    plan = plan_groups(batch * groups, channels // groups, math.prod(shape[2:]), torch.device(device))
    assert plan.split == split
    if split:
        assert plan.n_chunks > 1
    check(backend, "group_norm", make_args("group_norm", device, shape=shape, groups=groups, mean=21.5))


@pytest.mark.parametrize("split", [True, False], ids=["split", "fused"])
def test_outlying_first_tile(backend, device, monkeypatch, split):
    # Statistics are shifted by the mean of a chunk's first tile: a first channel far from
    # the others must not cost precision.
    _small_tiles(monkeypatch, split)
    args = make_args("group_norm", device, shape=(2, 8, 40), groups=2)
    args["x"] = args["x"].clone()
    args["x"][:, ::4] += 30.0
    check(backend, "group_norm", args)


def test_split_bf16_without_affine(backend, device, monkeypatch):
    monkeypatch.setattr(hardware, "GROUP_NORM_CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "GROUP_NORM_SPLIT_PROGRAMS_PER_SM", 1000)
    args = make_args("group_norm", device, shape=(2, 4, 300), groups=2, dtype=torch.bfloat16, weight=False, bias=False)
    check(backend, "group_norm", args)
