"""`liger bench --frontier`: time of the full training step (forward + backward) against the extra
peak memory it takes, for a fused linear loss at several memory budgets (`liger_core.memory_budget`)
and for every peer available, all in one process on one device.

Per op and shape: ours at each budget (with the chunk row counts the logits GEMMs actually ran
at, recorded by watching the matmuls of one untimed step), torch eager and torch.compile of the
plain logits + loss formula, liger-kernel and cut-cross-entropy where installed, and the GEMM
bound (the step's three matmuls alone: logits, grad_input, grad_weight). JSON per op, one PNG per
op and shape (x: extra peak MiB, log scale; y: ms), drawn again from the JSON by
``liger bench --frontier --replot DIR``.
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from liger_core.bench import timing
from liger_core.bench.catalogue import specs
from liger_core.bench.configs import ModelShape, get_shape_set
from liger_core.bench.providers import COMPILE, LIGER, OK, PROVIDERS, TORCH, collect_versions, make_provider
from liger_core.bench.runner import Progress, _short, grad_leaves, measure
from liger_core.bench.spec import input_generator, materialise
from liger_core.memory_budget import fused_linear_memory_budget

DEFAULT_BUDGETS_MIB = (128, 256, 512, 1024)
DEFAULT_OPS = ("fused_linear_cross_entropy",)
DEFAULT_SHAPES = "flce-training"
GEMM_BOUND = "gemm-bound"
FILE_PREFIX = "frontier-"
_MM = {torch.ops.aten.mm.default, torch.ops.aten.mm.out, torch.ops.aten.addmm.default, torch.ops.aten.addmm.out}


class _ChunkRows(TorchDispatchMode):
    """The distinct row counts of the matmuls that produce ``(rows, vocab)`` logits."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab, self.rows = vocab, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _MM and isinstance(out, torch.Tensor) and out.ndim == 2 and out.shape[1] == self.vocab:
            self.rows.add(int(out.shape[0]))
        return out


def _budgeted(fn: Callable[..., Any], budget: int) -> Callable[..., Any]:
    def call(**kwargs):
        with fused_linear_memory_budget(budget):
            return fn(**kwargs)

    return call


def _chunk_rows(fn: Callable[..., Any], kwargs: dict[str, Any], vocab: int) -> list[int]:
    """The logits GEMMs' row counts in one forward + backward of ``fn``."""
    seen = _ChunkRows(vocab)
    with seen:
        out = fn(**materialise(kwargs))
        loss = out[0] if isinstance(out, (tuple, list)) else out
        if loss.requires_grad:
            loss.float().sum().backward()
    for t in grad_leaves(kwargs):
        t.grad = None
    return sorted(seen.rows)


def _gemm_bound(shape: ModelShape, dt: torch.dtype, dev: torch.device) -> Callable[[], None]:
    """The step's three matmuls alone (no loss, no chunking): the floor every provider is judged by."""
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(shape.tokens, shape.hidden, generator=gen, device=dev, dtype=dt)
    w = torch.randn(shape.vocab, shape.hidden, generator=gen, device=dev, dtype=dt)
    logits = torch.empty(shape.tokens, shape.vocab, device=dev, dtype=dt)
    gx, gw = torch.empty_like(x), torch.empty_like(w)

    def call():
        torch.mm(x, w.t(), out=logits)
        torch.mm(logits, w, out=gx)
        torch.mm(logits.t(), x, out=gw)

    return call


def _grads_mib(kwargs: dict[str, Any]) -> float:
    """MiB of the gradients every provider must return (one per input that requires grad)."""
    return sum(t.numel() * t.element_size() for t in grad_leaves(kwargs)) / 2**20


