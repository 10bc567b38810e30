"""tiled_mlp against the untiled MLP on one NVIDIA GPU, in interleaved rounds.

The issue's target is a LLaMA-3-8B MLP at 65536 tokens: a training step (forward, then backward
into the parameters' ``.grad``) at most 1.2x the untiled MLP's time with at most 0.3x its peak
memory. The margins are a few percent, less than the drift of one GPU between two runs, so every
variant is timed in each of several rounds, one after another, and the medians are compared:

- ``untiled``: transformers' ``LlamaMLP`` in torch (what eager runs; the baseline);
- ``tiled-<n>``: this project's `tiled_mlp` over ``n`` tiles (the op as it ships: the last
  tile's projections kept for backward);
- ``recompute-all-<n>``: the same orchestration recomputing every tile (the op before the kept
  tile), to show what keeping it buys;
- ``liger-kernel-<n>``: liger-kernel 0.8.5's ``apply_tiled_mlp`` when it imports.

Time: CUDA events around each step (the step is 100+ ms: launch gaps do not show), ``--steps``
per round after a warm-up step. Memory: ``max_memory_allocated`` during a step, less what was
allocated before it (x, the weights, the incoming gradient).

    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src \\
        python benchmarks/bench_tiled_mlp.py --out benchmarks/results/H200/tiled-mlp/tiled_mlp.json

``--smoke`` runs the plumbing on CPU in the Triton interpreter at tiny sizes (numbers meaningless).
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
os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_cuda")

import torch
import torch.nn.functional as F

from liger_core.ops import tiled_mlp as T
from liger_ops_cuda.tiled_mlp import KERNELS, LigerTiledMLPFunction


class _RecomputeAll(T.TiledMLPFunction):
    """The orchestration with no tile kept: every tile's projections recomputed in backward."""

    @staticmethod
    def forward(ctx, x, gate_weight, up_weight, down_weight, num_shards):
        x2d = x.reshape(-1, x.shape[-1])
        rows_per_tile = T.tile_rows(x2d.shape[0], x2d.shape[1], num_shards)
        out, _ = T.tiled_forward(x2d, gate_weight, up_weight, down_weight, rows_per_tile, KERNELS["silu"])
        ctx.save_for_backward(x2d, gate_weight, up_weight, down_weight)
        ctx.rows_per_tile, ctx.shape = rows_per_tile, x.shape
        return out.view(x.shape)

    @staticmethod
    def backward(ctx, grad_out):
        x2d, *weights = ctx.saved_tensors
        dy = grad_out.reshape(x2d.shape).contiguous()
        grads = T.tiled_backward(dy, x2d, *weights, ctx.rows_per_tile, KERNELS["silu"], (True,) * 4)
        return grads[0].view(ctx.shape), *grads[1:], None


