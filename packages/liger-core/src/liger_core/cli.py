"""The ``liger`` command.

``liger info``   what is installed and which backend serves each op on each device.
``liger check``  run every op on this machine against the float64 reference.
``liger bench``  time every op against torch, torch.compile, liger-kernel and other peers.
``liger families``  the transformers model families ``liger_core.transformers`` patches and the ops each uses.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from liger_core import registry
from liger_core.__about__ import __version__
from liger_core.backend import Backend, LigerBackendError
from liger_core.bench.cli import add_parser as add_bench_parser
from liger_core.device import DEVICE_TYPES, device_available, infer_device
from liger_core.interface import CATALOGUE, INTERFACE_VERSION, format_version, parse_version

# What each environment variable does, for `liger info`.
ENV_VARS = {
    "LIGER_BACKEND": "force this backend for every device",
    "LIGER_DISABLE_BACKENDS": "ignore these backends",
    "LIGER_STRICT": "no reference fallback: an unserved device is an error",
    "LIGER_CONFORMANCE_BACKEND": "backend the conformance suite checks",
    "LIGER_TEST_DEVICE": "device the conformance suite runs on",
    "TRITON_INTERPRET": "Triton kernels run in the interpreter (on CPU tensors)",
}

CHECK_HELP = """\
Run every catalogue op, forward and every gradient, in float32, bfloat16 and float16 on a
couple of shapes, and compare with the PyTorch reference computed in float64 (the tolerances
of liger_core.conformance). Exit status 0 when all pass, 1 otherwise.

By default the ops run on this machine's default device, each on the backend that dispatch
picks there (honouring LIGER_BACKEND; the reference where no vendor package serves it).

--backend NAME checks one backend's kernels directly. When that backend's device is absent
(e.g. --backend ascend on a machine without an NPU) the inputs go on the CPU and the kernels
must run in the Triton interpreter: liger check then sets TRITON_INTERPRET=1 itself, before
the vendor package is imported (Triton reads it when the kernels are defined). Setting
TRITON_INTERPRET=1 in the environment yourself does the same. Run it in the vendor's own
environment (its Triton: triton, triton-ascend or triton-xpu).