def _point(provider: str, shape: ModelShape, t, grads_mib: float, **extra: Any) -> dict[str, Any]:
    row = {
        "provider": provider,
        "shape": shape.name,
        "tokens": shape.tokens,
        "hidden": shape.hidden,
        "vocab": shape.vocab,
        **extra,
    }
    if t.error:
        row.update(status="error", reason=t.error)
    else:
        row.update(status=OK, ms=t.ms[1], ms_p20=t.ms[0], ms_p80=t.ms[2], peak_mib=t.peak_mb, timer=t.timer)
        # The step's peak beyond its inputs and beyond the gradients it returns: what the loss costs.
        row["grads_mib"] = grads_mib
        row["extra_peak_mib"] = None if t.peak_mb is None else t.peak_mb - grads_mib
        if t.note:
            row["note"] = t.note
    return row


def _skipped(provider: str, shape: ModelShape, status: str, reason: str) -> dict[str, Any]:
    return {"provider": provider, "shape": shape.name, "status": status, "reason": reason}


def run_frontier(
    ops: Sequence[str] | None = None,
    shapes: str | Sequence[ModelShape] = DEFAULT_SHAPES,
    budgets_mib: Sequence[float] = DEFAULT_BUDGETS_MIB,
    providers: Sequence[str] | None = None,
    dtype: torch.dtype = torch.bfloat16,
    device: str | None = None,
    backend: str | None = None,
    timer: str = "auto",
    rep_ms: int = 100,
    progress: bool = True,
    gemm_bound: bool = True,
) -> dict[str, dict[str, Any]]:
    """``{op: {"meta": ..., "points": [...]}}``: one point per (shape, provider[, budget])."""
    from liger_core.device import infer_device

    device_type = device or infer_device()
    dev = torch.device(device_type)
    timer = timing.resolve_timer(timer, device_type)
    have = specs()
    ops = list(ops or DEFAULT_OPS)
    for op in ops:
        if op not in have or tuple(have[op].axes[:3]) != ("tokens", "hidden", "vocab"):
            linear = ("tokens", "hidden", "vocab")
            known = [n for n, s in have.items() if n.startswith("fused_linear_") and tuple(s.axes[:3]) == linear]
            raise ValueError(f"--frontier takes fused linear losses; got {op!r}; known: {', '.join(known)}")
    points_of = get_shape_set(shapes) if isinstance(shapes, str) else tuple(shapes)
    peers = [p for p in (PROVIDERS if providers is None else providers) if p != LIGER]
    for p in peers:
        if p not in PROVIDERS:
            raise ValueError(f"unknown provider {p!r}; known: {', '.join(PROVIDERS)}")
    # torch eager last: its (shapes x vocab) float32 buffers run out of memory at large vocabularies,
    # and on an H200 the points after such a failure ran out too (torch.compile at Gemma-3's shape).
    peers.sort(key=lambda p: p == TORCH)
    budgets = [(float(b), max(1, int(b * 2**20))) for b in budgets_mib]  # (MiB as given, bytes)
    bar = Progress(len(ops) * len(points_of) * (len(budgets) + len(peers) + int(gemm_bound)), progress)
    out: dict[str, dict[str, Any]] = {}
    for op in ops:
        spec = have[op]
        points: list[dict[str, Any]] = []
        for shape in points_of:

            def inputs(shape=shape):
                return spec.arguments(shape, dtype, dev, input_generator(op, shape, dev))

            ours = make_provider(LIGER, spec, device_type, backend)
            for mib, budget in budgets:
                bar.step(f"{op} {shape.name} liger {mib:g} MiB")
                if ours.status != OK:
                    points.append(_skipped(LIGER, shape, ours.status, ours.reason) | {"budget_mib": mib})
                    continue
                fn = _budgeted(ours.fn, budget)
                try:
                    kwargs = inputs()
                    rows = _chunk_rows(fn, kwargs, shape.vocab)
                    t = measure(fn, kwargs, ("full",), timer, device_type, rep_ms)["full"]
                    impl = ours.implementation
                    grads = _grads_mib(kwargs)
                    points.append(_point(LIGER, shape, t, grads, budget_mib=mib, chunk_rows=rows, implementation=impl))
                except Exception as e:  # noqa: BLE001 - one failing point must not end the run
                    points.append(_skipped(LIGER, shape, "error", _short(e)) | {"budget_mib": mib})
                kwargs = None
                timing.free_memory(device_type)
            for name in peers:
                bar.step(f"{op} {shape.name} {name}")
                if name == COMPILE:
                    torch._dynamo.reset()  # a fresh cache per shape, as the main harness does
                p = make_provider(name, spec, device_type, backend)
                if p is None:
                    continue
                if p.status != OK:
                    points.append(_skipped(name, shape, p.status, p.reason))
                    continue
                try:
                    kwargs = inputs()
                    if p.prepare is not None:
                        kwargs = p.prepare(kwargs)
                    t = measure(p.fn, kwargs, ("full",), timer, device_type, rep_ms)["full"]
                    points.append(_point(name, shape, t, _grads_mib(kwargs), implementation=p.implementation))
                except Exception as e:  # noqa: BLE001
                    points.append(_skipped(name, shape, "error", _short(e)))
                kwargs = None
                timing.free_memory(device_type)
            if gemm_bound:
                bar.step(f"{op} {shape.name} {GEMM_BOUND}")
                try:
                    call = _gemm_bound(shape, dtype, dev)
                    ms, used, note = _time_plain(call, timer, device_type, rep_ms)
                    points.append(
                        {"provider": GEMM_BOUND, "shape": shape.name, "tokens": shape.tokens, "hidden": shape.hidden,
                         "vocab": shape.vocab, "status": OK, "ms": ms[1], "ms_p20": ms[0], "ms_p80": ms[2],
                         "timer": used, "peak_mib": None}
                    )  # fmt: skip
                except Exception as e:  # noqa: BLE001
                    points.append(_skipped(GEMM_BOUND, shape, "error", _short(e)))
                call = None
                timing.free_memory(device_type)
        out[op] = {
            "meta": {
                "op": op,
                "mode": "full (forward + backward)",
                "device": timing.device_name(dev),
                "device_type": device_type,
                "dtype": str(dtype).removeprefix("torch."),
                "timer": timer,
                "rep_ms": rep_ms,
                "budgets_mib": [mib for mib, _ in budgets],
                "shapes": [s.name for s in points_of],
                "versions": collect_versions(device_type, backend),
                "python": platform.python_version(),
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "peak_mib": "device memory allocated at the step's peak above what was allocated before it (MiB)",
                "extra_peak_mib": "peak_mib less the gradients the step returns (grads_mib): what the loss adds",
            },
            "points": points,
        }
    bar.close()
    return out


