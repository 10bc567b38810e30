"""Ascend fused_moe code paths the shared suite may not reach, forced and checked against the
float64 oracle (the smallest GEMM tiles on two AI cores: every program walks several work
items, every expert several row tiles, every GEMM several column blocks and reduction steps;
the same for fused_moe_clamped_swiglu, GPT-OSS's experts on those kernels), and the launch
plans at the model shapes of the benchmark presets and of GPT-OSS-20B on every SoC of the table
(run on meta tensors: the launch guard's checks, no kernel)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from liger_core.conformance.check import check, make_args
from liger_core.conformance.weights_in_place import *
from liger_core.ops.fused_moe import Routing, max_tiles
from liger_core.ops.fused_moe_clamped_swiglu import epilogue_args

from liger_ops_ascend import fused_moe, hardware
from liger_ops_ascend.launch import check as guard_check


def _small_tiles_on_two_cores(monkeypatch) -> None:
    # The weight gradient's tiles differ from the routed rows' (tuned apart): 32 weight rows.
    small = {"MOE_ROWS_BLOCK_M": 16, "MOE_ROWS_BLOCK_N": 16, "MOE_ROWS_BLOCK_K": 16, "MOE_COMBINE_BLOCK": 16}
    small.update(MOE_WGRAD_BLOCK_M=32, MOE_WGRAD_BLOCK_N=16, MOE_WGRAD_BLOCK_K=16)
    for name, size in small.items():
        monkeypatch.setattr(hardware, name, size)
    current = hardware.current
    monkeypatch.setattr(hardware, "current", lambda dev=None: dataclasses.replace(current(dev), ai_cores=2))


@pytest.mark.parametrize("transposed_weights", (False, True), ids=("contiguous", "transposed"))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_fused_moe_small_tiles_on_two_cores(monkeypatch, backend, device, dtype, transposed_weights):
    _small_tiles_on_two_cores(monkeypatch)
    # ~37 rows per expert: 3 row tiles each; hidden 50 (unaligned rows in bf16: padded copies)
    # in 4 column blocks; 2 * 24 gate-up rows.
    # Transposed weights: Llama 4's layout (hidden 50 then pads their columns instead).
    args = make_args(
        "fused_moe", device, tokens=37, hidden=50, intermediate=24, experts=3, top_k=3, dtype=dtype,
        transposed_weights=transposed_weights,
    )  # fmt: skip
    check(backend, "fused_moe", args)


@pytest.mark.parametrize(
    "dtype, interleaved",
    [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True)],
    ids=["fp32-interleaved", "fp32-concatenated", "bf16-interleaved"],
)
def test_fused_moe_clamped_swiglu_small_tiles_on_two_cores(monkeypatch, backend, device, dtype, interleaved):
    # fused_moe's forced paths with the biases (the gate-up epilogue's per tile, the gather-sum's
    # per sorted row) and the clamped SwiGLU, in GPT-OSS's layout (transposed weights; hidden 50
    # pads their columns in bf16). The clamps cut a third of the gates and up values in both
    # dtypes: float32 at the sample's 0.6; bf16 on the builder's 1/8 grid (``eighths``), where h is
    # exact, so no rounding moves a value across the limit the float64 oracle clamps at.
    _small_tiles_on_two_cores(monkeypatch)
    args = make_args(
        "fused_moe_clamped_swiglu", device, tokens=37, hidden=50, intermediate=24, experts=3, top_k=3, dtype=dtype,
        transposed_weights=True, interleaved=interleaved, eighths=dtype == torch.bfloat16,
    )  # fmt: skip
    check(backend, "fused_moe_clamped_swiglu", args)


# (tokens, hidden, intermediate, experts, top_k): the bench presets (Qwen3-30B-A3B, Mixtral-8x7B).
MODEL_SHAPES = [(4096, 2048, 768, 128, 8), (4096, 4096, 14336, 8, 2)]
# GPT-OSS-20B's experts layer (biases, interleaved gate and up, weights stored (E, H, 2I), (E, I, H)).
GPT_OSS_20B = (4096, 2880, 2880, 32, 4)


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


# The kernels of one forward and backward, in launch order: the backward takes the down weight's
# gradient right after the down backward (its inputs are then freed), the gate-up weight's last.
LAUNCHES = [
    f"fused_moe_{k}"
    for k in ("gate_up", "expert_matmul", "combine", "down_backward", "weight_grad", "expert_matmul", "combine")
    + ("weight_grad",)
]


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
        epilogue = epilogue_args(inter)
        out, pre = fused_moe.fused_moe_forward(x, w_gate_up, w_down, weights, r, plan, epilogue)
        fused_moe.fused_moe_backward(torch.empty_like(out), x, w_gate_up, w_down, weights, pre, r, plan, epilogue)
        # Model widths are 32-byte multiples: no padded copy of the weights.
        assert fused_moe.expert_weight(w_gate_up) is w_gate_up and fused_moe.expert_weight(w_down) is w_down
    assert seen == LAUNCHES * 4, seen


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("soc", list(hardware.SOC_TABLE))
def test_fused_moe_clamped_swiglu_gpt_oss_shape_passes_the_guard(monkeypatch, soc, dtype):
    # The clamped op's plan (bias tiles, the clamped epilogue's) at GPT-OSS-20B's layer.
    hw = hardware.for_soc(soc)
    seen = []

    def record(kernel, plan, hw, *args, **kwargs):
        guard_check(plan, hw)
        seen.append(plan.kernel)

    monkeypatch.setattr(fused_moe, "launch", record)
    n_tokens, hidden, inter, n_experts, top_k = GPT_OSS_20B
    plan = fused_moe.plan_moe(dtype, hw, gate_up_bias=True, down_bias=True, clamped=True)
    r = _meta_routing(n_tokens, top_k, n_experts, plan.block_m)
    meta = {"dtype": dtype, "device": "meta"}
    x = torch.empty(n_tokens, hidden, **meta)
    # GPT-OSS stores (E, H, 2I) and (E, I, H); the op takes their transposes.
    w_gate_up = torch.empty(n_experts, hidden, 2 * inter, **meta).transpose(1, 2)
    w_down = torch.empty(n_experts, inter, hidden, **meta).transpose(1, 2)
    b_gate_up, b_down = torch.empty(n_experts, 2 * inter, **meta), torch.empty(n_experts, hidden, **meta)
    weights = torch.empty(n_tokens, top_k, **meta)
    epilogue = epilogue_args(inter, 7.0, 1.702, 1.0, interleaved=True, clamped=True)
    out, pre = fused_moe.fused_moe_forward(x, w_gate_up, w_down, weights, r, plan, epilogue, b_gate_up, b_down)
    *_, dpre = fused_moe.fused_moe_backward(
        torch.empty_like(out), x, w_gate_up, w_down, weights, pre, r, plan, epilogue
    )
    assert fused_moe.expert_weight(w_gate_up) is w_gate_up and fused_moe.expert_weight(w_down) is w_down
    assert dpre.shape == (n_tokens * top_k, 2 * inter)  # the view the gate-up bias's gradient sums
    assert seen == LAUNCHES, seen
    # The bias rows are modelled where the kernels read them (fused_moe's plan has none).
    tiles = {t.name for t in plan.kernel("fused_moe_gate_up", 1, (), 0).tiles + plan.combine(1, 0, bias=True).tiles}
    assert {"bias_gate", "bias_up", "bias"} <= tiles
    base = fused_moe.plan_moe(dtype, hw)
    assert not any(t.name.startswith("bias") for t in base.kernel("fused_moe_gate_up", 1, (), 0).tiles)
