"""``liger bench``: arguments and the command."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

BENCH_HELP = """\
Time this project's ops against their peers on this machine, in one process on one device:
torch eager (the op's PyTorch formula), torch.compile of it, liger-kernel (when installed),
cut-cross-entropy (fused linear cross-entropy) and torch_npu's fused ops (on an NPU).
A peer that is not installed is reported in its rows, not dropped.

Each row: p20/p50/p80 ms, the timer, GB/s from the op's ideal bytes moved (TFLOP/s for the
fused linear losses) and, for memory-bound ops, the GB/s of a plain device copy of the same
bytes with the same timer (copy_gbps; of_copy = the share reached), peak memory above the
inputs, and each provider's time and memory relative to this project's (ratio_to_liger above
1: this project is faster).

Timers: on CUDA the default is CUDA-graph replay (triton.testing.do_bench_cudagraph), since
host launch overhead (~30 us a call) hides small kernels; backward is then full minus
forward. do_bench elsewhere with Triton; a plain host clock without Triton (CPU smoke runs).

Output (--out DIR): <op>.json, <op>.csv, <op>.png (matplotlib optional) and summary.md for
every op in DIR; runs of different ops into one DIR add up.

Examples:
  liger bench --config llama-3-8b --out benchmarks/results/H100/ops
  liger bench --ops rms_norm,swiglu --sweep tokens=1024,2048,4096,8192
  liger bench --ops fused_linear_cross_entropy --sweep tokens=4096,8192,16384 --hidden 2048 --vocab 128256
  liger bench --ops losses --shapes flce-training   # the fused linear losses at five training shapes
  liger bench --config tiny --device cpu --providers liger,torch   # CPU smoke