The full conformance suite (many more shapes and options) runs from pytest; see the README.
"""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "  ") -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if n == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _runtime(backend: Backend) -> str:
    if backend.runtime is None:
        return "-"
    try:
        return str(backend.runtime())
    except Exception as e:  # noqa: BLE001 - info must never fail on one backend's runtime query
        return f"unknown ({type(e).__name__}: {e})"


def _serving(op: str, device_type: str) -> dict[str, Any]:
    """Which backend serves ``op`` on ``device_type``: {"backend", "fallback", "error"}."""
    return dataclasses.asdict(registry.serving(op, device_type))


# -- liger info ------------------------------------------------------------------------------


def collect_info() -> dict[str, Any]:
    """Everything ``liger info`` shows, as plain data (what ``--json`` prints)."""
    devices = {}
    for device_type in DEVICE_TYPES:
        try:
            devices[device_type] = device_available(device_type)
        except Exception:  # noqa: BLE001 - a broken vendor runtime means no such device
            devices[device_type] = False
    backends = [
        {
            "name": b.name,
            "distribution": b.distribution,
            "version": b.version,
            "interface_version": b.interface_version,
            "device_types": list(b.device_types),
            "runtime": _runtime(b),
            "ops": sorted(b.ops),
        }
        for b in registry.backends().values()
    ]
    ops = {
        name: {
            "since": format_version(spec.since),
            "devices": {device_type: _serving(name, device_type) for device_type in DEVICE_TYPES},
        }
        for name, spec in CATALOGUE.items()
    }
    env = {k: os.environ[k] for k in ENV_VARS if k in os.environ}
    env.update({k: v for k, v in os.environ.items() if k.startswith("LIGER_") and k not in ENV_VARS})
    return {
        "liger_core": __version__,
        "interface_version": format_version(INTERFACE_VERSION),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "default_device": infer_device(),
        "devices": devices,
        "backends": backends,
        "ops": ops,
        "env": env,
        "problems": [
            {"name": p.name, "source": p.source, "error": p.error, "device_types": list(p.device_types)}
            for p in registry.problems().values()
        ],
    }


def _cell(serving: dict[str, Any]) -> str:
    if serving["error"]:
        return "ERROR"
    return serving["backend"] + ("*" if serving["fallback"] else "")


def render_info(info: dict[str, Any]) -> str:
    available = ", ".join(d for d, ok in info["devices"].items() if ok)
    out = [
        f"liger-core {info['liger_core']} (op interface {info['interface_version']})",
        f"torch {info['torch']}, Python {info['python']}",
        f"default device: {info['default_device']} (available: {available})",
        "",
        "Backends:",
        _table(
            ("name", "distribution", "version", "interface", "devices", "kernel runtime"),
            [
                (
                    b["name"],
                    b["distribution"],
                    b["version"],
                    b["interface_version"],
                    ",".join(b["device_types"]) or "(fallback)",
                    b["runtime"],
                )
                for b in info["backends"]
            ],
        ),
        "",
        "Ops: the backend serving each op per device type (* = PyTorch reference fallback, with a warning):",
        _table(
            ("op", "since", *DEVICE_TYPES),
            [(op, o["since"], *(_cell(o["devices"][d]) for d in DEVICE_TYPES)) for op, o in info["ops"].items()],
        ),
    ]
    errors = sorted({s["error"] for o in info["ops"].values() for s in o["devices"].values() if s["error"]})
    for error in errors:
        out.append(f"  ERROR: {error}")
    out += ["", "Environment overrides:" if info["env"] else "Environment overrides: none"]
    for k, v in info["env"].items():
        out.append(f"  {k}={v}  ({ENV_VARS.get(k, 'not a variable liger-core reads')})")
    out += ["", "Problems:" if info["problems"] else "Problems: none"]
    for p in info["problems"]:
        out.append(f"  {p['name']} from {p['source']}:\n    {p['error']}")
    return "\n".join(out)


def cmd_info(args: argparse.Namespace) -> int:
    info = collect_info()
    print(json.dumps(info, indent=2) if args.json else render_info(info))
    return 0


# -- liger check -----------------------------------------------------------------------------


def _parse_ops(text: str | None, parser: argparse.ArgumentParser) -> list[str]:
    if not text:
        return list(CATALOGUE)
    ops = [o.strip() for o in text.split(",") if o.strip()]
    unknown = [o for o in ops if o not in CATALOGUE]
    if unknown:
        parser.error(f"unknown op(s) {', '.join(unknown)}; the catalogue has {', '.join(CATALOGUE)}")
    return ops


def _shape_text(smoke) -> str:
    """A smoke sample's shape (its id without the dtype where it names none)."""
    if smoke is None:
        return "-"
    shape = smoke.params.get("shape")
    return "x".join(map(str, shape)) if shape is not None else smoke.with_params(dtype=None).id


