"""The README's generated tables: the op catalogue and the model families, from liger-core itself.

    python docs/readme_tables.py            # rewrite the tables in README.md
    python docs/readme_tables.py --check    # exit 1 (and say which) when README.md's tables are stale

Each table sits between ``<!-- liger-tables:<name>:begin -->`` and ``<!-- liger-tables:<name>:end -->``
in README.md; the text around them is the README's own. liger-core's tests run ``--check``'s
logic (`stale_tables`), so a new op or family without a regenerated README fails there.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _summary(op_name: str, module_name: str) -> str:
    """The first sentence of the op module's docstring, without the ``The `op` op`` lead-in and
    the ``declared once`` every declaration says."""
    doc = (importlib.import_module(module_name).__doc__ or "").strip().split("\n\n")[0]
    text = " ".join(doc.split())
    text = re.sub(r",? declared once(?=[.:])", "", text)
    text = re.sub(rf"^The `{re.escape(op_name)}` op(?: \(([^)]*)\))?[:,]?\s*", lambda m: m.group(1) or "", text)
    sentence = re.split(r"(?<=[.)])\s+(?=[A-Z])", text, maxsplit=1)[0].rstrip(". ")
    return (sentence[:1].upper() + sentence[1:]).replace("|", "\\|")


def ops_table() -> str:
    """Every catalogue op: the interface version that added it, its benchmark group, its functional
    entry point and what it computes."""
    from liger_core import functional
    from liger_core.interface import CATALOGUE

    rows = [
        "| op | since | group | functional | what |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, op in CATALOGUE.items():
        entry = f"liger_{name}"
        rows.append(
            f"| `{name}` | {op.since[0]}.{op.since[1]} | {op.bench.group if op.bench else '-'} | "
            f"{f'`{entry}`' if hasattr(functional, entry) else '-'} | {_summary(name, op.reference.__module__)} |"
        )
    return "\n".join(rows)


def families_table() -> str:
    """Every model family ``liger_core.transformers`` patches: the ops it uses with every flag at its
    default, and what it does not get yet."""
    from liger_core.transformers import monkey_patch as mp

    rows = [
        "| model_type | ops (flags at their defaults) | not patched yet |",
        "| --- | --- | --- |",
    ]
    for model_type, fam in mp.FAMILIES.items():
        ops = mp.family_ops(model_type)
        used = sorted({op for flag, on in fam.defaults.items() if on for op in ops[flag]})
        text = ", ".join(used) or "-"
        if fam.composite:
            text += " (+ its language model's and vision tower's families)"
        rows.append(f"| `{model_type}` | {text} | {fam.lacks or '-'} |")
    aliases = ", ".join(f"`{a}` -> `{t}`" for a, t in mp.ALIASES.items())
    return "\n".join(rows) + f"\n\nText configs of multimodal families, patched as: {aliases}."


TABLES = {"ops": ops_table, "families": families_table}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- liger-tables:{name}:begin -->)(.*?)(<!-- liger-tables:{name}:end -->)", re.S)


def render(text: str) -> str:
    """``text`` (a README) with every table block regenerated; a missing block is an error."""
    for name, make in TABLES.items():
        pattern = _block(name)
        if not pattern.search(text):
            raise ValueError(f"README has no <!-- liger-tables:{name}:begin/end --> block")
        table = make()
        text = pattern.sub(lambda m: f"{m.group(1)}\n{table}\n{m.group(3)}", text)
    return text


def stale_tables(text: str) -> list[str]:
    """The names of the table blocks in ``text`` that differ from what liger-core generates now."""
    fresh = render(text)
    return [name for name in TABLES if _block(name).search(text).group(2) != _block(name).search(fresh).group(2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the README's tables are out of date")
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    text = args.readme.read_text()
    if args.check:
        stale = stale_tables(text)
        if stale:
            print(f"{args.readme}: out of date: {', '.join(stale)} (run python docs/readme_tables.py)")
            return 1
        return 0
    args.readme.write_text(render(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
