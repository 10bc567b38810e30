"""The benchmark loop: every (op, sweep point, provider, mode) measured in one process on one device
(who the providers are: `liger_core.bench.providers`; what each op's benchmark builds: its
declaration's `liger_core.bench.spec.BenchSpec`).

Each row holds the p20/p50/p80 time, the timer used, effective bandwidth (the spec's ideal
bytes moved over the p50 time), TFLOP/s for the ops with a matmul, peak memory, and the
ratios of the provider's p50 time and peak memory to this project's in the same row group
(``ratio_to_liger`` above 1: this project is faster). A provider that is not installed or
cannot run on the device gets rows that say so.
"""

from __future__ import annotations

import datetime
import gc
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from liger_core.bench import timing
from liger_core.bench.catalogue import groups, specs
from liger_core.bench.configs import AXES, ModelShape, custom_shape, get_config, get_shape_set
from liger_core.bench.providers import (
    ERROR,
    LIGER,
    OK,
    PEERS,
    PROVIDERS,
    Provider,
    collect_versions,
    default_providers,
    liger_provider,
    make_provider,
    source_tree_hint,
)
from liger_core.bench.spec import (
    MODES,
    BenchSpec,
    ViewOf,
    input_generator,
    materialise,
    randn,
    seeded_generator,
)
from liger_core.device import infer_device

# Row fields, in CSV column order.
FIELDS = (
    "op",
    "provider",
    "mode",
    "axis",
    "x",
    "status",
    "ms_p20",
    "ms_p50",
    "ms_p80",
    "timer",
    "gbps",
    "copy_gbps",
    "of_copy",
    "tflops",
    "peak_mb",
    "ratio_to_liger",
    "mem_ratio_to_liger",
    "max_rel_diff",
    "bytes_moved",
    "flops",
    "config",
    "shape",
    "layout",
    "dtype",
    "device",
    "implementation",
    "versions",
    "note",
)


@dataclass
class BenchResult:
    meta: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def for_op(self, op: str) -> BenchResult:
        return BenchResult(dict(self.meta, ops=[op]), [r for r in self.rows if r["op"] == op])


# -- one measurement ------------------------------------------------------------------------------


def _grad_tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out] if out.requires_grad else []
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _grad_tensors(o)]
    loss = getattr(out, "loss", None)  # a peer's output object (loss, z_loss, ...)
    return _grad_tensors(loss) if loss is not None else []


def _first_tensor(out: Any) -> torch.Tensor | None:
    ts = _grad_tensors(out) or ([out] if isinstance(out, torch.Tensor) else [])
    if not ts and isinstance(out, (tuple, list)):
        ts = [o for o in out if isinstance(o, torch.Tensor)]
    return ts[0] if ts else None


