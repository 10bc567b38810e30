"""embedding.py's backward paths, on tiles shrunk so that small tables reach them: several row
blocks and column blocks with ragged last ones, repeated indices, padding_idx (looked up or not),
long runs of one row, the last sorted position starting or ending a run, no index at all; every
element of grad_weight written by the kernels (the buffer starts as garbage), and grids that
depend on the shapes alone."""

import pytest
import torch
from liger_core.conformance.check import check, make_args

from liger_ops_xpu import embedding, hardware


@pytest.fixture
def small_tiles(monkeypatch):
    """Zero-fill tiles of 4 table rows x 16 columns, segment sums 16 columns a program."""
    monkeypatch.setattr(hardware, "EMBEDDING_ZERO_BLOCK_N", 16)
    monkeypatch.setattr(hardware, "EMBEDDING_ZERO_TILE_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "EMBEDDING_SEGMENT_BLOCK_N", 16)
    assert embedding.plan_zero_rows(37)[:2] == (4, 16) and embedding.plan_segment_sums(37)[0] == 16


@pytest.fixture
def poisoned_empty(monkeypatch):
    """torch.empty returns NaN-filled floating tensors: an element the kernel leaves unwritten
    shows up as NaN."""
    real = torch.empty

    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", empty)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("fp32", "bf16"))
@pytest.mark.parametrize("padding_idx", (None, 5, -2), ids=("no_padding", "padding", "negative_padding"))
def test_row_and_column_blocks(conformance_backend, device, small_tiles, poisoned_empty, dtype, padding_idx):
    # 23 rows (6 row blocks, the last of 3), 37 columns (3 column blocks, the last of 5), 40
    # positions over 23 rows: repeated rows, rows nobody looks up, the padding row looked up.
    args = make_args("embedding", device, num_embeddings=23, dim=37, shape=(5, 8), dtype=dtype, padding_idx=padding_idx)
    check(conformance_backend, "embedding", args)


@pytest.mark.parametrize("padding_idx", (None, 2), ids=("no_padding", "padding"))
def test_segments_longer_than_a_tile(conformance_backend, device, small_tiles, poisoned_empty, padding_idx):
    # 300 positions on rows 0..3 (about 75 each: far more steps than a tile has rows), rows 4..22
    # looked up by nobody, in the same and in later row blocks.
    args = make_args("embedding", device, num_embeddings=23, dim=37, shape=(300,), duplicates=True)
    check(conformance_backend, "embedding", dict(args, padding_idx=padding_idx))


def test_one_row_looked_up_everywhere(conformance_backend, device, small_tiles, poisoned_empty):
    args = make_args("embedding", device, num_embeddings=9, dim=20, shape=(4, 25))
    args["indices"].fill_(6)
    check(conformance_backend, "embedding", args)


def test_no_index(conformance_backend, device, poisoned_empty):
    args = make_args("embedding", device, num_embeddings=11, dim=24, shape=(0,))
    check(conformance_backend, "embedding", args)


def test_last_position_alone_or_ending_a_run(conformance_backend, device, small_tiles, poisoned_empty):
    # The largest row looked up once (a run of one at the last sorted position), then three times.
    for values in ([3, 0, 22, 3, 7], [22, 3, 22, 0, 22]):
        args = make_args("embedding", device, num_embeddings=23, dim=37, shape=(5,))
        args["indices"] = torch.tensor(values, device=device)
        check(conformance_backend, "embedding", args)


def test_backward_grids_depend_on_shapes_only(device, small_tiles, monkeypatch):
    grids = []

    class Recorder:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            grids.append(grid)
            return self.kernel[grid]

    for name in ("_embedding_zero_unused_rows_kernel", "_embedding_segment_sums_kernel"):
        monkeypatch.setattr(embedding, name, Recorder(getattr(embedding, name)))
    dy = torch.randn(12, 37, device=device)
    for values in ([0] * 12, list(range(12)), [22, 3] * 6):
        idx = torch.tensor(values, device=device)
        dw = embedding.embedding_backward(dy, idx, 23, torch.float32, None)
        torch.testing.assert_close(dw, torch.zeros_like(dw).index_add_(0, idx, dy))
    # 6 row blocks x 3 column blocks of zeros, 12 positions x 3 column blocks of sums.
    assert grids == [(6, 3), (12, 3)] * 3


def test_backward_sorts_int32_keys(conformance_backend, device, monkeypatch):
    # int64 indices into a table whose row numbers fit in int32: the sort gets int32 keys.
    key_dtypes, real_sort = [], torch.sort
    monkeypatch.setattr(torch, "sort", lambda keys, **kw: key_dtypes.append(keys.dtype) or real_sort(keys, **kw))
    args = make_args("embedding", device, num_embeddings=23, dim=37, shape=(3, 5), duplicates=True)
    assert args["indices"].dtype == torch.int64
    check(conformance_backend, "embedding", args)
    assert key_dtypes == [torch.int32]
