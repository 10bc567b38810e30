"""The documentation site's generated pages, written by docs/conf.py at every build into docs/_generated/.

- ``ops-and-families.md``: the README's "Ops and model families" section with its two tables regenerated
  from liger-core now (`readme_tables.render`, the README's own generator), so the site is current even
  where the README's copy is stale;
- ``op-contracts.rst``: autodoc of every catalogue op's declaration module (contract, reference, Args);
- ``cli.md``: the ``liger`` command's help, every subcommand's, from its argparse parser;
- ``plots.md``: every benchmark plot committed under benchmarks/results/, by device and topic.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import readme_tables

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# The distributions, each with its README as a page under docs/packages/.
PACKAGES = ("liger-core", "liger-ops-cuda", "liger-ops-ascend", "liger-ops-xpu", "liger-kernel-dropin")


def _readme_section(heading: str, until: str) -> str:
    """The README's text from the line ``heading`` up to (not including) the line ``until``."""
    text = readme_tables.README.read_text()
    start, end = text.find(f"\n{heading}\n"), text.find(f"\n{until}\n")
    if start < 0 or end < start:
        raise ValueError(f"README.md has no section {heading!r} followed by {until!r}")
    return text[start + 1 : end + 1]


def _link_ops(table: str) -> str:
    """The ops table with each op linked to its contract and each functional entry point to its API entry."""
    op_cell = re.compile(r"^\| `(\w+)` \|", re.M)
    table = op_cell.sub(lambda m: f"| {{py:func}}`{m[1]} <liger_core.ops.{m[1]}.{m[1]}>` |", table)
    entry_cell = re.compile(r"\| `(liger_\w+)` \|")
    return entry_cell.sub(lambda m: f"| {{py:func}}`{m[1]} <liger_core.functional.{m[1]}>` |", table)


def ops_and_families() -> str:
    section = _readme_section("## Ops and model families", "## torch.compile")
    # The site's own title level: the page is this section.
    section = section.replace("## Ops and model families", "# Ops and model families", 1)
    section = readme_tables.render(section)
    ops = readme_tables._block("ops")
    section = ops.sub(lambda m: m[1] + _link_ops(m[2]) + m[3], section)
    return "(ops-and-model-families)=\n\n" + section


def op_contracts() -> str:
    from liger_core.interface import CATALOGUE

    lines = [
        "Op contracts",
        "============",
        "",
        "Each catalogue op is declared once, in ``liger_core.ops.<op>``: the function below is the contract",
        "every backend implements (its parameters, its docstring's semantics) and, as its body, the PyTorch",
        "reference. The functional entry points (``liger_<op>``) dispatch it to the backend serving the",
        "input's device.",
        "",
    ]
    for name, op in CATALOGUE.items():
        module, function = op.reference.__module__, op.reference.__qualname__
        lines += [
            f"``{name}``",
            "-" * (len(name) + 4),
            "",
            f".. automodule:: {module}",
            "   :no-members:",
            "",
            f".. autofunction:: {module}.{function}",
            "",
        ]
    return "\n".join(lines)


def _help(parser: argparse.ArgumentParser, title: str, level: int) -> list[str]:
    """``parser``'s help under a heading of ``level``, then each of its subcommands' one level down."""
    out = [f"{'#' * level} `{title}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for action in parser._actions:  # argparse keeps its subparsers here; there is no public accessor
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _help(sub, f"{title} {name}", level + 1)
    return out


def cli() -> str:
    from liger_core.cli import build_parser

    intro = [
        "Installed with liger-core (`liger`, or `python -m liger_core`). The help below is the parser's own,",
        "generated at build time.",
        "",
    ]
    # argparse wraps its help to the terminal's width (COLUMNS): a fixed width makes the page the same everywhere.
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        page = _help(build_parser(), "liger", 1)
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(["# The `liger` command", "", *intro, *page[2:]])


def plots() -> str:
    lines = [
        "# Benchmark plots",
        "",
        "Every plot committed under `benchmarks/results/` (GPU runs; each folder's README.md gives the command,",
        "the commit and the environment, its JSON and logs every number).",
        "",
    ]
    folders = sorted({p.parent for p in RESULTS.rglob("*.png")})
    for folder in folders:
        rel = folder.relative_to(ROOT).as_posix()
        readme = folder / "README.md"
        title = readme.read_text().splitlines()[0].lstrip("# ").strip() if readme.is_file() else rel
        lines += [f"## {folder.parent.name}: {folder.name}", "", f"{title} (`{rel}/`)", ""]
        for png in sorted(folder.glob("*.png")):
            # Paths relative to this page (docs/_generated/); Sphinx copies the images into the site.
            lines += [f"```{{image}} ../../{png.relative_to(ROOT).as_posix()}", f":alt: {png.stem}", "```", ""]
    return "\n".join(lines)


PAGES = {
    "ops-and-families.md": ops_and_families,
    "op-contracts.rst": op_contracts,
    "cli.md": cli,
    "plots.md": plots,
}


def write_all(out: Path) -> None:
    """Write every generated page into ``out``; a page whose text is unchanged is left alone, so
    Sphinx's incremental build does not reread it."""
    out.mkdir(parents=True, exist_ok=True)
    for name, make in PAGES.items():
        path = out / name
        text = make()
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)


if __name__ == "__main__":
    write_all(Path(__file__).resolve().parent / "_generated")
    print(re.sub(r"\s+", " ", f"wrote {', '.join(PAGES)}"))
