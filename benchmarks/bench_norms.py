"""Tile-plan sweep for the CUDA norm-family kernels (interface 1.1) at the issue's shapes.

The comparison with torch eager, torch.compile and liger-kernel is `liger bench` (the
harness in liger_core.bench, which has a spec for each of these ops); this script times the
candidate launch plans of this project's kernels alone, so the constants in
liger_ops_cuda/hardware.py can be set from measurements. Device time only: each call is
captured in a CUDA graph and replayed (triton.testing.do_bench_cudagraph).

    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src \\
        python benchmarks/bench_norms.py --out benchmarks/results/H200/norms-tuning/norms_tune_H200.json

Shapes: 4096 x 4096 bf16 rows (LLaMA-3-8B) for fused_add_rms_norm, layer_norm, poly_norm and
dyt; 32 x 128 x 8192 fp32 with 32 groups for group_norm. ``--smoke`` runs every candidate
once on tiny shapes in the Triton interpreter (CPU) to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402

from liger_ops_cuda import dyt, group_norm, hardware, layer_norm, poly_norm, rms_norm  # noqa: E402
from liger_ops_cuda._tiling import TilePlan, plan_backward_tiles, plan_tiles  # noqa: E402


@contextmanager
def patched(**constants):
    """Set hardware constants for the duration (the plans read them at call time)."""
    old = {k: getattr(hardware, k) for k in constants}
    for k, v in constants.items():
        setattr(hardware, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(hardware, k, v)


def make_timer(smoke: bool):
    if smoke:

        def wall(fn):
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3

        return wall
    from triton.testing import do_bench_cudagraph

    return lambda fn: do_bench_cudagraph(fn, rep=100, return_mode="median")


def row_plans(n_cols: int, smoke: bool):
    """Candidate (forward, backward, programs per SM) plans for whole-row kernels."""
    block_n = plan_tiles(n_cols).block_n
    fwd = [TilePlan(bm, block_n, False, w) for bm in (1, 2, 4) for w in (4, 8, 16)]
    bwd = [(TilePlan(bm, block_n, False, w), per_sm) for bm in (1, 2, 4, 8) for w in (8, 16, 32) for per_sm in (1, 2)]
    if smoke:
        return fwd[:2], bwd[:2]
    return fwd, bwd


def tune_rows(name, timer, fwd_fn, bwd_fn, n_cols, smoke):
    """Time every candidate plan; ``fwd_fn(plan)`` runs the forward, ``bwd_fn(plan, programs)``
    the backward (on saved forward results)."""
    fwd_plans, bwd_plans = row_plans(n_cols, smoke)
    rows = []
    for plan in fwd_plans:
        rows.append(dict(op=name, mode="forward", plan=repr(plan), ms=timer(lambda: fwd_fn(plan))))
    for plan, per_sm in bwd_plans:
        programs = hardware.sm_count() * per_sm
        rows.append(
            dict(
                op=name,
                mode="backward",
                plan=repr(plan),
                programs_per_sm=per_sm,
                ms=timer(lambda: bwd_fn(plan, programs)),
            )
        )
    return rows


def bench_fused_add(timer, m, n, dtype, dev, smoke):
    x, r, dy, ds = (torch.randn(m, n, device=dev, dtype=dtype) for _ in range(4))
    w = torch.randn(n, device=dev, dtype=dtype) * 0.1 + 1
    # fused_add_rms_norm is rms_norm's launchers with a residual (forward) and its gradient (backward).
    _, rstd, s = rms_norm.rms_norm_forward(x, w, 1e-6, 0.0, "llama", plan_tiles(n), residual2d=r)
    rows = tune_rows(
        "fused_add_rms_norm",
        timer,
        lambda plan: rms_norm.rms_norm_forward(x, w, 1e-6, 0.0, "llama", plan, residual2d=r),
        lambda plan, programs: rms_norm.rms_norm_backward(
            dy, s, w, rstd, 0.0, "llama", False, plan, programs, dres2d=ds, residual_dtype=dtype
        ),
        n,
        smoke,
    )
    bwd = plan_backward_tiles(n, hardware.FUSED_ADD_RMS_NORM_BACKWARD_TILE_ELEMENTS)
    return rows, f"defaults: forward {plan_tiles(n)}, backward {bwd}"


def bench_layer_norm(timer, m, n, dtype, dev, smoke):
    x, dy = (torch.randn(m, n, device=dev, dtype=dtype) for _ in range(2))
    w = torch.randn(n, device=dev, dtype=dtype) * 0.1 + 1
    b = torch.randn(n, device=dev, dtype=dtype) * 0.1
    _, mean, rstd = layer_norm.layer_norm_forward(x, w, b, 1e-5, plan_tiles(n))
    rows = tune_rows(
        "layer_norm",
        timer,
        lambda plan: layer_norm.layer_norm_forward(x, w, b, 1e-5, plan),
        lambda plan, programs: layer_norm.layer_norm_backward(dy, x, w, b, mean, rstd, plan, True, True, programs),
        n,
        smoke,
    )
    bwd = plan_backward_tiles(n, hardware.LAYER_NORM_BACKWARD_TILE_ELEMENTS)
    return rows, f"defaults: forward {plan_tiles(n)}, backward {bwd}"


def bench_poly_norm(timer, m, n, dtype, dev, smoke):
    x, dy = (torch.randn(m, n, device=dev, dtype=dtype) for _ in range(2))
    w = torch.tensor([0.3, 0.4, 0.5], device=dev, dtype=dtype)
    b = torch.tensor([0.1], device=dev, dtype=dtype)
    _, rstd = poly_norm.poly_norm_forward(x, w, b, 1e-6, poly_norm.plan_forward(n))
    rows = tune_rows(
        "poly_norm",
        timer,
        lambda plan: poly_norm.poly_norm_forward(x, w, b, 1e-6, plan),
        lambda plan, programs: poly_norm.poly_norm_backward(dy, x, w, b, rstd, plan, programs),
        n,
        smoke,
    )
    return rows, f"defaults: forward {poly_norm.plan_forward(n)}, backward {poly_norm.plan_backward(n)}"


def bench_dyt(timer, m, n, dtype, dev, smoke):
    x, dy = (torch.randn(m, n, device=dev, dtype=dtype) for _ in range(2))
    alpha = torch.tensor([0.5], device=dev, dtype=dtype)
    gamma = torch.randn(n, device=dev, dtype=dtype) * 0.1 + 1
    beta = torch.randn(n, device=dev, dtype=dtype) * 0.1
    rows = []
    tiles = (2048, 4096, 8192, 16384) if not smoke else (4096,)
    for tile in tiles:
        for max_n in (1024, 2048, 4096) if not smoke else (4096,):
            with patched(DYT_TILE_ELEMENTS=tile, DYT_BACKWARD_TILE_ELEMENTS=tile, DYT_MAX_BLOCK_N=max_n):
                plan = f"tile={tile} max_block_n={max_n}"
                rows.append(
                    dict(op="dyt", mode="forward", plan=plan, ms=timer(lambda: dyt.dyt_forward(x, alpha, gamma, beta)))
                )
                for per_sm in (1, 2, 4) if not smoke else (1,):
                    programs = hardware.sm_count() * per_sm
                    ms = timer(lambda: dyt.dyt_backward(dy, x, alpha, gamma, beta, True, programs))
                    rows.append(dict(op="dyt", mode="backward", plan=plan, programs_per_sm=per_sm, ms=ms))
    return rows, (
        f"defaults: tile {hardware.DYT_TILE_ELEMENTS}/{hardware.DYT_BACKWARD_TILE_ELEMENTS}, "
        f"max_block_n {hardware.DYT_MAX_BLOCK_N}, programs/SM {hardware.BACKWARD_PROGRAMS_PER_SM}"
    )


def bench_group_norm(timer, batch, channels, spatial, groups, dtype, dev, smoke):
    x, dy = (torch.randn(batch, channels, spatial, device=dev, dtype=dtype) for _ in range(2))
    w = torch.randn(channels, device=dev, dtype=dtype) * 0.1 + 1
    b = torch.randn(channels, device=dev, dtype=dtype) * 0.1
    n_groups, cg = batch * groups, channels // groups
    rows = []
    candidates = [("fused", None)] + [("split", c) for c in (4096, 8192, 16384, 32768)]
    tiles = (2048, 4096, 8192) if not smoke else (4096,)
    per_warps = (128, 256, 512) if not smoke else (256,)
    for tile in tiles:
        for per_warp in per_warps:
            for kind, chunk in candidates:
                consts = dict(GROUP_NORM_TILE_ELEMENTS=tile, GROUP_NORM_ELEMENTS_PER_WARP=per_warp)
                if chunk:
                    consts["GROUP_NORM_CHUNK_ELEMENTS"] = chunk
                with patched(**consts):
                    plan = group_norm.plan_groups(n_groups, cg, spatial, x.device, split=kind == "split")
                    _, mean, rstd = group_norm.group_norm_forward(x, w, b, groups, 1e-5, plan)
                    fwd = timer(lambda: group_norm.group_norm_forward(x, w, b, groups, 1e-5, plan))
                    bwd = timer(lambda: group_norm.group_norm_backward(dy, x, w, b, groups, mean, rstd, plan))
                for mode, ms in (("forward", fwd), ("backward", bwd)):
                    rows.append(dict(op="group_norm", mode=mode, plan=repr(plan), tile=tile, per_warp=per_warp, ms=ms))
    default = group_norm.plan_groups(n_groups, cg, spatial, x.device)
    return rows, f"default plan: {default}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="fused_add_rms_norm,layer_norm,poly_norm,dyt,group_norm")
    ap.add_argument("--out", default=None, help="JSON path for every timing")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes in the Triton interpreter (checks the script)")
    args = ap.parse_args()
    smoke = args.smoke
    dev = "cpu" if smoke else "cuda"
    timer = make_timer(smoke)
    m, n = (8, 64) if smoke else (4096, 4096)
    gshape = (2, 8, 64, 4) if smoke else (32, 128, 8192, 32)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    device = "cpu (Triton interpreter)" if smoke else torch.cuda.get_device_name()
    print(f"{device}; triton {triton.__version__}, torch {torch.__version__}; SMs {hardware.sm_count()}")
    all_rows = []
    for op in ops:
        if op == "group_norm":
            rows, defaults = bench_group_norm(timer, *gshape, torch.float32, dev, smoke)
            shape = f"{gshape[0]}x{gshape[1]}x{gshape[2]} float32, {gshape[3]} groups"
        else:
            fn = {
                "fused_add_rms_norm": bench_fused_add,
                "layer_norm": bench_layer_norm,
                "poly_norm": bench_poly_norm,
                "dyt": bench_dyt,
            }[op]
            rows, defaults = fn(timer, m, n, torch.bfloat16, dev, smoke)
            shape = f"{m}x{n} bfloat16"
        print(f"\n{op} at {shape} ({defaults})")
        for mode in ("forward", "backward"):
            best = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["ms"])[:5]
            for r in best:
                extra = f" programs/SM={r['programs_per_sm']}" if "programs_per_sm" in r else ""
                extra += f" tile={r['tile']} per_warp={r['per_warp']}" if "tile" in r else ""
                print(f"  {mode:8s} {r['ms'] * 1e3:8.1f} us  {r['plan']}{extra}")
        for r in rows:
            r.update(shape=shape, device=device)
        all_rows += rows
    if args.out:
        with open(args.out, "w") as f:
            json.dump(all_rows, f, indent=1)
        print(f"\nwrote {len(all_rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
