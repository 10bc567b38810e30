"""dyt.py's own paths: parameter partials from one program, rows wider than a column block."""

import torch

from liger_core.conformance.check import check, make_args
from liger_ops_cuda import hardware


def test_partials_from_one_program(backend, device, monkeypatch):
    monkeypatch.setattr(hardware, "sm_count", lambda device_index=None: 1)
    check(backend, "dyt", make_args("dyt", device, shape=(9, 40)))


def test_column_blocks(backend, device, monkeypatch):
    # Rows wider than one column block: a 2-D grid of row groups x column blocks, with
    # grad_alpha summed over every program.
    monkeypatch.setattr(hardware, "DYT_MAX_BLOCK_N", 32)
    args = make_args("dyt", device, shape=(11, 100), dtype=torch.bfloat16, param_dtype=torch.float32)
    check(backend, "dyt", args)
