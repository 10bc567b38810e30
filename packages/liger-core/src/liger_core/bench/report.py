"""Results on disk (JSON, CSV, one PNG per op) and the summary table.

Layout of an output folder: ``<op>.json`` ({"meta", "rows"}), ``<op>.csv`` (one row per
provider, mode and x value), ``<op>.png`` (time and peak memory against the swept axis,
one line per provider), and ``summary.md`` (every op found in the folder). Runs of
different ops into one folder add up; a rerun of an op replaces its files.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from liger_core.bench.providers import LIGER, OK
from liger_core.bench.runner import FIELDS, BenchResult
from liger_core.interface import CATALOGUE


def write_json(result: BenchResult, path: str | Path) -> None:
    Path(path).write_text(json.dumps({"meta": result.meta, "rows": result.rows}, indent=1) + "\n")


def read_json(path: str | Path) -> BenchResult:
    data = json.loads(Path(path).read_text())
    return BenchResult(data["meta"], data["rows"])


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(FIELDS))
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in FIELDS})


def write_results(result: BenchResult, out: str | Path, plots: bool = True) -> list[Path]:
    """Per-op JSON, CSV and (when matplotlib is installed) PNG in ``out``, then ``summary.md``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for op in dict.fromkeys(r["op"] for r in result.rows):
        part = result.for_op(op)
        write_json(part, out / f"{op}.json")
        write_csv(part.rows, out / f"{op}.csv")
        written += [out / f"{op}.json", out / f"{op}.csv"]
    if plots:
        written += plot_folder(out, only=[r["op"] for r in result.rows])
    written.append(write_summary(out))
    return written


def load_folder(folder: str | Path) -> list[BenchResult]:
    """Every ``liger bench`` JSON in ``folder`` (other JSON files are left alone)."""
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("meta"), dict) and isinstance(data.get("rows"), list):
            out.append(BenchResult(data["meta"], data["rows"]))
    # Catalogue order (ops the catalogue no longer has last).
    order = {op: i for i, op in enumerate(CATALOGUE)}
    return sorted(out, key=lambda r: order.get(r.rows[0]["op"] if r.rows else "", len(order)))


# -- summary ------------------------------------------------------------------------------------


