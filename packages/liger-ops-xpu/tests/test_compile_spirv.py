"""The compiled path without an Intel GPU: build the kernels to SPIR-V for an Intel target.

The interpreter runs kernels as Python, so it never sees what only the Triton compiler checks
(constexpr branches, loop-carried types, the launch options). Where the installed Triton has an
Intel backend, a subprocess (no TRITON_INTERPRET) compiles each kernel variant of the plans
below with the launch options the package would pass on an XPU, down to SPIR-V. Skipped where
the backend cannot be built here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SKIP = 77

_SCRIPT = r"""
import json, sys, types

try:
    import triton
    from triton.backends import backends
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except Exception as e:
    print(json.dumps({"skip": f"no Triton compiler: {e!r}"})); sys.exit(SKIP)
intel = backends.get("intel")
if intel is None:
    print(json.dumps({"skip": "this Triton has no Intel backend"})); sys.exit(SKIP)
# Building the backend compiles a small C helper against the SYCL headers just to name the
# device architecture; stand in for it with a fixed architecture where that is how it works.
init_globals = getattr(intel.compiler.__init__, "__globals__", {})
if "compile_module_from_src" in init_globals:
    init_globals["compile_module_from_src"] = lambda *a, **k: types.SimpleNamespace(parse_device_arch=lambda _: "pvc")
arch = {"architecture": 0, "name": "stand-in", "sub_group_sizes": [16, 32], "max_num_sub_groups": 64,
        "max_work_group_size": 1024, "has_fp64": True}
target = GPUTarget("xpu", arch, 32)
try:
    intel.compiler(target)
except Exception as e:
    print(json.dumps({"skip": f"cannot build the Intel backend here: {e!r}"})); sys.exit(SKIP)

import importlib
import torch
from liger_ops_xpu import hardware

results = []
for case in json.loads(sys.argv[1]):
    kernel = getattr(importlib.import_module("liger_ops_xpu." + case["module"]), case["kernel"])
    constants = case["constants"]
    options = hardware.launch_kwargs(kernel, torch.device("xpu"), case["num_warps"], case["register_heavy"])
    row = {"kernel": case["kernel"], "constants": constants, "options": options}
    try:
        src = ASTSource(fn=kernel, signature={**case["signature"], **{k: "constexpr" for k in constants}},
                        constexprs={(kernel.arg_names.index(k),): v for k, v in constants.items()})
        compiled = triton.compile(src, target=target, options=options)
        row["build_flags"] = getattr(compiled.metadata, "build_flags", "")
        row["spirv_bytes"] = len(compiled.asm.get("spv", b""))
    except Exception as e:
        row["error"] = repr(e)[:2000]
    results.append(row)
