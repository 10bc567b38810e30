"""XPU mhc mixes: several programs of a few tokens each, the last one masked, and the channel
walk over several blocks with a masked tail. Caps are lowered so shapes stay small; checked
against the declarations' float64 oracles."""

import torch
from liger_core.conformance.check import check, make_args

from liger_ops_xpu import BACKEND, hardware


def test_mixes_over_several_programs_and_channel_blocks(monkeypatch, device):
    # 64-element tiles, 8 channels a block: the pre-mix takes 2 tokens per program at HC = 4, the
    # post-mix 1 (its 4 x 4 matrix); 21 channels make 3 blocks, the last masked.
    monkeypatch.setattr(hardware, "MHC_MIX_TILE_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "MHC_MIX_BLOCK_C", 8)
    for op in ("mhc_pre", "mhc_post_res"):
        check(BACKEND, op, make_args(op, device, shape=(2, 5, 4, 21)))
        check(BACKEND, op, make_args(op, device, shape=(7, 3, 21), dtype=torch.bfloat16))
