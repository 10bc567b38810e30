"""Compile liger-ops-cuda's loss kernels to cubin for an H100/H200 (sm_90a) without a GPU.

Triton's NVIDIA backend and its bundled ptxas need no device, so the real compiler (not the
interpreter) checks every kernel variant here: type errors across branches, constexpr paths,
pointer arithmetic. Run by tests/test_compile_losses.py in a subprocess (the interpreter must
be off):

    python compile_loss_kernels.py          # a variant per path (quick)
    python compile_loss_kernels.py --all    # every constexpr combination (250 kernels, ~1 min)

Exit status 0: all compiled; `compile_sm90.SKIP`: no NVIDIA Triton backend here (skip); 1: a
kernel failed.
"""

from __future__ import annotations

import inspect
import itertools
import os
import sys

from compile_sm90 import SKIP, require_nvidia_backend, sm90_compiler


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: the interpreter does not compile", file=sys.stderr)
        return SKIP
    require_nvidia_backend()
    triton, ASTSource, target = sm90_compiler()
    try:
        from liger_ops_cuda import _cross_entropy as K
        from liger_ops_cuda import _tiling
        from liger_ops_cuda import divergence as D
        from liger_ops_cuda import fused_linear_cross_entropy as F
        from liger_ops_cuda import fused_linear_scaled_cross_entropy as SCE
    except Exception as e:  # noqa: BLE001 - any import failure means: cannot check here
        print(f"no Triton compiler: {e!r}", file=sys.stderr)
        return SKIP
    everything = "--all" in sys.argv

    def compile_kernel(fn, types, consts):
        sig = {n: "constexpr" if n in consts else types[n] for n in inspect.signature(fn.fn).parameters}
        triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target, options={"num_warps": 8})

    def combos(n):
        return list(itertools.product((False, True), repeat=n)) if everything else [(False,) * n, (True,) * n]

    jobs = []
    for xdt in ("fp32", "bf16"):
        ce = {n: "*fp32" for n in ("BIAS", "W", "WSUM", "PART_MAX", "PART_SUM", "PART_WX", "XY", "LSE", "LOSS")}
        ce.update({n: "*fp32" for n in ("ZLOSS", "UP", "SCALES")})
        ce.update(X=f"*{xdt}", G=f"*{xdt}", Y="*i64", x_row_stride="i32", g_row_stride="i32", up_stride="i32")
        ce.update(n_cols="i32", n_tiles="i32", ignore_index="i32", softcap="fp32", label_smoothing="fp32")
        ce.update(lse_square_scale="fp32")
        for hb, hw, hs, sm in combos(4):
            flags = dict(HAS_BIAS=hb, HAS_WEIGHT=hw, HAS_SOFTCAP=hs, SMOOTH=sm, BLOCK_N=4096)
            jobs.append((K._cross_entropy_partials_kernel, ce, flags))
            for lp, wl, wg in ((True, True, False), (True, True, True), (False, False, True)):
                mode = dict(LSE_FROM_PARTIALS=lp, WRITE_LOSS=wl, WRITE_Z=wl, WRITE_GRAD=wg, BLOCK_TILES=32)
                jobs.append((K._cross_entropy_finish_kernel, ce, {**flags, **mode}))
            jobs.append((K._cross_entropy_row_kernel, ce, {**flags, "WRITE_Z": hs, "BLOCK_N": 8192}))
        # fused_linear_cross_entropy's vocabulary-major kernels (logits in grad_weight's storage).
        vt = {n: "*fp32" for n in ("BIAS", "W", "WSUM", "PART_MAX", "PART_SUM", "PART_WX", "LOSS", "ZLOSS", "LSE")}
        vt.update({n: "*fp32" for n in ("SCALES", "UP")})
        vt.update(LT=f"*{xdt}", Y="*i64", n_tokens="i32", n_vocab="i32", n_groups="i32", rows_per_group="i32")
        vt.update(ignore_index="i32", softcap="fp32", label_smoothing="fp32", lse_square_scale="fp32")
        for hb, hw, hs, sm in combos(4):
            flags = dict(HAS_BIAS=hb, HAS_WEIGHT=hw, HAS_SOFTCAP=hs, SMOOTH=sm, BLOCK_T=64)
            jobs.append((F._vocab_major_partials_kernel, vt, {**flags, "BLOCK_V": 64}))
            jobs.append((F._vocab_major_finish_kernel, vt, {**flags, "BLOCK_G": 64}))
            jobs.append((F._vocab_major_grad_kernel, vt, {**flags, "BLOCK_V": 64}))
        for y in ("i64", "i32"):
            stats = dict(Y=f"*{y}", W=f"*{xdt}", OUT="*fp32", n_rows="i32", n_cols="i32", ignore_index="i32")
            for hw, mean, wt in combos(3):
                jobs.append(
                    (
                        K._cross_entropy_target_stats_kernel,
                        stats,
                        dict(HAS_WEIGHT=hw, MEAN=mean, WEIGHT_TOTAL=wt, BLOCK=4096),
                    )
                )
        scale = {"G": f"*{xdt}", "UP": "*fp32", "n_elements": "i64"}
        jobs.append((_tiling._scale_unless_one_kernel, scale, {"BLOCK": 8192}))
        rows = {f"{t}_row_stride": "i32" for t in ("x", "y", "t", "g", "p", "q", "out")}
        rows.update(n_cols="i32", n_tiles="i32", ignore_index="i32")
        kl = dict(rows, X=f"*{xdt}", T=f"*{xdt}", G=f"*{xdt}", OUT="*fp32", eps="fp32", grad_scale="fp32")
        for lt, el, wg in combos(3):
            jobs.append(
                (D._kl_div_forward_kernel, kl, dict(LOG_TARGET=lt, ELEMENTWISE=el, WRITE_GRAD=wg, BLOCK_N=4096))
            )
        js = dict(rows, X=f"*{xdt}", Y=f"*{xdt}", G=f"*{xdt}", PART="*fp32", LABELS="*i64", INV_N="*fp32", beta="fp32")
        for mode in (0, 1, 2):
            for hl, wg in combos(2):
                jobs.append((D._jsd_forward_kernel, js, dict(MODE=mode, HAS_LABELS=hl, WRITE_GRAD=wg, BLOCK_N=4096)))
        tv = dict(rows, P=f"*{xdt}", Q=f"*{xdt}", G=f"*{xdt}", OUT="*fp32", LABELS="*i64", SCALE="*fp32")
        for hl, el, wg in combos(3):
            jobs.append((D._tvd_forward_kernel, tv, dict(HAS_LABELS=hl, ELEMENTWISE=el, WRITE_GRAD=wg, BLOCK_N=4096)))
        # fused_linear_scaled_cross_entropy: the row forward and the in-place gradient, both upstreams.
        sce = {n: "*fp32" for n in ("NLL", "ENTROPY", "LSE", "UP_NLL", "UP_ENTROPY")}
        sce.update(X=f"*{xdt}", Y="*i64", x_row_stride="i32", n_cols="i32", ignore_index="i32")
        sce.update(inv_temperature="fp32")
        jobs.append((SCE._fused_linear_scaled_cross_entropy_forward_kernel, sce, {"BLOCK_N": 8192}))
        for up_nll, up_entropy in ((True, True), (True, False), (False, True)):
            flags = dict(HAS_UP_NLL=up_nll, HAS_UP_ENTROPY=up_entropy, BLOCK_N=4096)
            jobs.append((SCE._fused_linear_scaled_cross_entropy_backward_kernel, sce, flags))
    try:
        compile_kernel(*jobs[0])
    except Exception as e:  # noqa: BLE001 - the backend itself cannot run here
        if "ptxas" in repr(e).lower() or "backend" in repr(e).lower():
            print(f"cannot compile for sm_90 here: {e!r}", file=sys.stderr)
            return SKIP
        raise
    for fn, types, consts in jobs[1:]:
        try:
            compile_kernel(fn, types, consts)
        except Exception as e:  # noqa: BLE001 - report which variant
            print(f"FAILED {fn.fn.__name__} {consts}: {e}", file=sys.stderr)
            return 1
    print(f"compiled {len(jobs)} loss kernel variants for sm_90a")
    return 0


if __name__ == "__main__":
    sys.exit(main())
