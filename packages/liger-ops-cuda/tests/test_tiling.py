"""_tiling.py's shared pieces that no op test pins down alone."""

import torch

from liger_ops_cuda._tiling import scale_unless_one


def test_scale_unless_one(device):
    g = torch.arange(10000, dtype=torch.float32, device=device)
    scale_unless_one(g, torch.ones(1, device=device))
    assert torch.equal(g, torch.arange(10000, dtype=torch.float32, device=device))
    scale_unless_one(g, torch.full((1,), -2.0, device=device))
    assert torch.equal(g, -2 * torch.arange(10000, dtype=torch.float32, device=device))
