"""XPU mhc mixes: several programs of a few tokens each, the last one masked, and the channel
walk over several blocks with a masked tail; mhc_coeffs' projection over several token and K
blocks. Caps are lowered so shapes stay small; checked against the declarations' float64
oracles."""

import torch
from liger_core.conformance.check import check, make_args

from liger_ops_xpu import BACKEND, hardware, mhc


def test_mixes_over_several_programs_and_channel_blocks(monkeypatch, device):
    # 64-element tiles, 8 channels a block: the pre-mix takes 2 tokens per program at HC = 4, the
    # post-mix 1 (its 4 x 4 matrix); 21 channels make 3 blocks, the last masked.
    monkeypatch.setattr(hardware, "MHC_MIX_TILE_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "MHC_MIX_BLOCK_C", 8)
    for op in ("mhc_pre", "mhc_post_res"):
        check(BACKEND, op, make_args(op, device, shape=(2, 5, 4, 21)))
        check(BACKEND, op, make_args(op, device, shape=(7, 3, 21), dtype=torch.bfloat16))


def test_projection_over_several_token_and_channel_blocks(monkeypatch, device):
    # 16-wide blocks: 38 tokens make 3 token blocks (forward programs, backward walk), the last
    # masked; K = 3 * 13 = 39 makes 3 K blocks (forward walk, backward programs), the last masked.
    # 8 EUs (pinned) at 2 programs each want 16 programs: both directions split their walk 3 ways
    # (one block per split), so the partials' sums are checked too.
    # bf16 x with bf16 phi takes the TF32 dot, with float32 phi (and float32 x) the IEEE one.
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "8")
    monkeypatch.setattr(hardware, "MHC_PROJ_PROGRAMS_PER_EU", 2)
    monkeypatch.setattr(hardware, "MHC_PROJ_BLOCK_T", 16)
    monkeypatch.setattr(hardware, "MHC_PROJ_BLOCK_K", 16)
    monkeypatch.setattr(hardware, "MHC_PROJ_BACKWARD_BLOCK_T", 16)
    monkeypatch.setattr(hardware, "MHC_PROJ_BACKWARD_BLOCK_K", 16)
    assert mhc._splits(39, 16, 3, torch.device(device)) == (3, 16)  # forward: K over 3 token blocks
    assert mhc._splits(38, 16, 3, torch.device(device)) == (3, 16)  # backward: tokens over 3 K blocks
    check(BACKEND, "mhc_coeffs", make_args("mhc_coeffs", device, shape=(2, 19, 3, 13), tmax=3))
    for phi_dtype in (torch.bfloat16, torch.float32):
        args = make_args("mhc_coeffs", device, shape=(38, 3, 13), dtype=torch.bfloat16, phi_dtype=phi_dtype, tmax=3)
        check(BACKEND, "mhc_coeffs", args)


def test_projection_split_with_a_short_last_split(monkeypatch, device):
    # 2 EUs want 4 programs: 3 blocks beside 3 programs split 2 ways, 2 blocks a split, so the
    # last split walks one real (masked-tail) block and one step past the end, fully masked.
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "2")
    monkeypatch.setattr(hardware, "MHC_PROJ_PROGRAMS_PER_EU", 2)
    monkeypatch.setattr(hardware, "MHC_PROJ_BLOCK_T", 16)
    monkeypatch.setattr(hardware, "MHC_PROJ_BLOCK_K", 16)
    monkeypatch.setattr(hardware, "MHC_PROJ_BACKWARD_BLOCK_T", 16)
    monkeypatch.setattr(hardware, "MHC_PROJ_BACKWARD_BLOCK_K", 16)
    assert mhc._splits(39, 16, 3, torch.device(device)) == (2, 32)
    assert mhc._splits(38, 16, 3, torch.device(device)) == (2, 32)
    check(BACKEND, "mhc_coeffs", make_args("mhc_coeffs", device, shape=(38, 3, 13), dtype=torch.bfloat16, tmax=3))
