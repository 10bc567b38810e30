"""mhc.py's own paths: several programs of a few tokens each, the last one masked."""

import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware


def test_several_programs(backend, device, monkeypatch):
    # 64-element tiles: 4 tokens per program at HC = 4 (16 lanes), 1 at HC = 5 (padded to 8).
    monkeypatch.setattr(hardware, "MHC_TILE_ELEMENTS", 64)
    check(backend, "mhc_coeffs", make_args("mhc_coeffs", device, shape=(2, 7, 4, 8), tmax=5))
    args = make_args("mhc_coeffs", device, shape=(7, 5, 6), dtype=torch.bfloat16, tmax=3)
    check(backend, "mhc_coeffs", args)
