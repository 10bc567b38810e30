"""mhc.py's own paths: several programs of a few tokens each, the last one masked; the mixes' channel
walk; the projection's token and K blocks."""

import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware


def test_several_programs(backend, device, monkeypatch):
    # 64-element tiles: 4 tokens per program at HC = 4 (16 lanes), 1 at HC = 5 (padded to 8).
    monkeypatch.setattr(hardware, "MHC_TILE_ELEMENTS", 64)
    check(backend, "mhc_coeffs", make_args("mhc_coeffs", device, shape=(2, 7, 4, 8), tmax=5))
    args = make_args("mhc_coeffs", device, shape=(7, 5, 6), dtype=torch.bfloat16, tmax=3)
    check(backend, "mhc_coeffs", args)


def test_mixes_over_several_programs_and_channel_blocks(backend, device, monkeypatch):
    # 64-element tiles, 8 channels a block: the pre-mix takes 2 tokens per program at HC = 4, the
    # post-mix 1 (its 4 x 4 matrix); 21 channels make 3 blocks, the last masked.
    monkeypatch.setattr(hardware, "MHC_MIX_TILE_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "MHC_MIX_BLOCK_C", 8)
    for op in ("mhc_pre", "mhc_post_res"):
        check(backend, op, make_args(op, device, shape=(2, 5, 4, 21)))
        check(backend, op, make_args(op, device, shape=(7, 3, 21), dtype=torch.bfloat16))


def test_projection_over_several_token_and_channel_blocks(backend, device, monkeypatch):
    # 16-wide blocks: 38 tokens make 3 token blocks (forward programs, backward walk), the last
    # masked; K = 3 * 13 = 39 makes 3 K blocks (forward walk, backward programs), the last masked.
    # The interpreter's 4 "SMs" want 16 programs: both directions split their walk 3 ways (one
    # block per split), so the partials' sums are checked too.
    # bf16 x with bf16 phi takes the TF32 dot, with float32 phi (and float32 x) the IEEE one.
    monkeypatch.setattr(hardware, "MHC_PROJ_BLOCK_T", 16)
    monkeypatch.setattr(hardware, "MHC_PROJ_BLOCK_K", 16)
    monkeypatch.setattr(hardware, "MHC_PROJ_BACKWARD_BLOCK_T", 16)
    monkeypatch.setattr(hardware, "MHC_PROJ_BACKWARD_BLOCK_K", 16)
    check(backend, "mhc_coeffs", make_args("mhc_coeffs", device, shape=(2, 19, 3, 13), tmax=3))
    for phi_dtype in (torch.bfloat16, torch.float32):
        args = make_args("mhc_coeffs", device, shape=(38, 3, 13), dtype=torch.bfloat16, phi_dtype=phi_dtype, tmax=3)
        check(backend, "mhc_coeffs", args)