"""


def add_parser(sub) -> argparse.ArgumentParser:
    from liger_core.bench.configs import AXES, MODEL_CONFIGS, SHAPE_SETS
    from liger_core.bench.providers import PROVIDERS
    from liger_core.bench.spec import MODES
    from liger_core.bench.timing import TIMERS
    from liger_core.device import DEVICE_TYPES

    p = sub.add_parser(
        "bench",
        help="benchmark ops against torch, torch.compile, liger-kernel and other peers",
        description=BENCH_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--ops",
        metavar="A,B",
        help="comma-separated ops or groups (norms, activations, losses, moe); default: every catalogue op with a spec",
    )
    p.add_argument(
        "--providers", metavar="A,B", help=f"comma-separated, from {', '.join(PROVIDERS)} (default: all that apply)"
    )
    p.add_argument("--modes", metavar="A,B", default=",".join(MODES), help=f"from {', '.join(MODES)} (default: all)")
    p.add_argument(
        "--config",
        help=f"model shapes: {', '.join(MODEL_CONFIGS)} (default: llama-3-8b on an accelerator, tiny on the CPU)",
    )
    for axis in AXES:
        p.add_argument(f"--{axis.replace('_', '-')}", dest=axis, type=int, metavar="N", help=f"set {axis}")
    p.add_argument(
        "--sweep", metavar="AXIS=V1,V2", help=f"vary one axis ({', '.join(AXES)}), e.g. tokens=1024,2048,4096"
    )
    p.add_argument(
        "--shapes",
        choices=tuple(SHAPE_SETS),
        help="run a named set of shapes that differ in several axes, in place of --config/--sweep/sizes "
        "(rows: axis 'shape', x the shape's name; see --list)",
    )
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument(
        "--layout",
        metavar="NAME",
        help="build inputs in this layout of each op's spec where it has one (e.g. contiguous q/k for RoPE); "
        "default: the layout the models pass (see --list)",
    )
    p.add_argument("--device", choices=DEVICE_TYPES, help="device type (default: this machine's accelerator, else cpu)")
    p.add_argument(
        "--backend",
        metavar="NAME",
        help="time this backend's kernels as 'liger' (default: whatever dispatch picks); sets TRITON_INTERPRET=1 "
        "when its device is absent",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch CPU threads while timing on the CPU (default 1: ratios that do not swing with machine load)",
    )
    p.add_argument("--timer", default="auto", choices=TIMERS, help="auto: cudagraph on CUDA, do_bench, else wall")
    p.add_argument("--rep-ms", type=int, default=100, help="time budget per measurement in ms (default 100)")
    p.add_argument("--out", metavar="DIR", default="bench-results", help="output folder (default ./bench-results)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNGs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--replot", metavar="DIR", help="only redraw the PNGs and summary.md from DIR's JSON files")
    p.add_argument(
        "--readme",
        metavar="FILE",
        help="with --replot: put DIR's full-mode summary table and plots into FILE between the lines "
        "<!-- liger-bench:begin --> and <!-- liger-bench:end -->",
    )
    p.add_argument("--list", action="store_true", help="list benchable ops, providers and model configs")
    p.add_argument(
        "--frontier",
        action="store_true",
        help="time of the full step against its extra peak memory: the fused linear losses (--ops, default "
        "fused_linear_cross_entropy) at each --budgets value and every peer, at --shapes (default "
        "flce-training); frontier-<op>.json and one PNG per shape in --out (with --replot DIR: redraw them)",
    )
    p.add_argument(
        "--budgets",
        metavar="MIB,MIB",
        default="128,256,512,1024",
        help="with --frontier: the fused linear memory budgets to time ours at, in MiB (default 128,256,512,1024)",
    )
    p.add_argument("--no-gemm-bound", action="store_true", help="with --frontier: skip timing the bare GEMMs")
    p.add_argument(
        "--isolate",
        action="store_true",
        help="with --frontier: measure each shape in a process of its own (on an H200 the CUDA-graph pools of one "
        "shape's peers stayed reserved and the next shape's torch.compile and torch eager ran out of memory)",
    )
    p.add_argument("--only-shape", metavar="NAME", help=argparse.SUPPRESS)  # --isolate's child processes
    p.set_defaults(parser=p, run=cmd_bench)
    return p


def _split(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def cmd_bench(args: argparse.Namespace) -> int:
    from liger_core.bench import report
    from liger_core.bench.catalogue import groups, missing_specs, specs
    from liger_core.bench.configs import AXES, MODEL_CONFIGS, SHAPE_SETS
    from liger_core.bench.providers import PROVIDERS
    from liger_core.bench.runner import run_bench

    parser = args.parser
    if args.frontier:
        return _cmd_frontier(args)
    if args.list:
        have = specs()
        print("ops:", ", ".join(have) or "none")
        if missing_specs():
            print("catalogue ops without a bench spec:", ", ".join(missing_specs()))
        print("groups:", "; ".join(f"{g}: {', '.join(o)}" for g, o in groups().items()))
        layouts = {op: list(s.layouts) for op, s in have.items() if len(s.layouts) > 1}
        print(
            "layouts (first: the models' own, the default):",
            "; ".join(f"{o}: {', '.join(v)}" for o, v in layouts.items()),
        )
        print("providers:", ", ".join(PROVIDERS))
        print("configs:")
        for c in MODEL_CONFIGS.values():
            print(f"  {c.name}: " + " ".join(f"{k}={v}" for k, v in c.as_dict().items() if k != "name"))
        print("shape sets (--shapes):")
        for name, points in SHAPE_SETS.items():
            print(f"  {name}: " + ", ".join(f"{p.name} ({p.tokens}x{p.hidden}x{p.vocab})" for p in points))
        return 0
    if args.replot:
        pngs = [] if args.no_plots else report.plot_folder(args.replot)
        summary = report.write_summary(args.replot)
        print(f"wrote {len(pngs)} plot(s) and {summary}")
        if args.readme:
            try:
                report.update_readme(args.readme, args.replot)
            except ValueError as e:
                parser.error(str(e))
            print(f"updated the benchmark table in {args.readme}")
        return 0
    if args.readme:
        parser.error("--readme goes with --replot DIR")

    sweep = None
    if args.sweep:
        axis, _, values = args.sweep.partition("=")
        try:
            sweep = (axis.strip(), [int(v) for v in values.split(",") if v.strip()])
        except ValueError:
            parser.error(f"--sweep must look like AXIS=V1,V2,...; got {args.sweep!r}")
        if sweep[0] not in AXES or not sweep[1]:
            parser.error(f"--sweep axis must be one of {', '.join(AXES)} with at least one value; got {args.sweep!r}")
    if args.backend:
        from liger_core.registry import device_for_backend

        device, note = device_for_backend(args.backend, args.device)
        if note:
            print(note, file=sys.stderr)
    else:
        device = args.device
    from liger_core.device import device_available, infer_device

    if device is not None and not device_available(device):
        # Refuse up front rather than fill every row with the same error.
        parser.error(f"--device {device}: no {device} device is available on this machine")
    import torch

    threads_before = torch.get_num_threads()
    if (device or infer_device()) == "cpu" or args.threads is not None:
        torch.set_num_threads(args.threads or 1)
        print(f"note: timing with {torch.get_num_threads()} torch CPU thread(s) (--threads)", file=sys.stderr)
    sizes = {axis: getattr(args, axis) for axis in AXES if getattr(args, axis) is not None}
    if args.shapes and (args.config or args.sweep or sizes):
        parser.error("--shapes replaces --config, --sweep and the size options; give one or the other")
    try:
        result = run_bench(
            ops=_split(args.ops),
            providers=_split(args.providers),
            modes=_split(args.modes) or [],
            config=args.config,
            sizes=sizes,
            sweep=sweep,
            dtype=args.dtype,
            device=device,
            backend=args.backend,
            timer=args.timer,
            rep_ms=args.rep_ms,
            progress=not args.no_progress,
            layout=args.layout,
            shapes=args.shapes,
        )
    except ValueError as e:
        parser.error(str(e))
    finally:
        torch.set_num_threads(threads_before)
    for note in result.meta.get("notes", []):
        print(f"note: {note}", file=sys.stderr)
    print(report.render_summary(result))
    written = report.write_results(result, args.out, plots=not args.no_plots)
    print(f"\nwrote {len(written)} file(s) to {os.fspath(Path(args.out))}/ (summary: {written[-1].name})")
    failed = [r for r in result.rows if r["provider"] == "liger" and r["status"] == "error"]
    return 1 if failed else 0


def _cmd_frontier(args: argparse.Namespace) -> int:
    from liger_core.bench import frontier
    from liger_core.bench.runner import _parse_dtype

    parser = args.parser
    if args.replot:
        pngs = frontier.plot_frontier(args.replot)
        print(f"wrote {len(pngs)} plot(s) in {args.replot}")
        return 0
    if args.config or args.sweep or args.layout:
        parser.error("--frontier takes --shapes (a shape set), not --config, --sweep or --layout")
    try:
        budgets = frontier.mib_list(args.budgets)
    except ValueError as e:
        parser.error(str(e))
    device = args.device
    if args.backend:
        from liger_core.registry import device_for_backend

        device, note = device_for_backend(args.backend, args.device)
        if note:
            print(note, file=sys.stderr)
    import torch

    from liger_core.bench.configs import get_shape_set
    from liger_core.device import infer_device

    try:
        shapes = get_shape_set(args.shapes or frontier.DEFAULT_SHAPES)
    except ValueError as e:
        parser.error(str(e))
    if args.only_shape:
        shapes = tuple(s for s in shapes if s.name == args.only_shape)
        if not shapes:
            parser.error(f"--only-shape {args.only_shape!r} is not in shape set {args.shapes!r}")
    if args.isolate:
        return _frontier_report(frontier.run_isolated(args.argv, [s.name for s in shapes]), args)
    threads_before = torch.get_num_threads()
    if (device or infer_device()) == "cpu" or args.threads is not None:
        torch.set_num_threads(args.threads or 1)
    try:
        result = frontier.run_frontier(
            ops=_split(args.ops),
            shapes=shapes,
            budgets_mib=budgets,
            providers=_split(args.providers),
            dtype=_parse_dtype(args.dtype),
            device=device,
            backend=args.backend,
            timer=args.timer,
            rep_ms=args.rep_ms,
            progress=not args.no_progress,
            gemm_bound=not args.no_gemm_bound,
        )
    except ValueError as e:
        parser.error(str(e))
    finally:
        torch.set_num_threads(threads_before)
    return _frontier_report(result, args)


def _frontier_report(result: dict, args: argparse.Namespace) -> int:
    """Print and write a frontier result; 1 when a point of ours failed (or a shape gave none)."""
    from liger_core.bench import frontier

    print(frontier.render_frontier(result))
    written = frontier.write_frontier(result, args.out, plots=not args.no_plots)
    print(f"\nwrote {len(written)} file(s) to {os.fspath(Path(args.out))}/")
    failed = [p for d in result.values() for p in d["points"] if p["provider"] == "liger" and p["status"] != "ok"]
    missing = not result or any(d["meta"].get("missing_shapes") for d in result.values())
    return 1 if failed or missing else 0
