"""Run transformers' own modeling tests for model families stock and Liger-patched, and diff them.

    python run_transformers_modeling.py ROOT --family mixtral --family qwen3_moe --hidden-act gelu,silu [-- PYTEST_ARGS]

``ROOT`` is a transformers checkout (or a copy of its ``tests/`` tree with ``src/transformers``
beside it, as transformers' pipeline mixin expects); family ``F``'s tests are
``ROOT/tests/models/F`` unless ``--family F=PATH`` says otherwise. Each family runs twice per
``hidden_act`` with the same tests and the same seeds: stock, then with
``apply_liger_kernel_to_F()`` applied before collection (`liger_upstream_plugin`). The report
(``--out``, Markdown) gives per run the passed / failed / skipped counts stock and patched and
every test whose outcome differs, with the patched failure's first line. The exit status is 1
when a test passes stock and fails patched (a defect of ours or a documented exception), else 0.
The backend is the environment's (``LIGER_BACKEND``; ``TRITON_INTERPRET=1`` for a vendor on CPU).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTCOMES = ("passed", "failed", "skipped")


@dataclass
class Run:
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def _junit(path: Path) -> Run:
    run = Run()
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", (child.get("message") or child.text or "").strip()
            elif child.tag == "skipped":
                outcome, message = "skipped", (child.get("message") or "").strip()
        run.outcomes[name], run.messages[name] = outcome, message.splitlines()[0][:300] if message else ""
    return run


def run_pytest(
    root: Path, tests: Path, family: str | None, hidden_act: str, extra: list[str], work: Path, tester_kwargs: str = ""
) -> Run:
    tag = f"{tests.name}-{hidden_act or 'default'}-{'patched' if family else 'stock'}"
    xml = work / f"{tag}.xml"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    env["LIGER_UPSTREAM_FAMILY"] = family or ""
    env["LIGER_UPSTREAM_HIDDEN_ACT"] = hidden_act
    env["LIGER_UPSTREAM_TESTER_KWARGS"] = tester_kwargs
    cmd = [sys.executable, "-m", "pytest", str(tests), "-p", "liger_upstream_plugin", "-p", "no:cacheprovider"]
    cmd += ["-p", "no:xdist", "-q", f"--junitxml={xml}", *extra]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    (work / f"{tag}.log").write_text(proc.stdout + proc.stderr)
    if not xml.exists():
        raise RuntimeError(f"{tag}: pytest wrote no report (exit {proc.returncode}); see {work / f'{tag}.log'}")
    run = _junit(xml)
    run.seconds = time.monotonic() - start
    return run


def _counts(run: Run) -> str:
    values = list(run.outcomes.values())
    return " / ".join(str(values.count(o)) for o in OUTCOMES)


def compare(label: str, stock: Run, patched: Run) -> tuple[list[str], int]:
    lines = [
        f"### {label}",
        "",
        "| run | passed / failed / skipped | seconds |",
        "| --- | --- | --- |",
        f"| stock | {_counts(stock)} | {stock.seconds:.0f} |",
        f"| patched | {_counts(patched)} | {patched.seconds:.0f} |",
        "",
    ]
    names = sorted(set(stock.outcomes) | set(patched.outcomes))
    differing = [n for n in names if stock.outcomes.get(n) != patched.outcomes.get(n)]
    regressions = sum(1 for n in differing if stock.outcomes.get(n) == "passed" and patched.outcomes.get(n) == "failed")
    if differing:
        lines += ["| test | stock | patched | patched message |", "| --- | --- | --- | --- |"]
        for n in differing:
            msg = (patched.messages.get(n) or stock.messages.get(n) or "").replace("|", "\\|")
            lines.append(f"| `{n}` | {stock.outcomes.get(n, 'absent')} | {patched.outcomes.get(n, 'absent')} | {msg} |")
    else:
        lines.append("Every test has the same outcome stock and patched.")
    return lines + [""], regressions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="transformers checkout (its tests/ and src/transformers)")
    parser.add_argument("--family", action="append", required=True, help="model type, or TYPE=TEST_DIR")
    parser.add_argument("--hidden-act", default="", help="comma-separated hidden_act values ('' = testers' default)")
    parser.add_argument("--tester-kwargs", default="", help='JSON tester overrides, e.g. {"intermediate_size": 48}')
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--work", type=Path, default=Path("upstream-runs"), help="junit XML and logs")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.pytest_args = extra
    root = args.root.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    backend = os.environ.get("LIGER_BACKEND", "auto")
    interp = " TRITON_INTERPRET=1" if os.environ.get("TRITON_INTERPRET") == "1" else ""
    report = [f"## transformers modeling tests, stock vs patched (LIGER_BACKEND={backend}{interp})", ""]
    if args.tester_kwargs or args.pytest_args:
        pytest_args = " ".join(args.pytest_args)
        report += [f"Tester overrides: `{args.tester_kwargs or '{}'}`; pytest arguments: `{pytest_args}`", ""]
    regressions = 0
    for spec in args.family:
        family, _, path = spec.partition("=")
        tests = Path(path).resolve() if path else root / "tests" / "models" / family
        for act in args.hidden_act.split(","):
            stock = run_pytest(root, tests, None, act, args.pytest_args, args.work, args.tester_kwargs)
            patched = run_pytest(root, tests, family, act, args.pytest_args, args.work, args.tester_kwargs)
            lines, found = compare(f"{family}, hidden_act={act or 'default'}", stock, patched)
            report += lines
            regressions += found
            print("\n".join(lines), flush=True)
    if args.out:
        args.out.write_text("\n".join(report))
    print(f"{regressions} test(s) pass stock and fail patched")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