def _first_line(text: str, width: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def cmd_check(args: argparse.Namespace) -> int:
    from liger_core.conformance import DTYPES
    from liger_core.conformance.check import check_sample

    ops = _parse_ops(args.ops, args.parser)
    chosen = args.backend or os.environ.get("LIGER_BACKEND", "").strip() or None
    device, note = registry.device_for_backend(chosen, args.device)
    if not device_available(device):
        print(f"liger check: device {device!r} is not available on this machine", file=sys.stderr)
        return 1
    # Which backend runs each op; None: the op cannot run there, with the reason and whether
    # that is a failure ("FAIL") or expected ("SKIP": the backend's interface predates the op).
    plan: dict[str, tuple[Backend | None, str, str]] = {}
    if args.backend:
        try:
            backend = registry.get_backend(args.backend)
        except LigerBackendError as e:
            print(f"liger check: {e}", file=sys.stderr)
            return 1
        for op in ops:
            if op in backend.ops:
                plan[op] = (backend, "", "")
            elif CATALOGUE[op].since > parse_version(backend.interface_version):
                why = f"{backend.name} implements interface {backend.interface_version}, which predates op {op!r}"
                plan[op] = (None, why, "SKIP")
            else:
                plan[op] = (None, f"{backend.name} lacks op {op!r}", "FAIL")
    else:
        for op in ops:
            s = _serving(op, device)
            plan[op] = (registry.get_backend(s["backend"]), "", "") if s["backend"] else (None, s["error"], "FAIL")

    if note:  # only now: a backend that is not installed gets its error alone, not an interpreter note first
        print(note)
    interp = " (Triton interpreter)" if os.environ.get("TRITON_INTERPRET") == "1" else ""
    names = sorted({b.name for b, _, _ in plan.values() if b is not None})
    print(f"liger check: {len(ops)} op(s) on {device}{interp}, backend(s) {', '.join(names) or '-'}")
    for name in names:
        b = registry.get_backend(name)
        print(f"  {b.name}: {b.distribution} {b.version}, interface {b.interface_version}, kernels on {_runtime(b)}")

    cases = []
    for op in ops:
        backend, why, status = plan[op]
        if why:
            cases.append((op, backend, None, None, why, status))
            continue
        cases += [
            (op, backend, dtype, s.with_params(dtype=dtype), None, "") for dtype in DTYPES for s in CATALOGUE[op].smoke
        ]

    rows, failures = [], []
    for i, (op, backend, dtype, smoke, why, status) in enumerate(cases, 1):
        bname = backend.name if backend is not None else "-"
        dname = _dtype_name(dtype) if dtype is not None else "-"
        sname = _shape_text(smoke)
        label = f"[{i}/{len(cases)}] {op} {dname} {sname} on {bname}/{device}"
        print(f"{label} ...", end=" ", flush=True)
        start = time.perf_counter()
        if why is not None:
            result, error = status, why
        else:
            try:
                check_sample(backend, op, smoke, device)
                result, error = "PASS", ""
            except Exception as e:  # noqa: BLE001 - a kernel may fail any way; report and go on
                result = "FAIL"
                error = str(e) if isinstance(e, AssertionError) and str(e) else f"{type(e).__name__}: {e}"
        seconds = time.perf_counter() - start
        print(f"{result} ({seconds:.2f}s)", flush=True)
        rows.append((op, bname, dname, sname, result, f"{seconds:.2f}s", _first_line(error)))
        if result == "FAIL":
            failures.append((f"{op} {dname} {sname} on {bname}", error))

    # Each result is printed once, as it comes; the table repeats only those that did not pass.
    not_passed = [row for row in rows if row[4] != "PASS"]
    if not_passed:
        print()
        print(_table(("op", "backend", "dtype", "shape", "result", "time", "error"), not_passed))
    if failures:
        print("\nFailures:")
        for what, error in failures:
            print(f"  {what}:\n    " + error.strip().replace("\n", "\n    "))
    passed = sum(row[4] == "PASS" for row in rows)
    skipped = sum(row[4] == "SKIP" for row in rows)
    print(f"\n{passed} passed, {len(failures)} failed" + (f", {skipped} skipped" if skipped else ""))
    return 1 if failures else 0


# -- liger families --------------------------------------------------------------------------


def collect_families() -> dict[str, Any]:
    """Every patched model family: its flags and defaults, the catalogue ops each flag uses, what it lacks yet,
    and whether the installed transformers (if any) has it. Needs no transformers to list them."""
    from liger_core.transformers import monkey_patch as mp

    try:
        import transformers

        installed = transformers.__version__
    except ImportError:
        installed = None
    families = {}
    for model_type, fam in mp.FAMILIES.items():
        ops = mp.family_ops(model_type)
        available = installed is not None and mp.family_available(model_type)
        families[model_type] = {
            "function": f"apply_liger_kernel_to_{model_type}",
            "module": fam.modeling,
            "flags": fam.defaults,
            "ops": ops,
            "ops_by_default": sorted({op for flag, on in fam.defaults.items() if on for op in ops[flag]}),
            "heads": list(fam.heads),
            "composite": fam.composite,
            "not_yet": fam.lacks,
            "in_installed_transformers": available,
        }
    return {"transformers": installed, "families": families, "aliases": dict(mp.ALIASES)}


_NO_TRANSFORMERS = "not installed (pip install 'liger-core[transformers]')"


def render_families(info: dict[str, Any], width: int = 100) -> str:
    """One block per family, wrapped at ``width`` columns (a table's rows reached 366)."""
    import textwrap

    version = info["transformers"]

    def wrapped(label: str, text: str) -> list[str]:
        return textwrap.wrap(f"{label}: {text}", width, initial_indent="    ", subsequent_indent="        ")

    out = [
        *textwrap.wrap(
            f"{len(info['families'])} model families (apply_liger_kernel_to_<model_type>, AutoLigerKernelForCausalLM, "
            "AutoLigerKernelForImageTextToText, apply_liger_kernel_to_instance); ops with every flag at its default.",
            width,
        ),
        "transformers: " + (version or _NO_TRANSFORMERS),
    ]
    for model_type, f in info["families"].items():
        ops = ", ".join(f["ops_by_default"]) or "-"
        if f["composite"]:
            ops += " (+ its language model's and vision tower's families)"
        here = "yes" if f["in_installed_transformers"] else "no"
        out += ["", f"{model_type} (in transformers {version or '-'}: {here})", *wrapped("ops", ops)]
        if f["not_yet"]:
            out += wrapped("not patched yet (the catalogue lacks it)", f["not_yet"])
    out += [
        "",
        *textwrap.wrap(
            "Text configs of multimodal families patched by them: "
            + ", ".join(f"{a} -> {t}" for a, t in info["aliases"].items()),
            width,
        ),
    ]
    return "\n".join(out)


def cmd_families(args: argparse.Namespace) -> int:
    info = collect_families()
    print(json.dumps(info, indent=2) if args.json else render_families(info))
    return 0


# -- entry point -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="liger",
        description="Liger multi-vendor kernels: inspect backends and check them against the reference.",
    )
    parser.add_argument("--version", action="version", version=f"liger-core {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = sub.add_parser(
        "info",
        help="versions, backends, which backend serves each op per device, env overrides, problems",
        description="Show versions, installed backends, which backend serves each op on each device "
        "type, environment overrides in effect and problems found with backends.",
    )
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.set_defaults(run=cmd_info)
    families = sub.add_parser(
        "families",
        help="the transformers model families liger_core.transformers patches and the ops each uses",
        description="List every model family apply_liger_kernel_to_<model_type> patches: the catalogue ops each "
        "uses with its flags at their defaults, what it cannot patch yet, and whether the installed transformers "
        "has it.",
    )
    families.add_argument("--json", action="store_true", help="machine-readable output (flags, ops per flag)")
    families.set_defaults(run=cmd_families)
    check = sub.add_parser(
        "check",
        help="run every op against the float64 reference on this machine",
        description=CHECK_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument(
        "--device",
        choices=DEVICE_TYPES,
        help="device type for the inputs (default: the chosen backend's device if present, "
        "else this machine's default device; cpu for a backend whose device is absent)",
    )
    check.add_argument(
        "--backend",
        metavar="NAME",
        help="check this backend's kernels (reference, cuda, ascend, xpu, ...); sets TRITON_INTERPRET=1 "
        "when its device is absent (see above)",
    )
    check.add_argument("--ops", metavar="A,B", help="comma-separated ops to check (default: all)")
    check.set_defaults(parser=check, run=cmd_check)
    # Every subcommand is registered the same way: its parser's ``run`` default is its command.
    add_bench_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what a command re-runs in a child process
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    return run(args)
