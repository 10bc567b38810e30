"""Tile plans of liger-ops-cuda's loss kernels on an NVIDIA GPU: sweep, time, print.

The comparison with torch, torch.compile, liger-kernel 0.8.5 and cut-cross-entropy is
`liger bench --ops losses` (liger_core.bench); this script only chooses the sizes in
liger_ops_cuda/hardware.py. Full step (forward + backward), `triton.testing.do_bench`
medians, peak memory above the inputs:

    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src python benchmarks/tune_losses.py

- CE_BLOCK x CE_NUM_WARPS: cross_entropy on fp32 logits (tokens x vocab);
- DIV_BLOCK x DIV_NUM_WARPS: kl_div, jsd, tvd on fp32 inputs;
- FLCE_CHUNK_ELEMENTS: fused_linear_cross_entropy on bf16 (time against peak memory);
- the in-place cross_entropy variant (gradient written into the logits; not reachable through
  the op's contract, which never writes the caller's logits) for its time and memory.
"""

from __future__ import annotations

import argparse
import itertools

import torch
from triton.testing import do_bench

from liger_ops_cuda import hardware
from liger_ops_cuda.cross_entropy import LigerCrossEntropyFunction
from liger_ops_cuda.fused_linear_cross_entropy import fused_linear_cross_entropy
from liger_ops_cuda.jsd import jsd
from liger_ops_cuda.kl_div import kl_div
from liger_ops_cuda.tvd import tvd


def measure(step, leaves):
    def run():
        for t in leaves:
            t.grad = None
        step()

    run()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    ms = do_bench(run, warmup=25, rep=200, return_mode="median")
    return ms, (torch.cuda.max_memory_allocated() - base) / 2**20


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--hidden", type=int, default=4096)
    args = ap.parse_args()
    n, v, h = args.tokens, args.vocab, args.hidden
    dev = "cuda"
    torch.manual_seed(0)
    logits = torch.randn(n, v, device=dev).requires_grad_()
    target = torch.randint(0, v, (n,), device=dev)
    print(f"{torch.cuda.get_device_name()}: tokens {n}, vocab {v}, hidden {h}")

    print("cross_entropy fp32, full (CE_BLOCK, CE_NUM_WARPS):")
    for block, warps in itertools.product((2048, 4096, 8192, 16384), (4, 8, 16, 32)):
        hardware.CE_BLOCK, hardware.CE_NUM_WARPS = block, warps
        ms, mb = measure(
            lambda: LigerCrossEntropyFunction.apply(logits, target, None, -100, 0.0, 0.0, "mean", None, False)[
                0
            ].backward(),
            [logits],
        )
        print(f"  {block:6d} x {warps:2d} warps: {ms:7.3f} ms  {3 * n * v * 4 / ms / 1e6:6.0f} GB/s  {mb:8.0f} MB")
    hardware.CE_BLOCK, hardware.CE_NUM_WARPS = 4096, 8
    scratch = logits.detach().clone().requires_grad_()
    ms, mb = measure(
        lambda: LigerCrossEntropyFunction.apply(scratch, target, None, -100, 0.0, 0.0, "mean", None, True)[
            0
        ].backward(),
        [scratch],
    )
    print(f"  in-place variant (default plan): {ms:.3f} ms, {mb:.0f} MB")

    y_pred = torch.log_softmax(torch.randn(n, v, device=dev), -1).requires_grad_()
    other = torch.log_softmax(torch.randn(n, v, device=dev), -1)
    p = other.exp()
    print("kl_div / jsd / tvd fp32, full (DIV_BLOCK, DIV_NUM_WARPS):")
    for block, warps in itertools.product((2048, 4096, 8192, 16384), (4, 8, 16)):
        hardware.DIV_BLOCK, hardware.DIV_NUM_WARPS = block, warps
        row = []
        for name, fn in (
            ("kl_div", lambda: kl_div(y_pred, p).backward()),
            ("jsd", lambda: jsd(y_pred, other).backward()),
            ("tvd", lambda: tvd(y_pred, p).backward()),
        ):
            ms, mb = measure(fn, [y_pred])
            row.append(f"{name} {ms:6.3f} ms {mb:6.0f} MB")
        print(f"  {block:6d} x {warps:2d} warps: " + ", ".join(row))
    hardware.DIV_BLOCK, hardware.DIV_NUM_WARPS = 4096, 8

    x = torch.randn(n, h, device=dev, dtype=torch.bfloat16).requires_grad_()
    w = (torch.randn(v, h, device=dev) / h**0.5).to(torch.bfloat16).requires_grad_()
    print("fused_linear_cross_entropy bf16, full (FLCE_CHUNK_ELEMENTS):")
    for mega in (16, 32, 64, 96, 128):
        hardware.FLCE_CHUNK_ELEMENTS = mega * 2**20
        ms, mb = measure(lambda: fused_linear_cross_entropy(x, w, target).backward(), [x, w])
        print(f"  {mega:4d}M logits/chunk: {ms:7.3f} ms  {6 * n * v * h / ms / 1e9:6.1f} TFLOP/s  {mb:8.0f} MB")


if __name__ == "__main__":
    main()
