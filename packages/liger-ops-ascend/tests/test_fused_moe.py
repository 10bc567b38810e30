"""Ascend fused_moe code paths the shared suite may not reach, forced and checked against the
float64 oracle (the smallest GEMM tiles on two AI cores: every program walks several work
items, every expert several row tiles, every GEMM several column blocks and reduction steps),
and the launch plans at the model shapes of the benchmark presets on every SoC of the table
(run on meta tensors: the launch guard's checks, no kernel)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from liger_core.conformance.check import check, make_args
from liger_core.conformance.weights_in_place import *
from liger_core.ops.fused_moe import Routing, max_tiles

from liger_ops_ascend import fused_moe, hardware
from liger_ops_ascend.launch import check as guard_check


@pytest.mark.parametrize("transposed_weights", (False, True), ids=("contiguous", "transposed"))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_fused_moe_small_tiles_on_two_cores(monkeypatch, backend, device, dtype, transposed_weights):
    # The weight gradient's tiles differ from the routed rows' (tuned apart): 32 weight rows.
    small = {"MOE_ROWS_BLOCK_M": 16, "MOE_ROWS_BLOCK_N": 16, "MOE_ROWS_BLOCK_K": 16, "MOE_COMBINE_BLOCK": 16}
    small.update(MOE_WGRAD_BLOCK_M=32, MOE_WGRAD_BLOCK_N=16, MOE_WGRAD_BLOCK_K=16)
    for name, size in small.items():
        monkeypatch.setattr(hardware, name, size)
    current = hardware.current
    monkeypatch.setattr(hardware, "current", lambda dev=None: dataclasses.replace(current(dev), ai_cores=2))
    # ~37 rows per expert: 3 row tiles each; hidden 50 (unaligned rows in bf16: padded copies)
    # in 4 column blocks; 2 * 24 gate-up rows.
    # Transposed weights: Llama 4's layout (hidden 50 then pads their columns instead).
    args = make_args(
        "fused_moe", device, tokens=37, hidden=50, intermediate=24, experts=3, top_k=3, dtype=dtype,
        transposed_weights=transposed_weights,
    )  # fmt: skip
    check(backend, "fused_moe", args)


# (tokens, hidden, intermediate, experts, top_k): the bench presets (Qwen3-30B-A3B, Mixtral-8x7B).
MODEL_SHAPES = [(4096, 2048, 768, 128, 8), (4096, 4096, 14336, 8, 2)]


def _meta_routing(n_tokens: int, top_k: int, n_experts: int, block_m: int) -> Routing:
    n_slots = n_tokens * top_k
    n_tiles = max_tiles(n_slots, n_experts, block_m)  # the grids' bound (the count stays on the device)
    i32 = {"dtype": torch.int32, "device": "meta"}
    return Routing(
        token_of_row=torch.empty(n_slots, **i32),
        slot_of_row=torch.empty(n_slots, **i32),
        row_of_slot=torch.empty(n_slots, **i32),
        expert_offsets=torch.empty(n_experts + 1, **i32),
        tile_expert=torch.empty(n_tiles, **i32),
        tile_row_start=torch.empty(n_tiles, **i32),
        n_tiles=torch.empty(1, **i32),
        expert_of_row=torch.empty(n_slots, **i32),
    )


@pytest.mark.parametrize("transposed", (False, True), ids=("contiguous", "transposed"))
@pytest.mark.parametrize("soc", list(hardware.SOC_TABLE))
def test_fused_moe_model_shapes_pass_the_guard(monkeypatch, soc, transposed):
    hw = hardware.for_soc(soc)
    seen = []

    def record(kernel, plan, hw, *args, **kwargs):
        guard_check(plan, hw)  # grid, UB budget, aligned multi-row pitches, int32 extents
        seen.append(plan.kernel)

    monkeypatch.setattr(fused_moe, "launch", record)
    for (n_tokens, hidden, inter, n_experts, top_k), dtype in zip(
        MODEL_SHAPES * 2, [torch.bfloat16] * 2 + [torch.float32] * 2
    ):
        plan = fused_moe.plan_moe(dtype, hw)
        r = _meta_routing(n_tokens, top_k, n_experts, plan.block_m)
        x = torch.empty(n_tokens, hidden, dtype=dtype, device="meta")
        w_gate_up = torch.empty(n_experts, 2 * inter, hidden, dtype=dtype, device="meta")
        w_down = torch.empty(n_experts, hidden, inter, dtype=dtype, device="meta")
        if transposed:  # Llama 4's layout: transposes of row-major (E, H, 2I) and (E, I, H)
            w_gate_up, w_down = (w.transpose(1, 2).contiguous().transpose(1, 2) for w in (w_gate_up, w_down))
        weights = torch.empty(n_tokens, top_k, dtype=dtype, device="meta")
        out, pre = fused_moe.fused_moe_forward(x, w_gate_up, w_down, weights, r, plan)
        fused_moe.fused_moe_backward(torch.empty_like(out), x, w_gate_up, w_down, weights, pre, r, plan)
        # Model widths are 32-byte multiples: no padded copy of the weights.
        assert fused_moe.expert_weight(w_gate_up) is w_gate_up and fused_moe.expert_weight(w_down) is w_down
    per_call = ["gate_up", "expert_matmul", "combine", "down_backward", "expert_matmul", "combine"]
    per_call += ["weight_grad"] * 2
    assert seen == [f"fused_moe_{k}" for k in per_call] * 4, seen