def _num(v: Any, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 10**digits else f"{v:.0f}"
    return str(v)


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r["status"] != OK:
        return r["status"]
    ratio = r.get("ratio_to_liger")
    return f"{_num(r['ms_p50'])}" + (f" ({ratio:.3g}x)" if ratio is not None and r["provider"] != LIGER else "")


def summary_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Pivot: one line per (op, mode, x); this project's p50 ms, GB/s (TFLOP/s for matmul ops)
    and peak MB, then each peer's p50 ms with its ratio to this project's (above 1: slower)."""
    providers = list(dict.fromkeys(r["provider"] for r in rows))
    peers = [p for p in providers if p != LIGER]
    headers = ["op", "mode", "x", "liger ms", "GB/s or TFLOP/s", "peak MB", *(f"{p} ms (vs liger)" for p in peers)]
    groups: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["op"], r["mode"], r["axis"], r["x"]), {})[r["provider"]] = r
    out = []
    for (op, mode, axis, x), by in groups.items():
        mine = by.get(LIGER)
        if mine is not None and mine["status"] == OK:
            rate = f"{_num(mine['tflops'])} TF" if mine.get("tflops") else _num(mine.get("gbps"), 4)
            if mine.get("of_copy"):
                rate += f" ({mine['of_copy']:.0%} of copy)"
            # "ref": no vendor kernel served the op, the PyTorch reference ran.
            ref = " (ref)" if str(mine.get("implementation") or "").startswith("reference") else ""
            lead = [_num(mine["ms_p50"]) + ref, rate, _num(mine.get("peak_mb"))]
        else:
            lead = [mine["status"] if mine else "-", "-", "-"]
        out.append([op, mode, f"{axis}={x}", *lead, *(_cell(by.get(p)) for p in peers)])
    return headers, out


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    cells = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append(indent + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
        if n == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def problems(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per provider that did not run (not installed, unavailable, errors)."""
    seen: dict[tuple, None] = {}
    for r in rows:
        if r["status"] != OK:
            seen[(r["provider"], r["status"], r.get("note") or "", r["op"])] = None
    lines: dict[tuple, list[str]] = {}
    for provider, status, note, op in seen:
        lines.setdefault((provider, status, note), []).append(op)
    return [f"{p}: {s}: {n} ({', '.join(dict.fromkeys(ops))})" for (p, s, n), ops in lines.items()]


def render_summary(result: BenchResult) -> str:
    m = result.meta
    head = f"{m['device']} ({m['device_type']}), {m['dtype']}, {m['config']}, timer {m['timer']}; " + ", ".join(
        f"{k} {v}" for k, v in m["versions"].items()
    )
    headers, rows = summary_rows(result.rows)
    out = [head, f"liger: {m.get('liger') or '-'}"]
    out += [f"note: {note}" for note in m.get("notes", [])]
    out.append(text_table(headers, rows))
    issues = problems(result.rows)
    if issues:
        out += ["Did not run:"] + [f"  {line}" for line in issues]
    for op, why in m.get("skipped_ops", {}).items():
        out.append(f"Skipped {op}: {why}")
    return "\n".join(out)


def write_summary(folder: str | Path) -> Path:
    """``summary.md`` for every ``<op>.json`` in ``folder``: the table, plots and how it was run."""
    folder = Path(folder)
    results = load_folder(folder)
    rows = [r for res in results for r in res.rows]
    lines = ["# Benchmark summary", ""]
    if results:
        metas = {json.dumps({k: res.meta[k] for k in ("device", "dtype", "config", "timer")}) for res in results}
        for text in sorted(metas):
            m = json.loads(text)
            lines.append(f"- {m['device']}, {m['dtype']}, shapes from {m['config']}, timer {m['timer']}")
        versions = {k: v for res in results for k, v in res.meta["versions"].items()}
        lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
        lines.append(
            "- liger ms: p50 of this project's op; GB/s from the op's ideal bytes moved (TF: TFLOP/s for "
            "the fused linear losses), with the share of a device copy's GB/s at the same bytes and timer; "
            "each peer's p50 ms with its time relative to this project's "
            "(above 1x: this project is faster). (ref): no vendor kernel for the op, the PyTorch reference ran."
        )
        lines += ["", markdown_table(*summary_rows(rows)), ""]
        issues = problems(rows)
        if issues:
            lines += ["Did not run:", ""] + [f"- {line}" for line in issues] + [""]
        pngs = sorted(folder.glob("*.png"))
        if pngs:
            lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    path = folder / "summary.md"
    path.write_text("\n".join(lines))
    return path


# -- plots ---------------------------------------------------------------------------------------


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot_op(result: BenchResult, path: str | Path) -> Path:
    """Time (p50, p20-p80 band) and peak memory against the swept axis, one column per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result.rows if r["status"] == OK]
    modes = [m for m in ("forward", "backward", "full") if any(r["mode"] == m for r in rows)] or ["forward"]
    op = result.rows[0]["op"] if result.rows else "?"
    axis = result.meta.get("axis", "x")
    providers = list(dict.fromkeys(r["provider"] for r in result.rows))
    fig, axes = plt.subplots(2, len(modes), figsize=(5 * len(modes), 7), squeeze=False)
    xs_all = sorted({r["x"] for r in rows})
    for j, mode in enumerate(modes):
        for i, (key, label) in enumerate((("ms_p50", "time (ms, p50; band p20-p80)"), ("peak_mb", "peak memory (MB)"))):
            ax = axes[i][j]
            for k, p in enumerate(providers):
                pts = sorted((r["x"], r) for r in rows if r["provider"] == p and r["mode"] == mode)
                pts = [(x, r) for x, r in pts if r.get(key) is not None]
                if not pts:
                    if len(xs_all) == 1 and key == "ms_p50":
                        # Say why a provider has no bar (not installed, error...).
                        why = next((r["status"] for r in result.rows if r["provider"] == p and r["mode"] == mode), "")
                        ax.text(k, 0, f" {why}", rotation=90, ha="center", va="bottom", fontsize=8, color="gray")
                    continue
                if len(xs_all) == 1:
                    bar = ax.bar(k, pts[0][1][key], label=p)
                    ax.bar_label(bar, [_num(pts[0][1][key], 3)], fontsize=8)
                    if key == "ms_p50":
                        r = pts[0][1]
                        ax.errorbar(
                            k, r["ms_p50"], [[r["ms_p50"] - r["ms_p20"]], [r["ms_p80"] - r["ms_p50"]]], color="k"
                        )
                    continue
                xs = [x for x, _ in pts]
                ax.plot(xs, [r[key] for _, r in pts], marker="o", label=p)
                if key == "ms_p50":
                    ax.fill_between(xs, [r["ms_p20"] for _, r in pts], [r["ms_p80"] for _, r in pts], alpha=0.2)
            empty = not ax.has_data()
            if empty:
                ax.text(
                    0.5,
                    0.5,
                    "no data (no allocator statistics on cpu)" if key == "peak_mb" else "no data",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                )
            if empty:
                ax.set_xticks([])
                ax.set_yticks([])
            elif len(xs_all) == 1:
                ax.set_xticks(range(len(providers)), providers, rotation=30, ha="right")
                ax.set_xlabel(f"{axis}={xs_all[0]}")
            else:
                ax.set_xscale("log", base=2)
                if ax.has_data():
                    ax.set_yscale("log")  # sweeps span decades
                ax.set_xlabel(axis)
            ax.set_ylabel(label)
            ax.set_title(f"{op} {mode}")
            ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles and len(xs_all) > 1:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.955), ncol=len(providers))
    m = result.meta
    fig.suptitle(f"{op}: {m.get('device')}, {m.get('dtype')}, {m.get('config')}, timer {m.get('timer')}", y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_folder(folder: str | Path, only: Sequence[str] | None = None) -> list[Path]:
    """One PNG per ``<op>.json`` in ``folder`` (``only``: these ops). Empty, with a note on
    stderr, when matplotlib is missing."""
    import sys

    if not have_matplotlib():
        print(
            "matplotlib is not installed: no plots (pip install matplotlib, then `liger bench --replot DIR`)",
            file=sys.stderr,
        )
        return []
    out = []
    for res in load_folder(folder):
        op = res.rows[0]["op"] if res.rows else None
        if op is None or (only is not None and op not in only):
            continue
        out.append(plot_op(res, Path(folder) / f"{op}.png"))
    return out


# -- the README block ----------------------------------------------------------------------------

BEGIN, END = "<!-- liger-bench:begin -->", "<!-- liger-bench:end -->"


def readme_block(folder: str | Path, relative_to: str | Path, modes: Sequence[str] = ("full",)) -> str:
    """``folder``'s summary for a README: header line, the table for ``modes``, plot links."""
    import os

    folder = Path(folder)
    results = load_folder(folder)
    if not results:
        raise ValueError(f"no <op>.json results in {folder}")
    rows = [r for res in results for r in res.rows if r["mode"] in modes]
    m = results[0].meta
    versions = {k: v for res in results for k, v in res.meta["versions"].items()}
    rel = Path(os.path.relpath(folder, Path(relative_to).parent))
    lines = [
        f"{m['device']}, {m['dtype']}, shapes of {m['config']}, {'/'.join(modes)} (forward + backward), "
        f"timer {m['timer']}; " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
        "",
        "liger ms: this project's p50; GB/s from the op's ideal bytes moved (TF: TFLOP/s), with the share of a "
        "device copy's GB/s at the same bytes and timer; each peer's p50 "
        "with its time relative to this project's (above 1x: this project is faster); (ref): no vendor "
        "kernel for the op yet, the PyTorch reference ran.",
        "",
        markdown_table(*summary_rows(rows)),
        "",
        f"Every mode, figure and note: [{rel}/summary.md]({rel}/summary.md).",
    ]
    pngs = sorted(folder.glob("*.png"))
    if pngs:
        # Three plots a line (time and peak memory per mode, one bar or line per provider).
        lines += ["", "<p>"] + [f'<img src="{rel}/{p.name}" alt="{p.stem}" width="32%">' for p in pngs] + ["</p>"]
    return "\n".join(lines)


def update_readme(readme: str | Path, folder: str | Path) -> None:
    """Replace what lies between the liger-bench markers in ``readme`` with ``folder``'s block."""
    path = Path(readme)
    text = path.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{readme} must hold the lines {BEGIN} and {END} once each, in that order")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    path.write_text(head + BEGIN + "\n" + readme_block(folder, path) + "\n" + END + tail)