def grad_leaves(kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The leaves whose ``.grad`` a timed call fills: the tensor arguments that require grad, or,
    for a view (LLaMA's transposed q/k, a `ViewOf`), the tensor it views; nulled between calls so
    no accumulation kernel is timed."""
    found: dict[int, torch.Tensor] = {}
    for v in kwargs.values():
        if isinstance(v, ViewOf):
            v = v.base
        if isinstance(v, torch.Tensor) and v.requires_grad:
            leaf = v if v.is_leaf else v._base
            if leaf is not None and leaf.is_leaf:
                found[id(leaf)] = leaf
    return list(found.values())


def _short(e: BaseException, width: int = 300) -> str:
    text = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    return text if len(text) <= width else text[: width - 3] + "..."


@dataclass
class Timing:
    ms: tuple[float, float, float] | None = None
    timer: str = ""
    peak_mb: float | None = None
    error: str = ""
    note: str = ""


def _time(call, leaves, timer: str, device_type: str, rep_ms: int) -> tuple[tuple[float, float, float], str, str]:
    """(p20, p50, p80), the timer used, a note."""

    def reset():
        for t in leaves:
            t.grad = None

    if timer == "wall":
        return timing.wall_time(call, device_type, reset, rep_ms=rep_ms), "wall", ""
    if timer == "cudagraph":
        try:
            return timing.triton_time(call, "cudagraph", leaves, rep_ms=rep_ms), "cudagraph", ""
        except Exception as e:  # noqa: BLE001 - e.g. a host sync inside the call: time it without a graph
            try:
                timing.synchronize(device_type)
            except Exception:  # noqa: BLE001
                pass
            # The failed capture can leave PyTorch's default CUDA generator unusable for eager random
            # ops ("Offset increment outside graph capture"). The bench never draws from it: inputs
            # and upstream gradients come from their own generators (specs.input_generator), so later
            # ops and providers are unaffected. Restore it anyway, for whatever else runs in this process.
            try:
                timing.restore_default_generator(device_type)
            except Exception:  # noqa: BLE001 - best effort: nothing in the bench depends on it
                pass
            note = f"CUDA graph capture failed ({_short(e, 120)}); timed with do_bench"
        # Outside the handler: the exception's frames hold the failed graph and its memory pool.
        # Collect them and hand the pool's memory back, or every later provider runs short of memory.
        gc.collect()
        timing.free_memory(device_type)
        return timing.triton_time(call, "do_bench", leaves, rep_ms=rep_ms), "do_bench", note
    try:
        return timing.triton_time(call, "do_bench", leaves, rep_ms=rep_ms), "do_bench", ""
    except Exception as e:  # noqa: BLE001 - a vendor Triton whose do_bench cannot drive this device
        if device_type == "cuda":
            raise
        note = f"do_bench failed ({_short(e, 120)}); timed with the host clock"
        return timing.wall_time(call, device_type, reset, rep_ms=rep_ms), "wall", note


# What a second backward through one graph raises where it cannot run again: autograd, when the
# backward overwrote a tensor it saved (cross_entropy's in_place gradient over the logits), and the
# fused losses that hand their forward-computed gradients to autograd (`_losses.take_fused_grads`).
# Their backward is derived as full minus forward.
NOT_REPLAYABLE = ("modified by an inplace operation", "handed them to autograd already")


def measure(
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    modes: Sequence[str],
    timer: str,
    device_type: str,
    rep_ms: int = 100,
    gen: torch.Generator | None = None,
) -> dict[str, Timing]:
    """Time ``fn(**kwargs)`` in each mode, views remade at every call (`ViewOf`). Backward under
    the CUDA-graph timer is full minus forward (autograd's retain_graph backward cannot be
    captured). Upstream gradients are drawn from ``gen`` (default: one seeded 0), never from the
    global RNG."""
    leaves = grad_leaves(kwargs)
    out = fn(**materialise(kwargs))  # also the first warm-up (compiles, autotunes)
    outs = _grad_tensors(out)
    if gen is None and outs:
        gen = seeded_generator(0, outs[0].device)
    grads = [torch.ones_like(t) if t.numel() == 1 else randn(t.shape, gen, t.device, t.dtype) for t in outs]
    del out, outs
    if any(m != "forward" for m in modes) and not grads:
        raise RuntimeError("the output does not require grad, so there is no backward to time")

    def forward():
        return fn(**materialise(kwargs))

    def full():
        torch.autograd.backward(_grad_tensors(fn(**materialise(kwargs))), grads)

    results: dict[str, Timing] = {}
    # Under the graph timer, backward is derived from forward and full: time those too.
    extra = ("forward", "full") if timer == "cudagraph" and "backward" in modes else ()
    order = [m for m in ("forward", "full", "backward") if m in modes or m in extra]
    for mode in order:
        saved: list[torch.Tensor] = []
        try:
            if mode == "backward":
                for t in leaves:
                    t.grad = None
                saved = _grad_tensors(fn(**materialise(kwargs)))

                def backward():
                    torch.autograd.backward(saved, grads, retain_graph=True)

                call = backward
                fwd, fl = results.get("forward"), results.get("full")
                if timer == "cudagraph" and fwd and fl and fwd.ms and fl.ms and fwd.timer == fl.timer == "cudagraph":
                    ms = tuple(sorted(max(f - w, 0.0) for f, w in zip(fl.ms, fwd.ms)))  # approximate quantiles
                    used, note = "cudagraph", "full minus forward (a retain_graph backward cannot be captured)"
                else:
                    try:
                        if timer == "cudagraph":
                            ms, used, _ = _time(backward, leaves, "do_bench", device_type, rep_ms)
                            note = "timed with do_bench: no CUDA-graph timing of forward and full to derive it from"
                        else:
                            ms, used, note = _time(backward, leaves, timer, device_type, rep_ms)
                    except RuntimeError as e:
                        if not any(reason in str(e) for reason in NOT_REPLAYABLE):
                            raise
                        saved = []
                        derived = _full_minus_forward(results, forward, full, leaves, timer, device_type, rep_ms)
                        results[mode] = derived
                        continue
            else:
                call = forward if mode == "forward" else full
                ms, used, note = _time(call, leaves, timer, device_type, rep_ms)
            for t in leaves:
                t.grad = None
            peak = timing.peak_memory_mb(call, device_type)
            results[mode] = Timing(ms, used, peak, note=note)
        except Exception as e:  # noqa: BLE001 - one failing mode must not end the run
            results[mode] = Timing(error=_short(e))
            if "out of memory" in str(e).lower():
                timing.free_memory(device_type)
        finally:
            saved = []
            for t in leaves:
                t.grad = None
    return {m: results[m] for m in modes if m in results}


def _full_minus_forward(results, forward, full, leaves, timer, device_type, rep_ms) -> Timing:
    """Backward as full minus forward, timing either where this run has not yet (no peak: a
    backward that cannot run alone has no peak of its own)."""
    for mode, call in (("forward", forward), ("full", full)):
        if mode not in results or not results[mode].ms:
            ms, used, _ = _time(call, leaves, timer, device_type, rep_ms)
            results.setdefault(mode, Timing(ms, used))
    fwd, fl = results["forward"], results["full"]
    ms = tuple(sorted(max(f - w, 0.0) for f, w in zip(fl.ms, fwd.ms)))  # approximate quantiles
    note = (
        "full minus forward: the backward cannot be replayed (it overwrites a tensor it saved, or hands over "
        "gradients computed in the forward)"
    )
    return Timing(ms, fl.timer, None, note=note)


# -- the run --------------------------------------------------------------------------------------


class Progress:
    """tqdm when installed, else one line per step on stderr."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.n, self.enabled, self.bar = total, 0, enabled, None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, file=sys.stderr, unit="run", dynamic_ncols=True)
            except ImportError:
                pass

    def step(self, label: str) -> None:
        self.n += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_description(label, refresh=False)
            self.bar.update(1)
        else:
            print(f"[{self.n}/{self.total}] {label}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    dt = getattr(torch, str(dtype), None)
    if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
        raise ValueError(f"dtype must be a floating torch dtype (bfloat16, float16, float32); got {dtype!r}")
    return dt


def _select_ops(ops: Iterable[str] | None) -> list[BenchSpec]:
    available = specs()
    if ops is None:
        return list(available.values())
    # A group name (norms, activations, losses, moe) stands for its ops.
    by_group = groups()
    ops = [o for name in ops for o in (by_group[name] if name in by_group else [name])]
    ops = list(dict.fromkeys(ops))
    unknown = [o for o in ops if o not in available]
    if unknown:
        raise ValueError(
            f"no bench spec for op(s) {', '.join(unknown)}; benchable ops: {', '.join(available)} "
            f"(groups: {', '.join(by_group)})"
        )
    if not ops:
        raise ValueError("no op selected: the named groups have no op in the catalogue yet")
    return [available[o] for o in ops]


def run_bench(
    ops: Iterable[str] | None = None,
    providers: Sequence[str] | None = None,
    modes: Sequence[str] = MODES,
    config: str | ModelShape | None = None,
    sizes: dict[str, int] | None = None,
    sweep: tuple[str, Sequence[int]] | None = None,
    dtype: str | torch.dtype = "bfloat16",
    device: str | None = None,
    backend: str | None = None,
    timer: str = "auto",
    rep_ms: int = 100,
    progress: bool = True,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    layout: str | None = None,
    shapes: str | Sequence[ModelShape] | None = None,
) -> BenchResult:
    """Benchmark ops against their peers on one device; see the module docstring.

    Args:
        ops: op names (default: every catalogue op with a bench spec).
        providers: from ``PROVIDERS`` (default per op: liger, torch, torch.compile, liger-kernel,
            plus cut-cross-entropy for fused linear cross-entropy and torch_npu on an NPU).
        modes: any of forward, backward, full.
        config: a name from ``MODEL_CONFIGS`` or a ``ModelShape``; ``sizes`` overrides fields.
            Default: ``llama-3-8b`` on an accelerator, ``tiny`` on the CPU (where timings only
            check the harness: LLaMA shapes on the PyTorch reference take minutes).
        sweep: ``(axis, values)``: one run per value of that ModelShape field; else one point
            on the ``tokens`` axis.
        device: device type (default: this machine's accelerator, else cpu).
        backend: run this backend's kernels for the ``liger`` provider instead of dispatch.
        timer: auto, cudagraph, do_bench or wall (see ``liger_core.bench.timing``).
        layout: build each op's inputs in this layout of its spec (``contiguous`` q/k for RoPE);
            default: the layout the models pass. Ops without that layout keep their default.
        shapes: a name from ``SHAPE_SETS`` or a sequence of ``ModelShape``: one run per shape, in place
            of ``config``/``sizes``/``sweep`` (rows: axis ``shape``, x the shape's name).
    """
    bad_modes = [m for m in modes if m not in MODES]
    if bad_modes or not modes:
        raise ValueError(f"modes must be among {', '.join(MODES)}; got {', '.join(bad_modes) or 'none'}")
    modes = [m for m in MODES if m in modes]
    if providers is not None:
        unknown = [p for p in providers if p not in PROVIDERS]
        if unknown:
            raise ValueError(f"unknown provider(s) {', '.join(unknown)}; known: {', '.join(PROVIDERS)}")
    selected = [spec.with_layout(layout if layout in spec.layouts else None) for spec in _select_ops(ops)]
    if layout is not None and not any(layout in spec.layouts for spec in selected):
        known = sorted({name for spec in selected for name in spec.layouts})
        raise ValueError(f"no selected op has layout {layout!r}; their layouts: {', '.join(known)}")
    device_type = device or infer_device()
    points: dict[Any, ModelShape] | None = None
    if shapes is not None:
        if config is not None or sizes or sweep:
            raise ValueError("shapes replaces config, sizes and sweep: give one or the other")
        set_name = shapes if isinstance(shapes, str) else "custom"
        listed = get_shape_set(shapes) if isinstance(shapes, str) else tuple(shapes)
        if not listed:
            raise ValueError("shapes must name at least one shape")
        points = {p.name: p for p in listed}
        if len(points) != len(listed):
            raise ValueError(f"shapes must have distinct names; got {', '.join(p.name for p in listed)}")
        base, axis, values = listed[0], "shape", list(points)
    else:
        if config is None:
            config = "tiny" if device_type == "cpu" else "llama-3-8b"
        base = get_config(config) if isinstance(config, str) else config
        base = custom_shape(base, **(sizes or {}))
        axis, values = sweep if sweep else ("tokens", [base.tokens])
        if axis not in AXES:
            raise ValueError(f"sweep axis must be one of {', '.join(AXES)}; got {axis!r}")
        values = [int(v) for v in values]
    dt = _parse_dtype(dtype)
    dev = torch.device(device_type)
    used_timer = timing.resolve_timer(timer, device_type)
    notes = [n for n in (source_tree_hint(device_type) if not backend else "",) if n]
    if device_type == "cpu":
        notes.append(
            "timed on the CPU: the Triton kernels run in the interpreter (or the PyTorch reference runs), so the "
            "times and ratios say nothing about GPU speed; CPU runs check that the harness works"
        )
    plans = []
    for spec in selected:
        names = list(providers) if providers is not None else default_providers(spec, device_type)
        # this project's row first: the others' ratios refer to it
        names = ([LIGER] if LIGER in names else []) + [n for n in names if n != LIGER]
        plans.append((spec, names))
    liger_impl = liger_provider(selected[0].op, device_type, backend).implementation if selected else ""
    versions = collect_versions(device_type, (liger_impl.split() or [None])[0])
    dev_name = timing.device_name(dev)
    meta = {
        "device": dev_name,
        "device_type": device_type,
        "dtype": str(dt).removeprefix("torch."),
        "config": f"shapes {set_name}" if points else base.name,
        "shape": base.as_dict(),
        **({"shapes": [p.as_dict() for p in points.values()]} if points else {}),
        "axis": axis,
        "values": values,
        "modes": modes,
        "timer": used_timer,
        "quantiles": list(timing.QUANTILES),
        "rep_ms": rep_ms,
        "backend": backend or "dispatch",
        "liger": liger_impl,
        "notes": notes,
        "versions": versions,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "ops": [s.op for s in selected],
        "skipped_ops": {},
    }
    version_text = ";".join(f"{k}={v}" for k, v in versions.items())
    result = BenchResult(meta)
    total = sum(
        sum(1 for n in names if n not in PEERS or n in spec.peers) * len(values) * len(modes)
        for spec, names in plans
        if points or axis in spec.axes or len(values) == 1
    )
    bar = Progress(total, progress)
    try:
        for spec, names in plans:
            if not points and axis not in spec.axes and len(values) > 1:
                meta["skipped_ops"][spec.op] = f"its shapes do not depend on {axis!r} (they use {', '.join(spec.axes)})"
                continue
            for x in values:
                shape = points[x] if points else base.with_axis(axis, x)
                rows = _bench_point(spec, names, shape, dt, dev, modes, used_timer, backend, rep_ms, bar)
                for r in rows:
                    r.update(axis=axis, x=x, config=shape.name, device=dev_name, versions=version_text)
                    r["shape"] = spec.describe(shape)
                    r["layout"] = spec.layout
                    r["dtype"] = meta["dtype"]
                _add_ratios(rows)
                for r in rows:
                    row = {k: r.get(k) for k in FIELDS}
                    result.rows.append(row)
                    if on_row is not None:
                        on_row(row)
    finally:
        bar.close()
    return result


def _rel_diff(got: torch.Tensor | None, want: torch.Tensor | None) -> float | None:
    if got is None or want is None or got.shape != want.shape:
        return None
    g, w = got.detach().float(), want.detach().float()
    scale = w.abs().max().item() if w.numel() else 0.0
    return (g - w).abs().max().item() / max(scale, 1e-6) if w.numel() else 0.0


def _run_provider(provider, spec, shape, dt, dev, modes, timer, rep_ms, want):
    """(timings per mode, max relative difference of the forward output from torch eager's)."""
    diff = None
    try:
        # Every provider gets the same inputs and upstream gradients: drawn from a generator seeded
        # by the op and shape (the upstream gradients after the inputs), not from the global RNG.
        gen = input_generator(spec.op, shape, dev)
        kwargs = spec.arguments(shape, dt, dev, gen)
        if provider.prepare is not None:
            kwargs = provider.prepare(kwargs)
        with torch.no_grad():
            diff = _rel_diff(_first_tensor(provider.fn(**materialise(kwargs))), want)
        timings = measure(provider.fn, kwargs, modes, timer, dev.type, rep_ms, gen)
    except Exception as e:  # noqa: BLE001 - the provider fails on this op: report it
        timings = {m: Timing(error=_short(e)) for m in modes}
    kwargs = None
    timing.free_memory(dev.type)
    return timings, diff


def _fill(row: dict[str, Any], t: Timing, spec: BenchSpec, shape: ModelShape, dt: torch.dtype) -> None:
    if t.error:
        row.update(status=ERROR, note=t.error)
        return
    p20, p50, p80 = t.ms
    nbytes = spec.bytes_moved(shape, dt, row["mode"])
    flops = spec.flop_count(shape, row["mode"])
    row.update(
        status=OK,
        ms_p20=p20,
        ms_p50=p50,
        ms_p80=p80,
        timer=t.timer,
        peak_mb=t.peak_mb,
        bytes_moved=nbytes,
        flops=flops,
        gbps=nbytes / (p50 * 1e-3) / 1e9 if p50 > 0 else None,
        tflops=flops / (p50 * 1e-3) / 1e12 if flops and p50 > 0 else None,
        note=t.note,
    )


_COPY_GBPS: dict[tuple[str, int, str], float | None] = {}


def copy_gbps(nbytes: int, dev: torch.device, timer: str, rep_ms: int) -> float | None:
    """GB/s of a plain device copy moving ``nbytes`` (half read, half written) with ``timer``: what a
    memory-bound op's GB/s is measured against (cached per device, size and timer for the run).
    None where it cannot be measured (no bytes, or the copy fails to time)."""
    key = (str(dev), nbytes, timer)
    if key not in _COPY_GBPS:
        half = nbytes // 2
        result = None
        if half > 0:
            try:
                src = torch.empty(half, dtype=torch.uint8, device=dev)
                dst = torch.empty_like(src)
                (_, p50, _), _, _ = _time(lambda: dst.copy_(src), [], timer, dev.type, rep_ms)
                result = 2 * half / (p50 * 1e-3) / 1e9 if p50 > 0 else None
            except Exception:  # noqa: BLE001 - the rows keep their own GB/s; only the reference is missing
                result = None
            src = dst = None
            timing.free_memory(dev.type)
        _COPY_GBPS[key] = result
    return _COPY_GBPS[key]


def _add_copy_reference(rows: list[dict[str, Any]], dev: torch.device, rep_ms: int) -> None:
    """copy_gbps and of_copy (the row's GB/s as a fraction of a copy of the same bytes, same timer)
    for the memory-bound ops' rows (those without a FLOP count)."""
    for row in rows:
        if row.get("status") != OK or row.get("flops") or not row.get("gbps") or not row.get("bytes_moved"):
            continue
        ref = copy_gbps(row["bytes_moved"], dev, row["timer"], rep_ms)
        if ref:
            row.update(copy_gbps=ref, of_copy=row["gbps"] / ref)


def _bench_point(spec, names, shape, dt, dev, modes, timer, backend, rep_ms, bar) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    want = None
    try:
        with torch.no_grad():
            want = _first_tensor(spec.torch_fn(**spec.inputs(shape, dt, dev)))
    except Exception:  # noqa: BLE001 - the torch rows report it
        want = None
    ran: dict[str, Provider] = {}
    for name in names:
        label = f"{spec.op} {name} {shape.tokens}t"
        provider = make_provider(name, spec, dev.type, backend)
        if provider is None:
            continue
        base = {"op": spec.op, "provider": name, "implementation": provider.implementation}
        if provider.status != OK:
            for mode in modes:
                bar.step(f"{label} {mode}")
                rows.append(dict(base, mode=mode, status=provider.status, note=provider.reason))
            continue
        ran[name] = provider
        timings, diff = _run_provider(provider, spec, shape, dt, dev, modes, timer, rep_ms, want)
        for mode in modes:
            bar.step(f"{label} {mode}")
            row = dict(base, mode=mode, max_rel_diff=diff)
            _fill(row, timings.get(mode) or Timing(error="not measured"), spec, shape, dt)
            rows.append(row)
    if timer == "cudagraph":
        # A call that cannot be captured (a host sync inside) was timed with do_bench: time the
        # other providers of that mode with do_bench too, so the row group compares like with like.
        for mode in modes:
            group = [r for r in rows if r["mode"] == mode and r["status"] == OK]
            if len({r["timer"] for r in group}) < 2:
                continue
            for row in group:
                if row["timer"] != "cudagraph":
                    continue
                graph_ms = row["ms_p50"]
                timings, _ = _run_provider(ran[row["provider"]], spec, shape, dt, dev, [mode], "do_bench", rep_ms, None)
                t = timings.get(mode) or Timing(error="not measured")
                if t.error:
                    row["note"] = ((row.get("note") or "") + f"; do_bench re-timing failed: {t.error}").lstrip("; ")
                    continue
                peak = row["peak_mb"]
                _fill(row, t, spec, shape, dt)
                row["peak_mb"] = peak
                row["note"] = (
                    f"timed with do_bench like another provider of this mode that a CUDA graph cannot "
                    f"capture (CUDA-graph p50 {graph_ms:.4g} ms)"
                )
    _add_copy_reference(rows, dev, rep_ms)
    return rows


def _add_ratios(rows: list[dict[str, Any]]) -> None:
    """ratio_to_liger = provider p50 / liger p50 (and the same for peak memory), per mode."""
    for mode in {r["mode"] for r in rows}:
        ref = next((r for r in rows if r["mode"] == mode and r["provider"] == LIGER and r["status"] == OK), None)
        for r in rows:
            if r["mode"] != mode or r["status"] != OK or ref is None:
                continue
            r["ratio_to_liger"] = r["ms_p50"] / ref["ms_p50"] if ref["ms_p50"] > 0 else None
            if r.get("peak_mb") is not None and ref.get("peak_mb"):
                r["mem_ratio_to_liger"] = r["peak_mb"] / ref["peak_mb"]
            if r["timer"] != ref["timer"]:
                r["note"] = ((r.get("note") or "") + f"; timers differ (liger: {ref['timer']})").lstrip("; ")
