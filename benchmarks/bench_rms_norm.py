"""RMSNorm on an NVIDIA GPU: this project vs torch eager, torch.compile and liger-kernel.

Runs every provider in one process on one device, times forward, backward and full
(forward + backward) with `triton.testing.do_bench` medians (p20/p50/p80), records peak
memory, the device's copy bandwidth measured in the same run, and the dispatch overhead
of `liger_rms_norm` over calling the CUDA autograd Function directly. Writes JSON.

    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src \
        python benchmarks/bench_rms_norm.py --out benchmarks/results/H100/rms-norm-tuning/rms_norm_H100.json

`--tune` first times the candidate tile plans of the CUDA kernels and prints them. `--smoke`
runs every code path once on CPU in the Triton interpreter at 8 x 64 (wall clock, no peak
memory, no torch.compile: checks the script, the numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# The source tree's backend has no entry point: the registry loads it from this variable (set
# here unless the caller set it, as benchmarks/run_gpu.sh does).
os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_cuda")

import torch
import triton
from triton.testing import do_bench, do_bench_cudagraph

from liger_core import __version__ as core_version
from liger_core.functional import liger_rms_norm
from liger_core.registry import serving
from liger_ops_cuda import BACKEND, hardware
from liger_ops_cuda import rms_norm as cuda_rms_norm
from liger_ops_cuda._tiling import TilePlan, plan_tiles

QUANTILES = [0.2, 0.5, 0.8]
SMOKE = "--smoke" in sys.argv


class _Host:
    """The torch.cuda calls used here, for --smoke on CPU: nothing to wait for, no device memory."""

    synchronize = reset_peak_memory_stats = staticmethod(lambda: None)
    memory_allocated = max_memory_allocated = staticmethod(lambda: 0)


cuda = _Host if SMOKE else torch.cuda


def bench(fn, graph=False, **kwargs):
    """``do_bench`` (``graph``: ``do_bench_cudagraph``) of ``fn``; --smoke: one wall-clock call
    after a warm-up call, returned as do_bench would (one value per quantile)."""
    if not SMOKE:
        return (do_bench_cudagraph if graph else do_bench)(fn, **kwargs)
    fn()
    t0 = time.perf_counter()
    fn()
    ms = (time.perf_counter() - t0) * 1e3
    return [ms] * len(kwargs["quantiles"]) if kwargs.get("quantiles") else ms


def torch_rms_norm(x, weight, eps):
    # transformers' LlamaRMSNorm.forward
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def providers(eps):
    out = {
        "liger-multivendor": lambda x, w: liger_rms_norm(x, w, eps),
        "liger-multivendor-inplace": lambda x, w: liger_rms_norm(x, w, eps, 0.0, "llama", True),
        "torch": lambda x, w: torch_rms_norm(x, w, eps),
    }
    if not SMOKE:
        out["torch.compile"] = torch.compile(lambda x, w: torch_rms_norm(x, w, eps))
    try:
        import liger_kernel
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction as UpstreamFn

        version = getattr(liger_kernel, "__version__", None)
        if version is None:
            from importlib.metadata import version as dist_version

            version = dist_version("liger-kernel")
        # Upstream's LigerRMSNorm module defaults: offset 0, casting "llama", in_place True.
        out[f"liger-kernel {version}"] = lambda x, w: UpstreamFn.apply(x, w, eps, 0.0, "llama", True)
    except ImportError as e:
        print(f"liger-kernel not installed: {e}", file=sys.stderr)
    return out


def copy_bandwidth(nbytes, device):
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src), quantiles=[0.5], return_mode="median")
    ms = ms if isinstance(ms, float) else ms[0]
    return 2 * nbytes / (ms * 1e-3) / 1e9


def bench_provider(fn, x, w, dy, mode):
    x = x.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    if mode == "forward":
        call = lambda: fn(x, w)  # noqa: E731
    elif mode == "backward":
        y = fn(x, w)
        call = lambda: y.backward(dy, retain_graph=True)  # noqa: E731
    else:

        def call():
            fn(x, w).backward(dy)

    call()
    cuda.synchronize()
    cuda.reset_peak_memory_stats()
    base = cuda.memory_allocated()
    p20, p50, p80 = bench(call, quantiles=QUANTILES, grad_to_none=[x, w], warmup=50, rep=300)
    peak_mb = (cuda.max_memory_allocated() - base) / 2**20
    # Host time to issue one call (no sync inside the loop): above the kernel time, the
    # GPU waits on Python and do_bench measures the host.
    cuda.synchronize()
    host_calls = 2 if SMOKE else 100
    t0 = time.perf_counter()
    for _ in range(host_calls):
        call()
    host_us = (time.perf_counter() - t0) / host_calls * 1e6
    cuda.synchronize()
    # Device time alone: the same call captured in a CUDA graph and replayed, so Python's
    # launch cost (above the kernel time at this size on the lent hosts) drops out.
    try:
        if mode == "backward":
            # Capturing autograd's backward with retain_graph fails; the graph backward time
            # is derived below as full minus forward.
            raise NotImplementedError("derived from full - forward")

        def fresh_grads_call():
            # As do_bench's grad_to_none: without it every replay after the first would add
            # an activation-sized gradient accumulation kernel to each provider's time.
            x.grad = w.grad = None
            call()

        graph = bench(fresh_grads_call, graph=True, quantiles=QUANTILES, rep=200)
    except NotImplementedError:
        graph = (None, None, None)
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        print(f"  cuda graph timing failed: {type(e).__name__}: {e}", file=sys.stderr)
        graph = (None, None, None)
    return p20, p50, p80, peak_mb, host_us, graph


def bytes_moved(mode, m, n, elt):
    fwd = 2 * m * n * elt + n * elt + 4 * m
    bwd = 3 * m * n * elt + n * elt + 4 * m + n * elt
    return {"forward": fwd, "backward": bwd, "full": fwd + bwd}[mode]


def dispatch_overhead_us(x, w, eps, calls=20000, rounds=21):
    """Host time per call: dispatched functional API minus the autograd Function itself.

    Each call is ~30-50 us of host launch work that drifts between rounds, so the two loops
    alternate and the overhead is the median of the per-round differences (and, as a
    second estimate, the difference of the fastest rounds)."""
    fn = cuda_rms_norm.LigerRMSNormFunction.apply
    if SMOKE:
        calls, rounds = 3, 3

    def loop(f):
        cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        t1 = time.perf_counter()
        cuda.synchronize()
        return (t1 - t0) / calls * 1e6

    direct, dispatched = [], []
    with torch.no_grad():
        for _ in range(rounds):
            direct.append(loop(lambda: fn(x, w, eps, 0.0, "llama", False)))
            dispatched.append(loop(lambda: liger_rms_norm(x, w, eps)))
    d, s = statistics.median(direct), statistics.median(dispatched)
    paired = statistics.median(b - a for a, b in zip(direct, dispatched))
    return {
        "direct_us": d,
        "dispatched_us": s,
        "overhead_us": paired,
        "overhead_fastest_rounds_us": min(dispatched) - min(direct),
    }


def tune(x, w, dy, eps):
    m, n = x.shape
    print(f"tuning tile plans for {m}x{n} {x.dtype} (CUDA-graph replays: device time only)")
    rows = []
    base = plan_tiles(n)
    sweep = (lambda values: values[:2]) if SMOKE else (lambda values: values)
    for block_m in sweep((1, 2, 4, 8)):
        for warps in sweep((2, 4, 8, 16, 32)):
            plan = TilePlan(block_m, base.block_n, False, warps)
            fwd = bench(
                lambda: cuda_rms_norm.rms_norm_forward(x, w, eps, 0.0, "llama", plan), graph=True, return_mode="median"
            )
            _, rstd, _ = cuda_rms_norm.rms_norm_forward(x, w, eps, 0.0, "llama", plan)
            for per_sm in sweep((1, 2, 4)):
                programs = hardware.sm_count() * per_sm
                bwd = bench(
                    lambda: cuda_rms_norm.rms_norm_backward(dy, x, w, rstd, 0.0, "llama", False, plan, programs),
                    graph=True,
                    return_mode="median",
                )
                rows.append((block_m, warps, per_sm, fwd, bwd))
    for r in sorted(rows, key=lambda r: r[3] + r[4])[:12]:
        print(
            f"  block_m={r[0]} warps={r[1]:2d} programs/SM={r[2]}  fwd {r[3] * 1e3:7.1f} us  bwd {r[4] * 1e3:7.1f} us"
        )
    best_fwd = min(rows, key=lambda r: r[3])
    best_bwd = min(rows, key=lambda r: r[4])
    print(f"  best forward: block_m={best_fwd[0]} warps={best_fwd[1]} {best_fwd[3] * 1e3:.1f} us")
    print(
        f"  best backward: block_m={best_bwd[0]} warps={best_bwd[1]} programs/SM={best_bwd[2]} "
        f"{best_bwd[4] * 1e3:.1f} us"
    )
    print(f"  default plans: forward {base}, backward {plan_tiles(n, backward=True)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--out", default=None, help="JSON path")
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="every code path once, CPU + Triton interpreter, 8 x 64")
    args = ap.parse_args()

    if SMOKE:
        args.tokens, args.hidden = 8, 64
        device, device_name = "cpu", "cpu (Triton interpreter smoke run)"
        os.environ.setdefault("LIGER_BACKEND", BACKEND.name)  # CPU tensors: force the CUDA kernels
    else:
        device, device_name = "cuda", torch.cuda.get_device_name()
    served = serving("rms_norm", device)  # "liger-multivendor" must be this package's kernels
    if served.backend != BACKEND.name:
        why = served.error or f"backend {served.backend!r} serves it"
        sys.exit(f"rms_norm on {device} would not run {BACKEND.distribution}'s kernels: {why}")
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device=device).manual_seed(0)
    m, n = args.tokens, args.hidden
    x = torch.randn(m, n, device=device, dtype=dtype, generator=gen)
    w = torch.randn(n, device=device, dtype=dtype, generator=gen) * 0.1 + 1
    dy = torch.randn(m, n, device=device, dtype=dtype, generator=gen)

    if args.tune:
        tune(x, w, dy, args.eps)

    bw_large = copy_bandwidth(2 * 2**30 if not SMOKE else 2**20, device)
    bw_same = copy_bandwidth(m * n * dtype.itemsize, device)
    print(f"{device_name}: copy bandwidth {bw_large:.0f} GB/s (2 GiB), {bw_same:.0f} GB/s ({m}x{n} {args.dtype})")

    rows = []
    provs = providers(args.eps)
    for mode in ("forward", "backward", "full"):
        for name, fn in provs.items():
            p20, p50, p80, peak, host_us, graph = bench_provider(fn, x, w, dy, mode)
            gbps = bytes_moved(mode, m, n, dtype.itemsize) / (p50 * 1e-3) / 1e9
            rows.append(
                dict(
                    op="rms_norm",
                    provider=name,
                    mode=mode,
                    tokens=m,
                    hidden=n,
                    dtype=args.dtype,
                    ms_p20=p20,
                    ms_p50=p50,
                    ms_p80=p80,
                    gbps=gbps,
                    copy_fraction=gbps / bw_large,
                    peak_mb=peak,
                    host_us_per_call=host_us,
                    graph_ms_p20=graph[0],
                    graph_ms_p50=graph[1],
                    graph_ms_p80=graph[2],
                    device=device_name,
                )
            )
    for r in rows:
        if r["mode"] == "backward":
            fwd, full = (
                next(q for q in rows if q["mode"] == mode and q["provider"] == r["provider"])
                for mode in ("forward", "full")
            )
            if fwd["graph_ms_p50"] and full["graph_ms_p50"]:
                r["graph_ms_p50"] = full["graph_ms_p50"] - fwd["graph_ms_p50"]
                r["graph_ms_note"] = "full minus forward"
    for r in rows:
        best_peer = min(
            q["ms_p50"] for q in rows if q["mode"] == r["mode"] and not q["provider"].startswith("liger-multivendor")
        )
        r["ratio_to_best_peer"] = r["ms_p50"] / best_peer
        peers_graph = [
            q["graph_ms_p50"]
            for q in rows
            if q["mode"] == r["mode"] and not q["provider"].startswith("liger-multivendor") and q["graph_ms_p50"]
        ]
        r["graph_ratio_to_best_peer"] = (
            r["graph_ms_p50"] / min(peers_graph) if peers_graph and r["graph_ms_p50"] else None
        )
        r["graph_gbps"] = (
            bytes_moved(r["mode"], m, n, dtype.itemsize) / (r["graph_ms_p50"] * 1e-3) / 1e9
            if r["graph_ms_p50"]
            else None
        )
        r["graph_copy_fraction"] = r["graph_gbps"] / bw_large if r["graph_gbps"] else None
        r["graph_copy_fraction_same_size"] = r["graph_gbps"] / bw_same if r["graph_gbps"] else None

    overhead = dispatch_overhead_us(x[:1, :64].contiguous(), w[:64].contiguous(), args.eps)
    result = dict(
        benchmark="rms_norm",
        device=device_name,
        copy_bandwidth_gbps={"2GiB": bw_large, "same_size": bw_same},
        versions=dict(
            torch=torch.__version__,
            triton=triton.__version__,
            liger_core=core_version,
            liger_ops_cuda=BACKEND.version,
            python=platform.python_version(),
        ),
        dispatch=overhead,
        rows=rows,
    )
    print(
        f"\n{'mode':9} {'provider':28} {'p50 ms':>8} {'GB/s':>7} {'copy%':>6} {'peak MB':>8} {'vs best peer':>12} "
        f"{'host us':>8} | {'graph ms':>8} {'GB/s':>6} {'copy%':>5} {'same%':>5} {'vs best':>7}"
    )
    for r in rows:
        print(
            f"{r['mode']:9} {r['provider']:28} {r['ms_p50']:8.4f} {r['gbps']:7.0f} {100 * r['copy_fraction']:5.0f}% "
            f"{r['peak_mb']:8.1f} {r['ratio_to_best_peer']:11.2f}x {r['host_us_per_call']:8.1f} | "
            + (
                f"{r['graph_ms_p50']:8.4f} {r['graph_gbps']:6.0f} {100 * r['graph_copy_fraction']:4.0f}% "
                f"{100 * r['graph_copy_fraction_same_size']:4.0f}% {r['graph_ratio_to_best_peer']:6.2f}x"
                if r["graph_ms_p50"]
                else "n/a"
            )
        )
    print(
        f"dispatch: direct {overhead['direct_us']:.2f} us/call, dispatched {overhead['dispatched_us']:.2f} us/call, "
        f"overhead {overhead['overhead_us']:.2f} us (median of paired rounds; "
        f"{overhead['overhead_fastest_rounds_us']:.2f} us between the fastest rounds)"
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
