"""fused_moe.py's own paths: the smallest tiles tl.dot takes, so every sorted expert spans several
row tiles (the last one partial), every GEMM several column blocks and reduction steps, and the
routing weights' gradient sums several partial dot products (fused_moe's and
fused_moe_clamped_swiglu's epilogues); plus the routing it runs over."""

import pytest
import torch
from liger_core.conformance.check import check, make_args
from liger_core.conformance.weights_in_place import *
from liger_core.ops.fused_moe import max_tiles, route

from liger_ops_xpu import hardware


@pytest.mark.parametrize("transposed_weights", (False, True), ids=("contiguous", "transposed"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_small_tiles_many_programs(conformance_backend, device, monkeypatch, dtype, transposed_weights):
    _small_tiles(monkeypatch)
    # ~37 rows per expert: 3 row tiles each; hidden 50 and 2 * 24 gate-up rows: 4 and 3 column
    # blocks, 2 to 4 reduction steps of 16.
    args = make_args(
        "fused_moe", device, tokens=37, hidden=50, intermediate=24, experts=3, top_k=3, dtype=dtype,
        transposed_weights=transposed_weights,
    )  # fmt: skip
    check(conformance_backend, "fused_moe", args)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_clamped_swiglu_small_tiles(conformance_backend, device, monkeypatch, dtype):
    # GPT-OSS's experts (interleaved gate/up rows, both biases, transposed weights) on the same
    # small tiles: ~17 rows per expert (2 row tiles), 24 gate columns (2 column blocks of the
    # interleaved 48 rows). The clamps cut: in fp32 at the builder's limit 0.6, in bf16 on its
    # 1/8 grid (values exact in bf16, so the kernel clamps what the oracle clamps).
    _small_tiles(monkeypatch)
    args = make_args(
        "fused_moe_clamped_swiglu", device, tokens=25, hidden=40, intermediate=24, experts=3, top_k=2, dtype=dtype,
        transposed_weights=True, bias=True, interleaved=True, eighths=dtype == torch.bfloat16,
    )  # fmt: skip
    check(conformance_backend, "fused_moe_clamped_swiglu", args)


def _small_tiles(monkeypatch) -> None:
    # The weight gradient's tiles differ from the routed rows' (tuned apart): 32 weight rows.
    small = {"MOE_ROWS_BLOCK_M": 16, "MOE_ROWS_BLOCK_N": 16, "MOE_ROWS_BLOCK_K": 32, "MOE_COMBINE_BLOCK": 16}
    small.update(MOE_WGRAD_BLOCK_M=32, MOE_WGRAD_BLOCK_N=16, MOE_WGRAD_BLOCK_K=32)
    for name, size in small.items():
        monkeypatch.setattr(hardware, name, size)


def test_route_sorts_and_tiles_by_expert():
    index = torch.tensor([[2, 0], [0, 2], [2, 2], [4, 0], [2, 1]])
    r, expert_ids = route(index, 5, block_m=2)
    expert_ids.check()  # every id in range: no error
    flat = index.reshape(-1)
    # Sorted by expert, stably (token order within an expert).
    assert flat[r.slot_of_row.long()].tolist() == [0, 0, 0, 1, 2, 2, 2, 2, 2, 4]
    assert r.slot_of_row.tolist() == [1, 2, 7, 9, 0, 3, 4, 5, 8, 6]
    assert r.token_of_row.tolist() == [s // 2 for s in r.slot_of_row.tolist()]
    assert r.row_of_slot[r.slot_of_row.long()].tolist() == list(range(10))
    assert r.expert_offsets.tolist() == [0, 3, 4, 9, 9, 10]
    # Expert 0: rows 0-2 in 2 tiles; 1: one; 2: rows 4-8 in 3; 3: none; 4: one. The grid's bound
    # (10 slots: 5 full tiles + 5 experts, capped at 10 rows) leaves 3 empty tiles past the count,
    # on the last expert at its end (every row masked).
    assert r.n_tiles.tolist() == [7]
    assert r.max_tiles == max_tiles(10, 5, 2) == 10
    assert r.tile_expert.tolist() == [0, 0, 1, 2, 2, 2, 4, 4, 4, 4]
    assert r.tile_row_start.tolist() == [0, 2, 3, 4, 6, 8, 9, 10, 10, 10]
    assert all(t.dtype == torch.int32 for t in vars(r).values())


def test_route_counts_bad_ids_without_raising_until_checked():
    # The kernels run on clamped ids (expert 0) before the host reads the count.
    index = torch.tensor([[1, 7], [-1, 0], [2, 1]])
    r, expert_ids = route(index, 3, block_m=4)
    assert r.expert_offsets.tolist() == [0, 3, 5, 6]
    with pytest.raises(ValueError, match=r"top_k_index must be in \[0, 3\).*2 are not \(first: 7\)"):
        expert_ids.check()