def _time_plain(call, timer, device_type, rep_ms):
    from liger_core.bench.runner import _time

    return _time(call, [], timer, device_type, rep_ms)


def run_isolated(argv: Sequence[str], shape_names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``liger bench`` run again (``argv``, its arguments) once per shape, each in a fresh process, the
    results merged: one shape's leftovers (CUDA-graph pools of its peers) never crowd the next's."""
    import subprocess
    import sys
    import tempfile

    argv = [a for a in argv if a != "--isolate"]
    merged: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    for name in shape_names:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "liger_core", *argv, "--only-shape", name, "--out", tmp, "--no-plots"]
            print(f"frontier: {name} in a process of its own", file=sys.stderr, flush=True)
            child = subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
            paths = sorted(Path(tmp).glob(f"{FILE_PREFIX}*.json"))
            if not paths:  # killed (out of host memory, say) or refused: say so, and keep the other shapes
                print(f"frontier: {name} gave no results (exit status {child.returncode})", file=sys.stderr)
                missing.append(name)
            for path in paths:
                data = json.loads(path.read_text())
                op = path.stem.removeprefix(FILE_PREFIX)
                if op not in merged:
                    merged[op] = data
                else:
                    merged[op]["points"] += data["points"]
                    merged[op]["meta"]["shapes"] += data["meta"]["shapes"]
                merged[op]["meta"]["isolated"] = "each shape measured in a process of its own"
    for data in merged.values():
        data["meta"]["missing_shapes"] = missing
    return merged


def write_frontier(result: dict[str, dict[str, Any]], out: str | Path, plots: bool = True) -> list[Path]:
    """``frontier-<op>.json`` per op in ``out`` and, with matplotlib, one PNG per op and shape."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for op, data in result.items():
        path = folder / f"{FILE_PREFIX}{op}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        written.append(path)
    if plots:
        written += plot_frontier(folder)
    return written


def plot_frontier(folder: str | Path) -> list[Path]:
    """One PNG per op and shape from ``folder``'s frontier JSON files (none without matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for path in sorted(Path(folder).glob(f"{FILE_PREFIX}*.json")):
        data = json.loads(path.read_text())
        meta, points = data["meta"], data["points"]
        for shape in meta["shapes"]:
            rows = [p for p in points if p["shape"] == shape and p.get("status") == OK]
            if not rows:
                continue
            fig, ax = plt.subplots(figsize=(7, 4.5))
            ours = sorted((p for p in rows if p["provider"] == LIGER), key=lambda p: p["budget_mib"])
            if ours:
                xs = [max(p["extra_peak_mib"] or 0.0, 1.0) for p in ours]
                ax.plot(xs, [p["ms"] for p in ours], "o-", color="C0", label="liger (budget MiB)")
                for x, p in zip(xs, ours):
                    label = f"{p['budget_mib']:g}"
                    ax.annotate(label, (x, p["ms"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
            for i, p in enumerate(q for q in rows if q["provider"] not in (LIGER, GEMM_BOUND)):
                x = max(p["extra_peak_mib"] or 0.0, 1.0)
                ax.plot([x], [p["ms"]], "s", color=f"C{i + 1}", label=p["provider"])
            for p in rows:
                if p["provider"] == GEMM_BOUND:
                    ax.axhline(p["ms"], color="gray", linestyle="--", linewidth=1, label="GEMM bound")
            p0 = rows[0]
            ax.set_xscale("log")
            ax.set_xlabel("extra peak memory: the step's peak less its gradients (MiB, log)")
            ax.set_ylabel("forward + backward (ms, median)")
            ax.set_title(
                f"{meta['op']} {p0.get('tokens', '?')}x{p0.get('hidden', '?')}x{p0.get('vocab', '?')} "
                f"{meta['dtype']} on {meta['device']}",
                fontsize=9,
            )
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            png = Path(folder) / f"{FILE_PREFIX}{meta['op']}-{shape.replace('@', '-at-')}.png"
            fig.savefig(png, dpi=110)
            plt.close(fig)
            written.append(png)
    return written


def render_frontier(result: dict[str, dict[str, Any]]) -> str:
    """A plain-text table per op: ms and extra peak MiB per shape and provider."""
    lines = []
    for op, data in result.items():
        meta = data["meta"]
        lines.append(f"{op} (full step, {meta['dtype']}, {meta['device']}): ms / extra peak MiB (beyond the gradients)")
        for p in data["points"]:
            who = p["provider"] + (f" @{p['budget_mib']:g} MiB" if "budget_mib" in p else "")
            if p.get("status") == OK:
                peak = "-" if p.get("extra_peak_mib") is None else f"{p['extra_peak_mib']:.0f}"
                rows = f"  chunk rows {p['chunk_rows']}" if p.get("chunk_rows") else ""
                lines.append(f"  {p['shape']:<20} {who:<26} {p['ms']:9.3f} ms  {peak:>7} MiB{rows}")
            else:
                lines.append(f"  {p['shape']:<20} {who:<26} {p['status']}: {p.get('reason', '')[:100]}")
    return "\n".join(lines)


def mib_list(text: str) -> list[float]:
    """``"128,256,512"`` as MiB values (positive), with a clear error naming ``--budgets``."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise ValueError(f"--budgets must be positive MiB values separated by commas, e.g. 128,256,512; got {text!r}")
    return values
