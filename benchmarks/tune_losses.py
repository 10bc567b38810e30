"""Tile plans of liger-ops-cuda's loss kernels on an NVIDIA GPU: sweep, time, print.

The comparison with torch, torch.compile, liger-kernel 0.8.5 and cut-cross-entropy is
`liger bench --ops losses` (liger_core.bench); this script only chooses the sizes in
liger_ops_cuda/hardware.py. Full step (forward + backward), `triton.testing.do_bench`
medians, peak memory above the inputs:

    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src python benchmarks/tune_losses.py

- CE_BLOCK x CE_NUM_WARPS: cross_entropy on fp32 logits (tokens x vocab): the (row, tile)
  kernels, i.e. the backward at any row count and the forward below the row-program threshold;
- CE_ROW_BLOCK x CE_ROW_NUM_WARPS: the one-program-per-row cross_entropy forward (forward alone
  and the in-place full step, with its extra memory: the issue's target is liger-kernel 0.8.5's
  53,760 bytes at 4096 x 128256 fp32);
- CE_ROW_PROGRAMS_MIN_ROWS_PER_SM: row programs against (row, tile) programs at 128 to 4096 rows
  (choose the smallest rows per SM from which the row path is not slower);
- DIV_BLOCK x DIV_NUM_WARPS: kl_div, jsd, tvd on fp32 inputs;
- FLCE_CHUNK_ELEMENTS: fused_linear_cross_entropy on bf16 (time against peak memory);
- the in-place cross_entropy variant (``in_place=True``: the gradient written into the logits)
  for its time and memory.

The kernels are called through the ops' autograd Functions (no dispatch), with the contracts'
parameters in contract order. ``--smoke`` runs every sweep once, at its first candidate, on CPU
in the Triton interpreter at tiny sizes (wall clock, no peak memory: checks the script).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
from triton.testing import do_bench

from liger_ops_cuda import hardware
from liger_ops_cuda.cross_entropy import LigerCrossEntropyFunction
from liger_ops_cuda.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction
from liger_ops_cuda.jsd import LigerJSDFunction
from liger_ops_cuda.kl_div import LigerKLDivFunction
from liger_ops_cuda.tvd import LigerTVDFunction

SMOKE = "--smoke" in sys.argv


def sweep(values):
    """A sweep's candidates (--smoke: the first one)."""
    return values[:1] if SMOKE else values


def measure(step, leaves):
    def run():
        for t in leaves:
            t.grad = None
        step()

    run()
    if SMOKE:
        t0 = time.perf_counter()
        run()
        return (time.perf_counter() - t0) * 1e3, 0.0
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
    ap.add_argument(
        "--only",
        nargs="+",
        choices=("ce", "ce-rows", "div", "flce"),
        default=("ce", "ce-rows", "div", "flce"),
        help="sweeps to run (default: all); ce-rows: CE_ROW_* and the row/tile threshold",
    )
    ap.add_argument("--smoke", action="store_true", help="each sweep's first candidate, CPU + Triton interpreter")
    args = ap.parse_args()
    if SMOKE:
        args.tokens, args.vocab, args.hidden = 16, 200, 32
    n, v, h = args.tokens, args.vocab, args.hidden
    dev = "cpu" if SMOKE else "cuda"
    torch.manual_seed(0)
    logits = torch.randn(n, v, device=dev).requires_grad_()
    target = torch.randint(0, v, (n,), device=dev)
    device_name = "cpu (Triton interpreter smoke run)" if SMOKE else torch.cuda.get_device_name()
    print(f"{device_name}: tokens {n}, vocab {v}, hidden {h}")

    if "ce" in args.only:
        tune_ce_tiles(logits, target, n, v)
    if "ce-rows" in args.only:
        tune_ce_rows(logits, target, n, v)
    if "div" in args.only:
        tune_divergences(n, v, dev)
    if "flce" in args.only:
        tune_flce(target, n, v, h, dev)


# cross_entropy(logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction,
# softcap, return_z_loss, in_place): the loss alone.
def _ce_step(x, target, in_place):
    LigerCrossEntropyFunction.apply(x, target, None, -100, 0.0, 0.0, "mean", None, False, in_place).backward()


def _ce_forward(x, target):
    with torch.no_grad():
        LigerCrossEntropyFunction.apply(x, target, None, -100, 0.0, 0.0, "mean", None, False, True)


