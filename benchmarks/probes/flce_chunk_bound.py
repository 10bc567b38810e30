"""What chunking costs fused linear cross-entropy at training shapes (tokens > hidden), on one GPU.

A fused linear loss that never holds the full logits runs its three GEMMs (logits, grad_input,
grad_weight) over token chunks; grad_weight is then read and written once per chunk, and its GEMM
has K = the chunk's tokens. This script times, per shape, in one process:

- ``gemm_full``: the three GEMMs at full size, input dtype (the GEMM bound: 6 T H V FLOPs);
- ``gemm_chunked``: the same GEMMs over the chunk size liger-ops-cuda picks
  (``hardware.FLCE_CHUNK_ELEMENTS``), i.e. what any kernel with that memory pays before any
  cross-entropy work;
- ``liger``: liger-ops-cuda's full step (forward + backward), at the default chunk budget and at
  4x it, with peak memory above inputs and parameters;
- ``liger-kernel``: liger-kernel's full step and peak memory, when installed.

    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src \\
        python benchmarks/probes/flce_chunk_bound.py --out benchmarks/results/H100/flce-chunks/flce-chunks.json
"""

from __future__ import annotations

import argparse
import json
import platform

import torch
import triton
from triton.testing import do_bench

from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import plan_chunks
from liger_ops_cuda.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction

# (tokens, hidden, vocab): LLaMA-3.2-1B / -3-8B / Gemma-3-1B / Qwen3-1.7B heads at 16k-token
# micro-batches, and LLaMA-3-8B at 8k.
SHAPES = (
    (16384, 2048, 128256),
    (16384, 4096, 128256),
    (16384, 1152, 262144),
    (16384, 2048, 151936),
    (8192, 4096, 128256),
)


def timed_with_peak(step, leaves):
    """p50 ms of ``step`` (grads reset first) and its peak memory in MiB above what was live before."""

    def run():
        for t in leaves:
            t.grad = None
        step()

    run()
    for t in leaves:
        t.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    run()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return do_bench(run, warmup=25, rep=250, return_mode="median"), peak


@torch.no_grad()
def gemm_times(x: torch.Tensor, w: torch.Tensor, chunk: int) -> tuple[float, float]:
    """ms of the three GEMMs at full size, and over ``chunk``-token chunks (grad_W accumulated)."""
    tokens, vocab = x.shape[0], w.shape[0]
    logits = torch.empty(tokens, vocab, device=x.device, dtype=x.dtype)
    gx = torch.empty_like(x)
    gw = torch.empty_like(w)
    full = (
        do_bench(lambda: torch.mm(x, w.t(), out=logits), return_mode="median")
        + do_bench(lambda: torch.mm(logits, w, out=gx), return_mode="median")
        + do_bench(lambda: torch.mm(logits.t(), x, out=gw), return_mode="median")
    )
    part_buf = logits[:chunk]

    def chunked():
        for s in range(0, tokens, chunk):
            e = min(s + chunk, tokens)
            part = part_buf[: e - s]
            torch.mm(x[s:e], w.t(), out=part)
            torch.mm(part, w, out=gx[s:e])
            if s == 0:
                torch.mm(part.t(), x[s:e], out=gw)
            else:
                gw.addmm_(part.t(), x[s:e])

    return full, do_bench(chunked, return_mode="median")


def measure(tokens: int, hidden: int, vocab: int, dtype: torch.dtype) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(tokens, hidden, device="cuda", dtype=dtype, generator=gen) * 0.5).requires_grad_()
    w = (torch.randn(vocab, hidden, device="cuda", dtype=dtype, generator=gen) * 0.02).requires_grad_()
    y = torch.randint(0, vocab, (tokens,), device="cuda", generator=gen)
    row: dict = dict(tokens=tokens, hidden=hidden, vocab=vocab, dtype=str(dtype).removeprefix("torch."))
    chunk = plan_chunks(tokens, vocab)
    row["chunk_tokens"] = chunk

    row["gemm_full_ms"], row["gemm_chunked_ms"] = gemm_times(x.detach(), w.detach(), chunk)
    row["gemm_full_tflops"] = 6 * tokens * hidden * vocab / (row["gemm_full_ms"] * 1e-3) / 1e12

    def ours():
        out = LigerFusedLinearCrossEntropyFunction.apply(x, w, y, None, None, -100, 0.0, 0.0, "mean", None, False, None)
        (out[0] if isinstance(out, tuple) else out).backward()

    default = hardware.FLCE_CHUNK_ELEMENTS
    for label, budget in (("liger", default), ("liger_4x_chunk", 4 * default)):
        hardware.FLCE_CHUNK_ELEMENTS = budget
        try:
            row[f"{label}_ms"], row[f"{label}_peak_mib"] = timed_with_peak(ours, (x, w))
            row[f"{label}_chunk_tokens"] = plan_chunks(tokens, vocab)
        finally:
            hardware.FLCE_CHUNK_ELEMENTS = default
    try:
        from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction as Peer

        def peer():
            out = Peer.apply(x, w, y)
            (out[0] if isinstance(out, tuple) else out).backward()

        row["liger_kernel_ms"], row["liger_kernel_peak_mib"] = timed_with_peak(peer, (x, w))
    except ImportError as e:
        row["liger_kernel"] = f"not installed: {e}"
    row["liger_vs_bound"] = row["gemm_full_ms"] / row["liger_ms"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="JSON file to write")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    a = parser.parse_args()
    dtype = getattr(torch, a.dtype)
    rows = []
    for i, (t, h, v) in enumerate(SHAPES, 1):
        print(f"[{i}/{len(SHAPES)}] tokens={t} hidden={h} vocab={v}", flush=True)
        rows.append(measure(t, h, v, dtype))
        print(json.dumps(rows[-1]), flush=True)
        torch.cuda.empty_cache()
    meta = dict(
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        triton=triton.__version__,
        python=platform.python_version(),
        chunk_elements=hardware.FLCE_CHUNK_ELEMENTS,
    )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
        print("wrote", a.out)


if __name__ == "__main__":
    main()
