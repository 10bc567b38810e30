"""fused_neighborhood_attention.py's own paths: windows spanning several key blocks and query
blocks of the smallest tile (forced), with dilation and odd head_dim."""

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware


@pytest.mark.parametrize(
    "options",
    [
        dict(shape=(1, 2, 70, 16), kernel_size=25, dtype=torch.float32),
        dict(shape=(2, 1, 53, 5), kernel_size=9, dilation=4, dtype=torch.bfloat16),
        dict(shape=(1, 1, 40, 24), kernel_size=3, dilation=7, dtype=torch.float16),
    ],
)
def test_windows_across_small_blocks(backend, device, monkeypatch, options):
    # 16-row blocks: a window spans up to four key blocks, each key block is reached by several
    # query blocks, and the last block of each is masked.
    monkeypatch.setattr(hardware, "NAT_BLOCK", 16)
    check(backend, "fused_neighborhood_attention", make_args("fused_neighborhood_attention", device, **options))
