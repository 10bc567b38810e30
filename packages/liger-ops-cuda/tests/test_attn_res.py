"""attn_res.py's own paths: the parameter partials from one program, rows in several column chunks."""

import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware


def test_partials_from_one_program(backend, device, monkeypatch):
    # One program walks every position tile and accumulates g into its single partial row.
    monkeypatch.setattr(hardware, "sm_count", lambda device_index=None: 1)
    monkeypatch.setattr(hardware, "ATTN_RES_TILE_ELEMENTS", 64)
    check(backend, "attn_res", make_args("attn_res", device, shape=(3, 9, 40)))


def test_column_chunks(backend, device, monkeypatch):
    # Rows wider than the column chunk: both passes of both kernels walk chunks, the last masked.
    monkeypatch.setattr(hardware, "ATTN_RES_BLOCK_N", 32)
    args = make_args("attn_res", device, shape=(5, 11, 100), dtype=torch.bfloat16, param_dtype=torch.float32)
    check(backend, "attn_res", args)
