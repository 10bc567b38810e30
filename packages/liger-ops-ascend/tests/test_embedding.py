"""embedding.py's backward paths, on tiles shrunk so that small tables reach them: several row
blocks and column blocks with ragged last ones, repeated indices, padding_idx (looked up or not),
long runs of one row, the last sorted position starting or ending a run, no index at all; every
element of grad_weight written by the kernels (the buffer starts as garbage), and work that
depends on the shapes alone."""

import pytest
import torch
from liger_core.conformance.check import check, make_args

from liger_ops_ascend import embedding, hardware


@pytest.fixture
def small_tiles(monkeypatch):
    """Zero tiles of 4 table rows x 32 columns over 48-wide (32-byte aligned) rows, segment sums
    32 columns a unit."""
    monkeypatch.setattr(hardware, "EMBEDDING_BLOCK_N", 32)
    monkeypatch.setattr(hardware, "EMBEDDING_ZERO_TILE_ELEMENTS", 128)
    embedding._plan.cache_clear()
    for dtype in (torch.float32, torch.bfloat16):
        p = embedding.plan_embedding("backward", 23, 48, dtype, dtype, hardware.for_soc("Ascend910B4"))
        assert (p.block_m, p.block_n, p.n_col_blocks) == (4, 32, 2)
    yield
    embedding._plan.cache_clear()


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
def test_row_and_column_blocks(backend, device, small_tiles, poisoned_empty, dtype, padding_idx):
    # 23 rows (6 row blocks, the last of 3), 48 columns (2 column blocks, the last of 16), 40
    # positions over 23 rows: repeated rows, rows nobody looks up, the padding row looked up.
    args = make_args("embedding", device, num_embeddings=23, dim=48, shape=(5, 8), dtype=dtype, padding_idx=padding_idx)
    check(backend, "embedding", args)


@pytest.mark.parametrize("padding_idx", (None, 2), ids=("no_padding", "padding"))
def test_segments_longer_than_a_tile(backend, device, small_tiles, poisoned_empty, padding_idx):
    # 300 positions on rows 0..3 (about 75 each: far more steps than a tile has rows), rows 4..22
    # looked up by nobody, in the same and in later row blocks.
    args = make_args("embedding", device, num_embeddings=23, dim=48, shape=(300,), duplicates=True)
    check(backend, "embedding", dict(args, padding_idx=padding_idx))


def test_one_row_looked_up_everywhere(backend, device, small_tiles, poisoned_empty):
    args = make_args("embedding", device, num_embeddings=9, dim=20, shape=(4, 25))
    args["indices"].fill_(6)
    check(backend, "embedding", args)


def test_no_index(backend, device, poisoned_empty):
    args = make_args("embedding", device, num_embeddings=11, dim=24, shape=(0,))
    check(backend, "embedding", args)


def test_last_position_alone_or_ending_a_run(backend, device, small_tiles, poisoned_empty):
    # The largest row looked up once (a run of one at the last sorted position), then three times.
    for values in ([3, 0, 22, 3, 7], [22, 3, 22, 0, 22]):
        args = make_args("embedding", device, num_embeddings=23, dim=48, shape=(5,))
        args["indices"] = torch.tensor(values, device=device)
        check(backend, "embedding", args)


def test_backward_work_depends_on_shapes_only(device, small_tiles, monkeypatch):
    launches = []
    real = embedding.launch

    def record(kernel, plan, hw, *args, **kwargs):
        # The grid, the unit count and the constexprs of each launch.
        launches.append((plan.kernel, plan.grid, args[2] if plan.kernel.endswith("rows") else args[4], kwargs))
        return real(kernel, plan, hw, *args, **kwargs)

    monkeypatch.setattr(embedding, "launch", record)
    hw = hardware.current(torch.device(device))
    dy = torch.randn(12, 48, device=device)
    for values in ([0] * 12, list(range(12)), [22, 3] * 6):
        idx = torch.tensor(values, device=device)
        dw = embedding.embedding_backward(dy, idx, 23, torch.float32, None, hw)
        torch.testing.assert_close(dw, torch.zeros_like(dw).index_add_(0, idx, dy))
    # 6 row blocks x 2 column blocks of zeros, 12 positions x 2 column blocks of sums, whatever
    # the indices' values.
    assert len(launches) == 6 and launches[:2] * 3 == launches
    assert [entry[2] for entry in launches[:2]] == [12, 24]


def test_backward_sorts_int32_keys(conformance_backend, device, monkeypatch):
    # int64 indices into a table whose row numbers fit in int32: the sort gets int32 keys.
    key_dtypes, real_sort = [], torch.sort
    monkeypatch.setattr(torch, "sort", lambda keys, **kw: key_dtypes.append(keys.dtype) or real_sort(keys, **kw))
    args = make_args("embedding", device, num_embeddings=23, dim=37, shape=(3, 5), duplicates=True)
    assert args["indices"].dtype == torch.int64
    check(conformance_backend, "embedding", args)
    assert key_dtypes == [torch.int32]