print(json.dumps({"results": results}))
"""


def _case(module: str, kernel: str, signature: dict, constants: dict, num_warps: int, register_heavy: bool = True):
    return {
        "module": module,
        "kernel": kernel,
        "signature": signature,
        "constants": constants,
        "num_warps": num_warps,
        "register_heavy": register_heavy,
    }


def _rms_norm_cases() -> list[dict]:
    from liger_ops_xpu._tiling import plan_tiles

    fwd = {"X": "*bf16", "R": "*fp32", "W": "*fp32", "Y": "*bf16", "S": "*bf16", "RSTD": "*fp32"}
    fwd.update({k: "i32" for k in ("x_row_stride", "r_row_stride", "y_row_stride", "s_row_stride", "n_rows", "n_cols")})
    fwd.update({"eps": "fp32", "offset": "fp32"})
    bwd = {"DY": "*bf16", "X": "*bf16", "W": "*fp32", "RSTD": "*fp32", "DX": "*bf16", "DW_PARTIAL": "*fp32"}
    bwd.update({"DS": "*bf16", "DR": "*fp32"})
    strides = ("dy_row_stride", "x_row_stride", "dx_row_stride", "ds_row_stride", "dr_row_stride")
    bwd.update({k: "i32" for k in (*strides, "n_rows", "n_cols")})
    bwd.update({"offset": "fp32", "tiles_per_program": "i32"})
    cases = []
    # (n_cols, has_weight, round_x_hat, residual): multi-row tiles, one row per tile at the fused cap, chunked.
    for n_cols, has_weight, round_x_hat, residual in [
        (64, True, True, False),
        (16384, True, False, True),
        (20000, True, True, True),
        (20000, False, False, False),
    ]:
        plan = plan_tiles(n_cols)
        common = {"HAS_WEIGHT": has_weight, "ROUND_X_HAT": round_x_hat, "BLOCK_M": plan.block_m}
        common.update(BLOCK_N=plan.block_n, N_CHUNKS=plan.n_chunks)
        cases.append(
            _case("rms_norm", "_rms_norm_forward_kernel", fwd, {**common, "HAS_RESIDUAL": residual}, plan.num_warps)
        )
        bwd_constants = {**common, "HAS_DS": residual, "STATIC_TILES": 0}
        cases.append(_case("rms_norm", "_rms_norm_backward_kernel", bwd, bwd_constants, plan.num_warps))
    return cases


def _sig(pointers: str, ints: str = "", floats: str = "", dtype: str = "bf16") -> dict:
    """A signature from space-separated names: pointers (``name:type`` to override ``dtype``),
    i32 scalars, fp32 scalars."""
    sig = {}
    for p in pointers.split():
        name, _, ty = p.partition(":")
        sig[name] = "*" + (ty or dtype)
    sig.update({k: "i32" for k in ints.split()})
    sig.update({k: "fp32" for k in floats.split()})
    return sig


def _norm_cases() -> list[dict]:
    """One compiled variant per 1.1 norm kernel: a wide chunked row or a multi-row tile."""
    from liger_ops_xpu._tiling import plan_blocks, plan_tiles
    from liger_ops_xpu.group_norm import plan_groups
    from liger_ops_xpu.poly_norm import plan_poly_norm

    cases = []
    ln = plan_tiles(20000)
    ln_c = {"HAS_WEIGHT": True, "HAS_BIAS": True, "BLOCK_M": ln.block_m, "BLOCK_N": ln.block_n, "N_CHUNKS": ln.n_chunks}
    fwd = _sig("X W:fp32 B:fp32 Y MEAN:fp32 RSTD:fp32", "x_row_stride y_row_stride n_rows n_cols", "eps")
    cases.append(_case("layer_norm", "_layer_norm_forward_kernel", fwd, ln_c, ln.num_warps))
    bwd = _sig("DY X W:fp32 MEAN:fp32 RSTD:fp32 DX DW_PARTIAL:fp32 DB_PARTIAL:fp32")
    bwd.update(_sig("", "dy_row_stride x_row_stride dx_row_stride n_rows n_cols tiles_per_program"))
    cases.append(_case("layer_norm", "_layer_norm_backward_kernel", bwd, {**ln_c, "STATIC_TILES": 0}, ln.num_warps))

    pn = plan_poly_norm(4096)
    pn_c = {"BLOCK_M": pn.block_m, "BLOCK_N": pn.block_n, "N_CHUNKS": pn.n_chunks}
    fwd = _sig("X W:fp32 B:fp32 Y RSTD:fp32", "x_row_stride y_row_stride n_rows n_cols", "eps")
    cases.append(_case("poly_norm", "_poly_norm_forward_kernel", fwd, pn_c, pn.num_warps))
    bwd = _sig("DY X W:fp32 RSTD:fp32 DX PARTIAL:fp32", "dy_row_stride x_row_stride dx_row_stride n_rows n_cols")
    bwd.update(_sig("", "tiles_per_program"))
    cases.append(_case("poly_norm", "_poly_norm_backward_kernel", bwd, {**pn_c, "STATIC_TILES": 0}, pn.num_warps))

    gn = plan_groups(10, 4096)
    gn_c = {"HAS_WEIGHT": True, "HAS_BIAS": True, "BLOCK_C": gn.block_c, "BLOCK_S": gn.block_s}
    gn_c.update(N_C_CHUNKS=gn.n_c_chunks, N_S_CHUNKS=gn.n_s_chunks)
    ints = "n_channels channels_per_group n_spatial n_groups"
    fwd = _sig("X W:fp32 B:fp32 Y MEAN:fp32 RSTD:fp32", ints, "eps")
    cases.append(_case("group_norm", "_group_norm_forward_kernel", fwd, gn_c, gn.num_warps))
    bwd = _sig("DY X W:fp32 MEAN:fp32 RSTD:fp32 DX DW_PARTIAL:fp32 DB_PARTIAL:fp32", ints)
    cases.append(_case("group_norm", "_group_norm_backward_kernel", bwd, gn_c, gn.num_warps))

    dp = plan_blocks(4096)
    dp_c = {"HAS_BETA": True, "BLOCK_M": dp.block_m, "BLOCK_N": dp.block_n}
    fwd = _sig("X ALPHA:fp32 GAMMA:fp32 BETA:fp32 Y", "x_row_stride y_row_stride n_rows n_cols")
    cases.append(_case("dyt", "_dyt_forward_kernel", fwd, dp_c, dp.num_warps, register_heavy=False))
    bwd = _sig("DY X ALPHA:fp32 GAMMA:fp32 DX DGAMMA_PARTIAL:fp32 DBETA_PARTIAL:fp32 DALPHA_PARTIAL:fp32")
    bwd.update(_sig("", "dy_row_stride x_row_stride dx_row_stride n_rows n_cols tiles_per_program"))
    cases.append(
        _case(
            "dyt",
            "_dyt_backward_kernel",
            bwd,
            {**dp_c, "NEED_PARTIAL": True, "STATIC_TILES": 0},
            dp.num_warps,
            register_heavy=False,
        )
    )

    # attn_res at liger-kernel's benchmark depth (8 blocks), LLaMA-3-8B's hidden size.
    from liger_ops_xpu.attn_res import plan_attn_res

    bm, bn, bb, warps = plan_attn_res(4096, 8)
    ar_c = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_B": bb, "STATIC_BLOCKS": 0, "STATIC_CHUNKS": 0}
    ints = "v_block_stride v_row_stride h_row_stride n_blocks n_rows n_cols n_chunks"
    fwd = _sig("V W_QUERY W_NORM H SCORE:fp32 RSTD:fp32 LSE:fp32", ints, "eps")
    cases.append(_case("attn_res", "_attn_res_forward_kernel", fwd, ar_c, warps))
    bwd = _sig("DH V W_QUERY W_NORM SCORE:fp32 RSTD:fp32 LSE:fp32 DV PARTIAL:fp32")
    ints = "dh_row_stride v_block_stride v_row_stride dv_block_stride dv_row_stride n_blocks n_rows n_cols n_chunks"
    bwd.update(_sig("", ints + " tiles_per_program"))
    cases.append(_case("attn_res", "_attn_res_backward_kernel", bwd, {**ar_c, "STATIC_TILES": 0}, warps))
    return cases


def _activation_cases() -> list[dict]:
    """One compiled variant per 1.2 kernel (both glu activations; the rotary kernel with MROPE on)."""
    from liger_ops_xpu import hardware
    from liger_ops_xpu._tiling import plan_flat, plan_tiles
    from liger_ops_xpu.rotary import plan_rotary

    cases = []
    flat = plan_flat(1 << 20)
    for act in (0, 1):
        c = {"ACT": act, "BLOCK": flat.block}
        fwd = _sig("A B C", "n")
        cases.append(_case("glu", "_glu_forward_kernel", fwd, c, flat.num_warps, register_heavy=False))
        bwd = _sig("DC A B DA DB", "n")
        cases.append(_case("glu", "_glu_backward_kernel", bwd, c, flat.num_warps, register_heavy=False))

    # fused_gate_up_swiglu (1.6): one row's column blocks of a gate-up tensor, LLaMA-3-8B's 14336.
    gate_up = plan_flat(14336)
    c = {"ACT": 0, "BLOCK": gate_up.block}
    fwd = _sig("GU C", "n_cols n_col_blocks gu_row_stride")
    cases.append(_case("glu", "_gate_up_forward_kernel", fwd, c, gate_up.num_warps, register_heavy=False))
    bwd = _sig("DC GU DGU", "n_cols n_col_blocks gu_row_stride dgu_row_stride")
    cases.append(_case("glu", "_gate_up_backward_kernel", bwd, c, gate_up.num_warps, register_heavy=False))

    c = {"BLOCK": flat.block}
    cases.append(_case("relu_squared", "_relu_squared_forward_kernel", _sig("X Y", "n"), c, flat.num_warps, False))
    cases.append(_case("relu_squared", "_relu_squared_backward_kernel", _sig("DY X DX", "n"), c, flat.num_warps, False))
    # multi_token_attention (1.7): the causal fill, its arguments in the kernel's order.
    fill = {**_sig("X Y", "n_queries n_keys"), **_sig("", "", "fill"), **_sig("", "n_elements")}
    cases.append(_case("multi_token_attention", "_causal_fill_kernel", fill, c, flat.num_warps, False))

    strides = " ".join(f"{t}_s{a}" for t in ("q", "k", "qo", "ko") for a in "bhs")
    rotary = _sig("Q K QO KO COS:fp32 SIN:fp32", f"{strides} c_saxis c_sb c_ss seq n_qh n_kh half sec0 sec1")
    rp = plan_rotary(32, 8, 128)  # LLaMA-3-8B's heads at head_dim 128
    c = {
        "MROPE": True,
        "INTERLEAVED": False,
        "PAIR_BITS": 0,
        "BACKWARD": True,
        "HEADS_BLOCK": rp.heads_block,
        "HALF_BLOCK": rp.half_block,
    }
    c.update(N_Q_CHUNKS=rp.n_q_chunks, N_K_CHUNKS=rp.n_k_chunks)
    cases.append(_case("rotary", "_rotary_kernel", rotary, c, rp.num_warps, register_heavy=False))
    # llama4_rope: interleaved pairs (whole-head tiles, the partner d ^ 1 a second load), one table value per pair.
    c = {**c, "MROPE": False, "INTERLEAVED": True}
    cases.append(_case("rotary", "_rotary_kernel", rotary, c, rp.num_warps, register_heavy=False))
    # ... and each pair as one word: 32-bit for bf16, 64-bit for fp32.
    c = {**c, "PAIR_BITS": 32}
    cases.append(_case("rotary", "_rotary_kernel", rotary, c, rp.num_warps, register_heavy=False))
    rotary_fp32 = _sig("Q K QO KO COS SIN", f"{strides} c_saxis c_sb c_ss seq n_qh n_kh half sec0 sec1", dtype="fp32")
    c = {**c, "PAIR_BITS": 64}
    cases.append(_case("rotary", "_rotary_kernel", rotary_fp32, c, rp.num_warps, register_heavy=False))

    for n_cols in (4096, 40000):
        plan = plan_tiles(n_cols)
        c = {"BLOCK_M": plan.block_m, "BLOCK_N": plan.block_n, "N_CHUNKS": plan.n_chunks}
        fwd = _sig("X Y", "x_row_stride y_row_stride n_rows n_cols")
        bwd = _sig("DY Y DX", "dy_row_stride y_row_stride dx_row_stride n_rows n_cols")
        cases.append(_case("softmax", "_softmax_forward_kernel", fwd, c, plan.num_warps))
        cases.append(_case("softmax", "_softmax_backward_kernel", bwd, c, plan.num_warps))
        sc = {**c, "BISECTION_STEPS": hardware.SPARSEMAX_BISECTION_STEPS}
        sc["MICHELOT_STEPS"] = hardware.SPARSEMAX_MICHELOT_STEPS
        cases.append(_case("sparsemax", "_sparsemax_forward_kernel", fwd, sc, plan.num_warps))
        cases.append(_case("sparsemax", "_sparsemax_backward_kernel", bwd, c, plan.num_warps))
    return cases


def _loss_cases() -> list[dict]:
    """The cross-entropy pair with every option on (a 128k vocabulary in 4096-wide blocks) and the
    divergence pair for the general JSD and KL with log targets."""
    from liger_ops_xpu import hardware
    from liger_ops_xpu._cross_entropy import plan_vocab
    from liger_ops_xpu._matmul import plan_matmul
    from liger_ops_xpu._tiling import plan_blocks
    from liger_ops_xpu.divergence import JSD, KL

    cases = []
    plan = plan_vocab(128256)
    c = {"HAS_WEIGHT": True, "HAS_SMOOTHING": True, "HAS_SOFTCAP": True, "BLOCK_N": plan.block_n}
    c["N_CHUNKS"] = plan.n_chunks
    opts = "ignore_index:i32 lse_square_scale label_smoothing softcap w_total"
    fwd = _sig("X Y:i64 W:fp32 LOSS:fp32 ZLOSS:fp32 LSE:fp32", "x_row_stride n_cols", opts.replace(":i32", ""))
    fwd["ignore_index"] = "i32"
    cases.append(_case("_cross_entropy", "_cross_entropy_forward_kernel", fwd, c, plan.num_warps))
    bwd = _sig("X Y:i64 W:fp32 LSE:fp32 GRAD_OUT:fp32 DX", "x_row_stride dx_row_stride grad_out_stride n_cols")
    bwd.update(_sig("", "ignore_index", "lse_square_scale label_smoothing softcap w_total loss_scale z_scale"))
    cases.append(_case("_cross_entropy", "_cross_entropy_backward_kernel", bwd, c, plan.num_warps))

    dp = plan_blocks(128256)
    for kind, log_target in ((JSD, False), (KL, True)):
        c = {"KIND": kind, "LOG_TARGET": log_target, "HAS_LABELS": kind == JSD, "BLOCK_M": dp.block_m}
        c["BLOCK_N"] = dp.block_n
        fwd = _sig("X Y LABELS:i64 OUT:fp32 PARTIAL:fp32", "x_row_stride y_row_stride out_row_stride n_rows n_cols")
        fwd.update(_sig("", "ignore_index", "beta eps"))
        fc = {**c, "STORE_ELEMENTS": kind == KL}
        cases.append(_case("divergence", "_divergence_forward_kernel", fwd, fc, dp.num_warps, register_heavy=False))
        bwd = _sig("X Y LABELS:i64 GRAD_OUT:fp32 DX", "x_row_stride y_row_stride g_row_stride g_col_stride")
        bwd.update(_sig("", "dx_row_stride n_rows n_cols ignore_index", "beta eps scale"))
        cases.append(_case("divergence", "_divergence_backward_kernel", bwd, c, dp.num_warps, register_heavy=False))

    # fused_ce_tvd: a 128k vocabulary (the cross-entropy's plan), both upstream gradients.
    c = {"BLOCK_N": plan.block_n, "N_CHUNKS": plan.n_chunks}
    fwd = _sig("S T Y:i64 CE:fp32 TVD:fp32 S_LSE:fp32 T_LSE:fp32 SIGMA:fp32", "s_row_stride t_row_stride n_cols")
    fwd["ignore_index"] = "i32"
    cases.append(_case("divergence", "_fused_ce_tvd_forward_kernel", fwd, c, plan.num_warps))
    bwd = _sig("S T Y:i64 S_LSE:fp32 T_LSE:fp32 SIGMA:fp32 UP_CE:fp32 UP_TVD:fp32 DX")
    bwd.update(_sig("", "s_row_stride t_row_stride dx_row_stride n_cols ignore_index"))
    bc = {**c, "HAS_UP_CE": True, "HAS_UP_TVD": True}
    cases.append(_case("divergence", "_fused_ce_tvd_backward_kernel", bwd, bc, plan.num_warps))

    # fused_linear_scaled_cross_entropy: a 128k vocabulary (the cross-entropy's plan), both upstream gradients.
    fwd = _sig("X Y:i64 NLL:fp32 ENTROPY:fp32 LSE:fp32", "x_row_stride n_cols ignore_index", "inv_temperature")
    cases.append(
        _case(
            "fused_linear_scaled_cross_entropy",
            "_fused_linear_scaled_cross_entropy_forward_kernel",
            fwd,
            c,
            plan.num_warps,
        )
    )
    bwd = _sig("X Y:i64 LSE:fp32 ENTROPY:fp32 UP_NLL:fp32 UP_ENTROPY:fp32", "x_row_stride n_cols ignore_index")
    bwd.update(_sig("", "", "inv_temperature"))
    bc = {**c, "HAS_UP_NLL": True, "HAS_UP_ENTROPY": True}
    cases.append(
        _case(
            "fused_linear_scaled_cross_entropy",
            "_fused_linear_scaled_cross_entropy_backward_kernel",
            bwd,
            bc,
            plan.num_warps,
        )
    )

    mm = _sig("A B C:fp32", "M N K a_row_stride b_row_stride c_row_stride")
    block_m, block_n, block_k = plan_matmul(8192, 128256, 4096)  # a chunk of LLaMA-3's logits
    c = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "N_K_BLOCKS": 4096 // block_k, "UPCAST": False}
    cases.append(_case("_matmul", "_matmul_nt_kernel", mm, c, hardware.MATMUL_NUM_WARPS))
    return cases


def _moe_cases() -> list[dict]:
    """fused_moe's kernels at its bf16 plan (Qwen3-30B-A3B's expert shapes do not enter: every
    size is a runtime argument), with both weight-gradient gathers; and fused_moe_clamped_swiglu's
    specialisations of them (CLAMPED activation, HAS_BIAS gate-up epilogue and gather-sum)."""
    import torch

    from liger_ops_xpu.fused_moe import plan_moe

    plan = plan_moe(torch.bfloat16, torch.device("xpu"))
    gemm = {"BLOCK_M": plan.rows.block_m, "BLOCK_N": plan.rows.block_n, "BLOCK_K": plan.rows.block_k}
    gemm.update(PRECISION=plan.precision, UPCAST=False, K_STEPS=0)
    warps = plan.rows.launch["num_warps"]
    routing = "TILE_EXPERT:i32 TILE_ROW_START:i32 EXPERT_OFFSETS:i32 N_TILES:i32"
    epilogue = "pair_step up_shift"
    epilogue_floats = "limit alpha up_offset"
    cases = []
    gate_up = _sig(f"X W BIAS TOKEN_OF_ROW:i32 {routing} PRE ACT")
    strides = "x_row_stride w_expert_stride w_row_stride w_k_stride bias_expert_stride pre_row_stride act_row_stride"
    gate_up.update(_sig("", f"hidden intermediate {strides} {epilogue}", epilogue_floats))
    # fused_moe's (no bias, silu(gate) * up), fused_moe_clamped_swiglu's (biased, clamped).
    for clamped in (False, True):
        c = {**gemm, "HAS_BIAS": clamped, "CLAMPED": clamped}
        cases.append(_case("fused_moe", "_fused_moe_gate_up_kernel", gate_up, c, warps))
    matmul = _sig(
        f"A W {routing} OUT", "n_cols k_dim a_row_stride w_expert_stride w_col_stride w_k_stride out_row_stride"
    )
    cases.append(_case("fused_moe", "_fused_moe_expert_matmul_kernel", matmul, gemm, warps))
    down_bwd = _sig(f"DY W WEIGHTS:fp32 PRE TOKEN_OF_ROW:i32 SLOT_OF_ROW:i32 {routing} DPRE WACT DS_PARTIAL:fp32")
    strides = "dy_row_stride w_expert_stride w_row_stride w_col_stride pre_row_stride dpre_row_stride wact_row_stride"
    down_bwd.update(_sig("", f"hidden intermediate {strides} n_rows {epilogue}", epilogue_floats))
    for clamped in (False, True):
        cases.append(
            _case("fused_moe", "_fused_moe_down_backward_kernel", down_bwd, {**gemm, "CLAMPED": clamped}, warps)
        )
    dw = _sig("P Q TOKEN_OF_ROW:i32 EXPERT_OFFSETS:i32 DW")
    dw.update(_sig("", "m_dim n_dim p_row_stride q_row_stride dw_expert_stride dw_row_stride"))
    wgrad = {"BLOCK_M": plan.wgrad.block_m, "BLOCK_N": plan.wgrad.block_n, "BLOCK_K": plan.wgrad.block_k}
    wgrad.update(PRECISION=plan.precision, UPCAST=False, K_STEPS=0)
    for p_by_token in (True, False):
        c = {**wgrad, "P_BY_TOKEN": p_by_token, "Q_BY_TOKEN": not p_by_token}
        cases.append(_case("fused_moe", "_fused_moe_weight_grad_kernel", dw, c, plan.wgrad.launch["num_warps"]))
    combine = _sig(
        "Y WEIGHTS ROW_OF_SLOT:i32 BIAS EXPERT_OF_ROW:i32 OUT", "n_cols y_row_stride bias_expert_stride out_row_stride"
    )
    # The forward's gather-sum without and with the down projection's bias.
    for has_bias in (False, True):
        c = {"TOP_K": 8, "WEIGHTED": True, "HAS_BIAS": has_bias, "BLOCK_N": plan.combine_block}
        cases.append(_case("fused_moe", "_fused_moe_combine_kernel", combine, c, 4, register_heavy=False))
    return cases


def _embedding_cases() -> list[dict]:
    """embedding's gather and its backward's two kernels (the zero fill of unused rows, the
    segment sums' ``while`` over a run whose end is loaded), at LLaMA-3-8B's hidden size."""
    from liger_ops_xpu.embedding import plan_embedding, plan_segment_sums, plan_zero_rows

    block_m, block_n, num_warps = plan_embedding(4096)
    fwd = _sig("W IDX:i64 Y", "n_idx n_cols w_row_stride")
    c = {"BLOCK_M": block_m, "BLOCK_N": block_n}
    cases = [_case("embedding", "_embedding_forward_kernel", fwd, c, num_warps, register_heavy=False)]
    block_m, block_n, num_warps = plan_zero_rows(4096)
    zero = _sig("LOOKED_UP:i8 DW", "n_rows n_cols dw_row_stride padding_idx")
    c = {"BLOCK_M": block_m, "BLOCK_N": block_n}
    cases.append(_case("embedding", "_embedding_zero_unused_rows_kernel", zero, c, num_warps, register_heavy=False))
    block_n, num_warps = plan_segment_sums(4096)
    sums = _sig("DY SORTED_IDX:i32 ORDER:i64 DW", "n_idx n_cols dy_row_stride dw_row_stride padding_idx")
    cases.append(
        _case(
            "embedding", "_embedding_segment_sums_kernel", sums, {"BLOCK_N": block_n}, num_warps, register_heavy=False
        )
    )
    return cases


def _modulated_rms_norm_cases() -> list[dict]:
    """modulated_rms_norm's fused kernels at the LLaMA hidden size and a chunked width: the
    forward at the norms' plan; the backward for a sequence per modulation row (fp32 partial
    slots) and for one modulation row per token (slots in scale's dtype)."""
    import torch

    from liger_ops_xpu._tiling import plan_tiles
    from liger_ops_xpu.modulated_rms_norm import _modulated_rms_norm_backward_kernel, plan_backward_tiles

    cases = []
    for n_cols in (4096, 20000):
        plan = plan_tiles(n_cols)
        fwd = _sig("X W:fp32 SCALE SHIFT Y RSTD:fp32", "x_row_stride y_row_stride n_rows n_cols rows_per_modulation")
        fwd.update({"eps": "fp32", "offset": "fp32"})
        c = {"HAS_WEIGHT": True, "HAS_SHIFT": True, "ROUND_X_HAT": True, "BLOCK_M": plan.block_m}
        c.update({"BLOCK_N": plan.block_n, "N_CHUNKS": plan.n_chunks})
        cases.append(_case("modulated_rms_norm", "_modulated_rms_norm_forward_kernel", fwd, c, plan.num_warps))
        for per, slot in ((512, "fp32"), (1, "bf16")):
            plan = plan_backward_tiles(n_cols, per, torch.device("cpu"))
            bwd = _sig(f"DY X W:fp32 SCALE RSTD:fp32 DX DW_PARTIAL:fp32 DSCALE:{slot} DSHIFT:{slot}")
            strides = "dy_row_stride x_row_stride dx_row_stride n_mod_rows n_cols"
            bwd.update(_sig("", f"{strides} rows_per_modulation rows_per_chunk n_chunks mod_rows_per_unit"))
            bwd["offset"] = "fp32"
            # In the kernel's argument order (offset sits between the ints).
            bwd = {a: bwd[a] for a in _modulated_rms_norm_backward_kernel.arg_names if a in bwd}
            c = {"HAS_WEIGHT": True, "HAS_SHIFT": True, "ROUND_X_HAT": True, "BLOCK_M": plan.block_m}
            c.update({"BLOCK_N": plan.block_n, "N_CHUNKS": plan.n_chunks})
            cases.append(_case("modulated_rms_norm", "_modulated_rms_norm_backward_kernel", bwd, c, plan.num_warps))
    return cases


def _mhc_cases() -> list[dict]:
    """mhc_coeffs' Sinkhorn kernels at the paper's 4 streams and liger-kernel's 20 iterations."""
    from liger_ops_xpu.mhc import plan_mhc

    block_t, block_hc, warps = plan_mhc(4, 8192)
    c = {"TMAX": 20, "BLOCK_T": block_t, "BLOCK_HC": block_hc}
    fwd = _sig("MIX:fp32 BIAS:fp32 ALPHAS:fp32 H_PRE:fp32 H_POST:fp32 H_RES:fp32 HIST:fp32", "n_tokens hc")
    fwd.update(_sig("", "", "pre_eps sinkhorn_eps post_mult"))
    bwd = _sig("MIX:fp32 BIAS:fp32 ALPHAS:fp32 HIST:fp32 D_PRE:fp32 D_POST:fp32 D_RES:fp32 D_LOGITS:fp32")
    bwd.update(_sig("", "n_tokens hc", "sinkhorn_eps post_mult"))
    return (
        [
            _case("mhc", "_mhc_coeffs_forward_kernel", fwd, {**c, "STORE_HIST": True}, warps, register_heavy=False),
            _case("mhc", "_mhc_coeffs_backward_kernel", bwd, c, warps, register_heavy=False),
        ]
        + _mhc_projection_cases()
        + _mhc_mix_cases()
    )


def _mhc_projection_cases() -> list[dict]:
    """mhc_coeffs' projection at 4 streams of 4096 channels (K = 16384, M = 24), bf16 streams: the
    forward with bf16 phi (TF32 dot) and float32 phi (IEEE dot), the fused backward with each dot."""
    from liger_ops_xpu import hardware

    block_m = 32
    fwd_c = {"STATIC_STEPS": 0, "BLOCK_T": hardware.MHC_PROJ_BLOCK_T, "BLOCK_K": hardware.MHC_PROJ_BLOCK_K,
             "BLOCK_M": block_m}  # fmt: skip
    cases = []
    for phi_dtype, precision in (("bf16", "tf32"), ("fp32", "ieee")):
        fwd = _sig(f"X PHI:{phi_dtype} MIX_PARTIAL:fp32 SQUARE_PARTIAL:fp32", "n_tokens k n_mix k_per_split n_k_steps")
        c = {**fwd_c, "PRECISION": precision}
        cases.append(_case("mhc", "_mhc_projection_forward_kernel", fwd, c, hardware.MHC_PROJ_NUM_WARPS, False))
    bwd = _sig("X PHI D_PROJ:fp32 COEF:fp32 D_X D_PHI_PARTIAL:fp32", "n_tokens k n_mix tokens_per_split n_token_steps")
    bwd_c = {"STATIC_STEPS": 0, "BLOCK_T": hardware.MHC_PROJ_BACKWARD_BLOCK_T,
             "BLOCK_K": hardware.MHC_PROJ_BACKWARD_BLOCK_K, "BLOCK_M": block_m}  # fmt: skip
    warps = hardware.MHC_PROJ_BACKWARD_NUM_WARPS
    for precision in ("tf32", "ieee"):
        c = {**bwd_c, "PRECISION": precision}
        cases.append(_case("mhc", "_mhc_projection_backward_kernel", bwd, c, warps, register_heavy=False))
    return cases


def _mhc_mix_cases() -> list[dict]:
    """mhc_pre's and mhc_post_res's stream mixes at 4 streams of Llama-3-8B's 4096 channels, bf16
    streams and float32 maps (as mhc_coeffs returns them)."""
    from liger_ops_xpu.mhc import plan_mix

    cases = []
    for module_ops, square in ((("pre", "X H_PRE:fp32 OUT", "X H_PRE:fp32 D_OUT D_X D_H_PRE:fp32"), False),
                               (("post_res", "X F_OUT H_POST:fp32 H_RES:fp32 OUT",
                                 "X F_OUT H_POST:fp32 H_RES:fp32 D_OUT D_X D_F_OUT D_H_POST:fp32 D_H_RES:fp32"), True)):  # fmt: skip
        name, fwd, bwd = module_ops
        block_t, block_hc, block_c, warps = plan_mix(4, 8192, 4096, square=square)
        c = {"BLOCK_T": block_t, "BLOCK_HC": block_hc, "BLOCK_C": block_c, "STATIC_CHUNKS": 0}
        for direction, pointers in (("forward", fwd), ("backward", bwd)):
            sig = _sig(pointers, "n_tokens hc n_channels n_chunks")
            cases.append(_case("mhc", f"_mhc_{name}_{direction}_kernel", sig, c, warps, register_heavy=False))
    return cases


def _neighborhood_attention_cases() -> list[dict]:
    """fused_neighborhood_attention (1.8): the forward, dQ and dK/dV kernels at the bf16 plan for
    head_dim 64 (the bench's) and 256 (smaller row blocks), runtime band trip counts."""
    import torch

    from liger_ops_xpu import fused_neighborhood_attention as nat

    kernels = (
        "_fused_neighborhood_attention_forward_kernel",
        "_fused_neighborhood_attention_backward_dq_kernel",
        "_fused_neighborhood_attention_backward_dkdv_kernel",
    )
    cases = []
    for head_dim in (64, 256):
        plan = nat.plan_fused_neighborhood_attention(4096, head_dim, torch.bfloat16, torch.device("xpu"))
        c = {"BLOCK_M": plan.block_m, "BLOCK_N": plan.block_n, "BLOCK_D": plan.block_d}
        c.update(PRECISION=plan.precision, UPCAST=False, STATIC_STEPS=0)
        for name in kernels:
            kernel = getattr(nat, name)
            sig = {}
            for arg in kernel.arg_names:
                if arg in c:
                    continue
                if arg in ("LSE", "DELTA"):
                    sig[arg] = "*fp32"
                elif arg.isupper():
                    sig[arg] = "*bf16"
                else:
                    sig[arg] = "fp32" if arg == "scale" else "i32"
            cases.append(_case("fused_neighborhood_attention", name, sig, c, plan.launch["num_warps"]))
    return cases


def _multi_token_attention_cases() -> list[dict]:
    """multi_token_attention's direct convolution (forward, input gradient, weight + bias partial
    sums) at liger-kernel's benchmark shape (4 channels of 512 x 512, a 3 x 3 kernel, bf16), with
    a bias and the runtime item count of the weight gradient's persistent grid."""
    import triton

    from liger_ops_xpu import hardware
    from liger_ops_xpu import multi_token_attention as mta

    tiles = mta.plan_conv_tiles(512, 512, 4)
    c = {"BLOCK_C": tiles.block_c, "BLOCK_M": tiles.block_m, "BLOCK_N": tiles.block_n}
    c.update(CI_PER_GROUP=4, CO_PER_GROUP=4, KERNEL_H=3, KERNEL_W=3)
    constants = {
        "_mta_conv_forward_kernel": {**c, "HAS_BIAS": True},
        "_mta_conv_input_grad_kernel": c,
        "_mta_conv_weight_grad_kernel": {**c, "BLOCK_TAPS": triton.next_power_of_2(4 * 3 * 3), "STATIC_ITEMS": 0},
    }
    cases = []
    for name, kernel_constants in constants.items():
        kernel = getattr(mta, name)
        sig = {}
        for arg in kernel.arg_names:
            if arg not in kernel_constants:
                sig[arg] = ("*fp32" if arg == "PARTIAL" else "*bf16") if arg.isupper() else "i32"
        cases.append(_case("multi_token_attention", name, sig, kernel_constants, hardware.MTA_CONV_NUM_WARPS))
    return cases


def _cases() -> list[dict]:
    return (
        _rms_norm_cases()
        + _norm_cases()
        + _activation_cases()
        + _loss_cases()
        + _moe_cases()
        + _embedding_cases()
        + _modulated_rms_norm_cases()
        + _mhc_cases()
        + _neighborhood_attention_cases()
        + _multi_token_attention_cases()
    )


def test_kernels_compile_to_spirv_for_an_intel_target(tmp_path):
    cases = _cases()
    src = Path(__file__).resolve().parents[1] / "src"
    core_src = Path(__file__).resolve().parents[2] / "liger-core" / "src"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), str(core_src), env.get("PYTHONPATH", "")) if p)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    proc = subprocess.run(
        [sys.executable, "-c", f"SKIP = {SKIP}\n" + _SCRIPT, json.dumps(cases)],
        env=env,
        check=False,  # the exit status says skip, pass or fail
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {}
    if proc.returncode == SKIP:
        pytest.skip(report.get("skip", "no Intel Triton compiler here"))
    assert proc.returncode == 0 and "results" in report, proc.stderr[-4000:]
    errors = [row for row in report["results"] if "error" in row]
    assert not errors, json.dumps(errors, indent=1)
    assert len(report["results"]) == len(cases)
    for row in report["results"]:
        assert row["spirv_bytes"] > 0
        mode = row["options"].get("grf_mode")
        if mode in ("256", "large"):
            assert "-cl-intel-256-GRF-per-thread" in row["build_flags"], row
