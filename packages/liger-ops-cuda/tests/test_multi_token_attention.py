"""multi_token_attention.py's own paths: query rows wider than a fused softmax tile take the
chunked softmax and sparsemax kernels on the causally filled rows (the future of each row spans
whole chunks and part of one); the direct convolution's channel blocks, small tiles (several per
plane, tiles wholly in the future skipped, a weight-gradient program walking several tiles); the
guard on int32 lane positions."""

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware
from liger_ops_cuda.multi_token_attention import causal_fill, plan_conv_tiles


@pytest.mark.parametrize("sparse", (False, True), ids=("softmax", "sparsemax"))
def test_chunked_rows(backend, device, softmax_chunks, sparse):
    softmax_chunks(70)
    check(
        backend,
        "multi_token_attention",
        make_args("multi_token_attention", device, shape=(1, 1, 70, 70), out_channels=2, padding=1, sparse=sparse),
    )


@pytest.mark.parametrize(
    "options",
    (
        dict(shape=(1, 4, 13, 13), out_channels=6, groups=2, padding=1),
        dict(shape=(1, 2, 13, 13), out_channels=3, kernel=(3, 5), padding=2, dilation=2),
        dict(shape=(2, 2, 20, 20), out_channels=3, padding=1, stride=3, sparse=True),
    ),
    ids=("groups", "rectangular_dilated", "strided"),
)
def test_channel_blocks_and_small_tiles(backend, device, monkeypatch, options):
    # Blocks of 2 channels, tiles of 4 x 8 positions: a group's channels span two blocks (one
    # ragged), a plane spans many tiles (some wholly in the future), and each weight-gradient
    # program sums several (batch, tile) items.
    monkeypatch.setattr(hardware, "MTA_CONV_MAX_BLOCK_C", 2)
    monkeypatch.setattr(hardware, "MTA_CONV_TILE_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "MTA_CONV_BLOCK_N", 8)
    monkeypatch.setattr(hardware, "MTA_CONV_WGRAD_PROGRAMS_PER_SM", 1)
    tiles = plan_conv_tiles(13, 13, 3)
    assert (tiles.block_c, tiles.block_m, tiles.block_n, tiles.n_tiles) == (2, 4, 8, 8)
    check(backend, "multi_token_attention", make_args("multi_token_attention", device, **options))


def test_plane_past_int32_positions_is_refused():
    huge = torch.empty((1, 1, 46341, 46341), dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match=r"plane plus a block of \d+ must hold fewer than 2\*\*31 elements"):
        causal_fill(huge, 0.0)
