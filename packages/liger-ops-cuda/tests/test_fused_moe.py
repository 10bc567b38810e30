"""fused_moe.py's own paths: the smallest tiles tl.dot takes, so every sorted expert spans several
row tiles (the last one partial), every GEMM several column blocks and reduction steps, and the
routing weights' gradient sums several partial dot products; plus the routing it runs over."""

import pytest
import torch

from liger_core.conformance.check import check, make_args
from liger_core.conformance.weights_in_place import *  # noqa: F403
from liger_core.ops.fused_moe import max_tiles, route
from liger_ops_cuda import fused_moe, hardware


@pytest.mark.parametrize("transposed_weights", (False, True), ids=("contiguous", "transposed"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_small_tiles_many_programs(backend, device, monkeypatch, dtype, transposed_weights):
    # The weight gradient's tiles differ from the routed rows' (tuned apart): 32 weight rows.
    small = {"MOE_ROWS_BLOCK_M": 16, "MOE_ROWS_BLOCK_N": 16, "MOE_ROWS_BLOCK_K": 32, "MOE_COMBINE_BLOCK": 16}
    small.update(MOE_WGRAD_BLOCK_M=32, MOE_WGRAD_BLOCK_N=16, MOE_WGRAD_BLOCK_K=32)
    for name, size in small.items():
        monkeypatch.setattr(hardware, name, size)
    # ~37 rows per expert: 3 row tiles each; hidden 50 and 2 * 24 gate-up rows: 4 and 3 column
    # blocks, 2 to 4 reduction steps of 16.
    args = make_args(
        "fused_moe", device, tokens=37, hidden=50, intermediate=24, experts=3, top_k=3, dtype=dtype,
        transposed_weights=transposed_weights,
    )  # fmt: skip
    check(backend, "fused_moe", args)


@pytest.mark.parametrize("transposed_weights", (False, True), ids=("contiguous", "transposed"))
@pytest.mark.parametrize("grouped_mm", (True, False), ids=("grouped_mm", "triton_gemms"))
def test_bf16_both_gemm_paths(backend, device, monkeypatch, grouped_mm, transposed_weights):
    # Either path on one bf16 shape: torch's grouped GEMMs with the SwiGLU kernels (several row
    # and column blocks, odd experts without rows: their weight gradients 0) or the Triton ones;
    # weights in either layout (Llama 4's transposed one read in place).
    monkeypatch.setattr(fused_moe, "use_grouped_mm", lambda *shape: grouped_mm)
    monkeypatch.setattr(hardware, "MOE_SWIGLU_BLOCK_M", 4)
    monkeypatch.setattr(hardware, "MOE_SWIGLU_BLOCK_N", 16)
    args = make_args(
        "fused_moe", device, tokens=19, hidden=48, intermediate=40, experts=6, top_k=2, routing="even",
        dtype=torch.bfloat16, transposed_weights=transposed_weights,
    )  # fmt: skip
    check(backend, "fused_moe", args)


@pytest.mark.parametrize("interleaved", (True, False), ids=("interleaved", "concatenated"))
@pytest.mark.parametrize("grouped_mm", (True, False), ids=("grouped_mm", "triton_gemms"))
def test_clamped_swiglu_both_gemm_paths(backend, device, monkeypatch, grouped_mm, interleaved):
    # GPT-OSS's experts on either bf16 path, small tiles: the biases added in the gate-up
    # epilogue (Triton) or the SwiGLU kernel (grouped_mm) and in the gather-sum; the clamps cut
    # a third of the gates and up values (``eighths``: values exact in bf16, see the sample builder).
    monkeypatch.setattr(fused_moe, "use_grouped_mm", lambda *shape: grouped_mm)
    small = {"MOE_ROWS_BLOCK_M": 16, "MOE_ROWS_BLOCK_N": 16, "MOE_ROWS_BLOCK_K": 32, "MOE_COMBINE_BLOCK": 16}
    small.update(MOE_SWIGLU_BLOCK_M=4, MOE_SWIGLU_BLOCK_N=16)
    for name, size in small.items():
        monkeypatch.setattr(hardware, name, size)
    args = make_args(
        "fused_moe_clamped_swiglu", device, tokens=19, hidden=48, intermediate=40, experts=6, top_k=2,
        routing="even", dtype=torch.bfloat16, transposed_weights=True, interleaved=interleaved, eighths=True,
    )  # fmt: skip
    check(backend, "fused_moe_clamped_swiglu", args)


def test_grouped_mm_takes_aligned_bf16_only(device):
    dev = torch.device(device)
    assert fused_moe.use_grouped_mm(torch.bfloat16, dev, 48, 40) == (
        dev.type != "cuda" or torch.cuda.get_device_capability(dev) >= hardware.GROUPED_MM_MIN_CAPABILITY
    )
    assert not fused_moe.use_grouped_mm(torch.float32, dev, 48, 40)
    assert not fused_moe.use_grouped_mm(torch.float16, dev, 48, 40)
    assert not fused_moe.use_grouped_mm(torch.bfloat16, dev, 50, 40)  # rows not whole 16-byte units
    assert not fused_moe.use_grouped_mm(torch.bfloat16, dev, 48, 36)


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