def tune_ce_rows(logits, target, n, v):
    """CE_ROW_BLOCK x CE_ROW_NUM_WARPS at n rows (row path forced), then row programs against
    (row, tile) programs by row count (CE_ROW_PROGRAMS_MIN_ROWS_PER_SM)."""
    saved = hardware.CE_ROW_BLOCK, hardware.CE_ROW_NUM_WARPS, hardware.CE_ROW_PROGRAMS_MIN_ROWS_PER_SM
    scratch = logits.detach().clone().requires_grad_()  # in place: the gradient lands here
    sms = hardware.sm_count()
    hardware.CE_ROW_PROGRAMS_MIN_ROWS_PER_SM = 0
    print(f"cross_entropy fp32 row programs at {n} rows (CE_ROW_BLOCK, CE_ROW_NUM_WARPS); in-place full step:")
    for block, warps in itertools.product(sweep((2048, 4096, 8192, 16384)), sweep((4, 8, 16))):
        hardware.CE_ROW_BLOCK, hardware.CE_ROW_NUM_WARPS = block, warps
        fwd, _ = measure(lambda: _ce_forward(scratch, target), [])
        ms, mb = measure(lambda: _ce_step(scratch, target, True), [scratch])
        print(
            f"  {block:6d} x {warps:2d} warps: forward {fwd:7.3f} ms {n * v * 4 / fwd / 1e6:6.0f} GB/s, "
            f"full {ms:7.3f} ms, extra {mb * 2**20:8.0f} B"
        )
    hardware.CE_ROW_BLOCK, hardware.CE_ROW_NUM_WARPS = saved[:2]
    print(f"row programs vs (row, tile) programs ({sms} SMs; threshold now {saved[2]} rows/SM), in-place:")
    for rows in (n,) if SMOKE else (128, 256, 512, 1024, 2048, 4096):
        if rows > n:
            break
        x = scratch.detach()[:rows].requires_grad_()  # a leaf view: in place writes into scratch
        t = target[:rows]
        res = {}
        for name, per_sm in (("rows", 0), ("tiles", 10**9)):
            hardware.CE_ROW_PROGRAMS_MIN_ROWS_PER_SM = per_sm
            fwd, _ = measure(lambda: _ce_forward(x, t), [])
            full, mb = measure(lambda: _ce_step(x, t, True), [x])
            res[name] = (fwd, full, mb * 2**20)
        (rf, rfull, rb), (tf, tfull, tb) = res["rows"], res["tiles"]
        print(
            f"  {rows:5d} rows ({rows / sms:5.1f}/SM): forward rows {rf * 1e3:7.1f} us tiles {tf * 1e3:7.1f} us"
            f" ({rf / tf:5.2f}x); full rows {rfull:6.3f} ms tiles {tfull:6.3f} ms ({rfull / tfull:5.2f}x);"
            f" extra rows {rb:7.0f} B tiles {tb:8.0f} B"
        )
    hardware.CE_ROW_PROGRAMS_MIN_ROWS_PER_SM = saved[2]


def tune_ce_tiles(logits, target, n, v):
    print("cross_entropy fp32, full (CE_BLOCK, CE_NUM_WARPS):")
    for block, warps in itertools.product(sweep((2048, 4096, 8192, 16384)), sweep((4, 8, 16, 32))):
        hardware.CE_BLOCK, hardware.CE_NUM_WARPS = block, warps
        ms, mb = measure(lambda: _ce_step(logits, target, False), [logits])
        print(f"  {block:6d} x {warps:2d} warps: {ms:7.3f} ms  {3 * n * v * 4 / ms / 1e6:6.0f} GB/s  {mb:8.0f} MB")
    hardware.CE_BLOCK, hardware.CE_NUM_WARPS = 4096, 8
    scratch = logits.detach().clone().requires_grad_()
    ms, mb = measure(lambda: _ce_step(scratch, target, True), [scratch])
    print(f"  in-place variant (default plan): {ms:.3f} ms, {mb:.0f} MB")


def tune_divergences(n, v, dev):
    y_pred = torch.log_softmax(torch.randn(n, v, device=dev), -1).requires_grad_()
    other = torch.log_softmax(torch.randn(n, v, device=dev), -1)
    p = other.exp()
    print("kl_div / jsd / tvd fp32, full (DIV_BLOCK, DIV_NUM_WARPS):")
    for block, warps in itertools.product(sweep((2048, 4096, 8192, 16384)), sweep((4, 8, 16))):
        hardware.DIV_BLOCK, hardware.DIV_NUM_WARPS = block, warps
        row = []
        for name, fn in (  # the contracts' defaults: batchmean, no shift_labels, beta 0.5
            ("kl_div", lambda: LigerKLDivFunction.apply(y_pred, p, "batchmean", False, 1e-10).backward()),
            ("jsd", lambda: LigerJSDFunction.apply(y_pred, other, None, 0.5, -100).backward()),
            ("tvd", lambda: LigerTVDFunction.apply(y_pred, p, None, "batchmean", -100).backward()),
        ):
            ms, mb = measure(fn, [y_pred])
            row.append(f"{name} {ms:6.3f} ms {mb:6.0f} MB")
        print(f"  {block:6d} x {warps:2d} warps: " + ", ".join(row))
    hardware.DIV_BLOCK, hardware.DIV_NUM_WARPS = 4096, 8


def tune_flce(target, n, v, h, dev):
    x = torch.randn(n, h, device=dev, dtype=torch.bfloat16).requires_grad_()
    w = (torch.randn(v, h, device=dev) / h**0.5).to(torch.bfloat16).requires_grad_()
    print("fused_linear_cross_entropy bf16, full (FLCE_CHUNK_ELEMENTS):")
    # (input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing,
    # reduction, softcap, return_z_loss, accum_dtype): the contract's defaults.
    args = (None, None, -100, 0.0, 0.0, "mean", None, False, None)
    for mega in sweep((16, 32, 64, 96, 128)):
        hardware.FLCE_CHUNK_ELEMENTS = mega * 2**20
        ms, mb = measure(lambda: LigerFusedLinearCrossEntropyFunction.apply(x, w, target, *args).backward(), [x, w])
        print(f"  {mega:4d}M logits/chunk: {ms:7.3f} ms  {6 * n * v * h / ms / 1e9:6.1f} TFLOP/s  {mb:8.0f} MB")


if __name__ == "__main__":
    main()
