"""XPU multi_token_attention paths the shared suite may not reach: query rows in chunks (caps
lowered: rows wider than 64 columns), several rows per tile, for both activations, the future of
each row spanning whole chunks, checked against the declaration's float64 oracle; the direct
convolution's channel blocks, small tiles (several per plane, tiles wholly in the future skipped,
a weight-gradient program walking several tiles, the last program's run past the end); the guard
on int32 lane positions."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import multi_token_attention

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._tiling import persistent_grid, plan_tiles
from liger_ops_xpu.multi_token_attention import causal_fill, plan_conv_tiles


@pytest.mark.parametrize("sparse", [False, True], ids=["softmax", "sparsemax"])
def test_chunked_rows(small_chunks, device, sparse):
    plan = plan_tiles(70)
    assert plan.chunked and plan.block_m == 4
    args = multi_token_attention.args(device, shape=(1, 1, 70, 70), out_channels=2, padding=1, sparse=sparse)
    check(BACKEND, "multi_token_attention", args)


@pytest.mark.parametrize(
    "options",
    (
        {"shape": (1, 4, 9, 9), "out_channels": 6, "groups": 2, "padding": 1},
        {"shape": (1, 2, 13, 13), "out_channels": 3, "kernel": (3, 5), "padding": 2, "dilation": 2},
        {"shape": (2, 2, 20, 20), "out_channels": 3, "padding": 1, "stride": 3, "sparse": True},
    ),
    ids=("groups", "rectangular_dilated", "strided"),
)
def test_channel_blocks_and_small_tiles(device, monkeypatch, options):
    # Blocks of 2 channels, tiles of 4 x 8 positions: a group's channels span two blocks (one
    # ragged), a plane spans many tiles (some wholly in the future), and each weight-gradient
    # program sums several (batch, tile) items (12 EUs: 6 resident programs, shared out among the
    # channel blocks; the rectangular case's 8 items go 3 to a program, the last run past the end).
    # The grouped case's planes are 9 x 9 (CUDA's test: 13 x 13): 6 tiles, 2 in the future, and
    # a third less of the interpreter's time.
    monkeypatch.setattr(hardware, "MTA_CONV_MAX_BLOCK_C", 2)
    monkeypatch.setattr(hardware, "MTA_CONV_TILE_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "MTA_CONV_BLOCK_N", 8)
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "12")
    tiles = plan_conv_tiles(13, 13, 3)
    assert (tiles.block_c, tiles.block_m, tiles.block_n, tiles.n_tiles) == (2, 4, 8, 8)
    assert persistent_grid(8, hardware.MTA_CONV_NUM_WARPS, torch.device(device), n_col_blocks=2) == (3, 3)
    check(BACKEND, "multi_token_attention", multi_token_attention.args(device, **options))


def test_plane_past_int32_positions_is_refused():
    huge = torch.empty((1, 1, 46341, 46341), dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match=r"plane plus a block of \d+ must hold fewer than 2\*\*31 elements"):
        causal_fill(huge, 0.0)