def variants(shards: list[int]):
    """name -> (step function of (x, weights), shards or None)."""
    out = {"untiled": lambda x, g, u, d: F.linear(F.silu(F.linear(x, g)) * F.linear(x, u), d)}
    for n in shards:
        out[f"tiled-{n}"] = lambda x, g, u, d, n=n: LigerTiledMLPFunction.apply(x, g, u, d, "silu", n)

        out[f"recompute-all-{n}"] = lambda x, g, u, d, n=n: _RecomputeAll.apply(x, g, u, d, n)
    try:
        from liger_kernel.ops import LigerSiLUMulFunction
        from liger_kernel.ops.tiled_mlp import apply_tiled_mlp
    except ImportError:
        return out
    for n in shards:

        def liger_kernel(x, g, u, d, n=n):
            def mlp(_module, x_tile):
                return F.linear(LigerSiLUMulFunction.apply(F.linear(x_tile, g), F.linear(x_tile, u)), d)

            return apply_tiled_mlp(mlp, None, x, n, [g, u, d])

        out[f"liger-kernel-{n}"] = liger_kernel
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=65536)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--intermediate", type=int, default=14336)
    p.add_argument("--shards", default="16,8,4", help="tile counts, comma-separated")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=8, help="timed steps per variant per round")
    p.add_argument("--out", help="JSON file to write")
    p.add_argument("--smoke", action="store_true", help="CPU, Triton interpreter, tiny sizes")
    a = p.parse_args()
    if a.smoke:
        a.tokens, a.hidden, a.intermediate, a.rounds, a.steps = 64, 16, 40, 2, 1
    device = "cpu" if a.smoke else "cuda"
    dtype = torch.float32 if a.smoke else torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(1, a.tokens, a.hidden, device=device, dtype=dtype, generator=gen).requires_grad_()
    weights = [
        (torch.randn(shape, device=device, dtype=dtype, generator=gen) / shape[1] ** 0.5).requires_grad_()
        for shape in ((a.intermediate, a.hidden), (a.intermediate, a.hidden), (a.hidden, a.intermediate))
    ]
    dy = torch.randn_like(x)
    params = [x, *weights]
    shards = [int(s) for s in a.shards.split(",")]
    runs = variants(shards)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step(fn):
        for t in params:
            t.grad = None  # the trainers' zero_grad(set_to_none=True)
        fn(x, *weights).backward(dy)

    def timed(fn) -> float:
        if device == "cpu":
            t0 = time.perf_counter()
            step(fn)
            return (time.perf_counter() - t0) * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(fn)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    # Correctness first: every variant's output and gradients against the untiled step.
    step(runs["untiled"])
    want = [t.grad.float() for t in params]
    results = {}
    for name, fn in runs.items():
        step(fn)
        err = max(float((t.grad.float() - w).abs().max() / w.abs().max()) for t, w in zip(params, want))
        results[name] = {"max_rel_grad_diff": err, "ms": [], "peak_mb": None}
    for r in range(a.rounds):
        for name, fn in runs.items():
            sync()
            for t in params:
                t.grad = None
            if device == "cuda":
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
            step(fn)  # warm-up, and the memory probe
            if device == "cuda":
                results[name]["peak_mb"] = (torch.cuda.max_memory_allocated() - base) / 2**20
            results[name]["ms"] += [timed(fn) for _ in range(a.steps)]
        print(
            f"round {r + 1}/{a.rounds}: "
            + ", ".join(f"{n} {statistics.median(v['ms']):.2f} ms" for n, v in results.items()),
            flush=True,
        )
    base_ms = statistics.median(results["untiled"]["ms"])
    base_mb = results["untiled"]["peak_mb"]
    rows = []
    for name, v in results.items():
        ms = statistics.median(v["ms"])
        row = {
            "variant": name,
            "ms_p50": ms,
            "ms_min": min(v["ms"]),
            "ms_max": max(v["ms"]),
            "time_ratio_to_untiled": ms / base_ms,
            "peak_mb": v["peak_mb"],
            "mem_ratio_to_untiled": None if base_mb is None else v["peak_mb"] / base_mb,
            "max_rel_grad_diff": v["max_rel_grad_diff"],
        }
        rows.append(row)
        mem_ratio = row["mem_ratio_to_untiled"]
        mem = "" if mem_ratio is None else f", {v['peak_mb']:.0f} MB ({mem_ratio:.3f}x)"
        time_ratio, diff = row["time_ratio_to_untiled"], v["max_rel_grad_diff"]
        print(f"{name:>20}: {ms:8.2f} ms ({time_ratio:.3f}x){mem}, grad diff {diff:.2e}")
    meta = {
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "dtype": str(dtype).removeprefix("torch."),
        "shape": {"tokens": a.tokens, "hidden": a.hidden, "intermediate": a.intermediate},
        "rounds": a.rounds,
        "steps_per_round": a.steps,
        "timer": "cuda events per step; median over rounds x steps" if device == "cuda" else "wall clock",
        "memory": "max_memory_allocated during a step less what was allocated before it",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if a.out:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
