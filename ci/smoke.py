"""Smoke-test one installed distribution in a clean venv (run by the nox build session).

    python ci/smoke.py DISTRIBUTION VERSION [BACKEND]

Checks that the distribution imports from the venv (not from a source tree), has the version
it was built with, and that `liger info --json` reports the backend it registers without
problems. Standard library only: it runs in a venv holding just the wheel and its dependencies.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path


def import_name(dist: str) -> str:
    """The top-level module the installed distribution ships (liger-kernel-dropin ships liger_kernel)."""
    shipped = sorted(m for m, dists in md.packages_distributions().items() if dist in dists and not m.startswith("_"))
    return shipped[0] if len(shipped) == 1 else dist.replace("-", "_")


def main(dist: str, version: str, backend: str | None = None) -> int:
    errors = []
    # Where the module would be imported from, without importing torch here: `liger info` below
    # imports it (and the backend, through its entry point), and one torch import is enough.
    module = import_name(dist)
    spec = importlib.util.find_spec(module)
    where = Path(spec.origin).resolve() if spec and spec.origin else None
    print(f"{module}: {where}")
    if where is None or Path(sys.prefix).resolve() not in where.parents:
        errors.append(f"{dist} is not importable from the venv {sys.prefix} (found: {where})")
    if md.version(dist) != version:
        errors.append(f"{dist} installed as {md.version(dist)}, built as {version}")
    liger = shutil.which("liger", path=str(Path(sys.executable).parent))
    if liger is None:
        errors.append("no `liger` command in the venv")
    else:
        out = subprocess.run([liger, "info", "--json"], check=True, capture_output=True, text=True).stdout
        info = json.loads(out)
        print(
            f"liger info: liger-core {info['liger_core']}, interface {info['interface_version']}, torch {info['torch']}"
        )
        for b in info["backends"]:
            print(f"  backend {b['name']}: {b['distribution']} {b['version']}, {b['runtime']}, {len(b['ops'])} ops")
        if info["problems"]:
            errors.append(f"liger info reports problems: {info['problems']}")
        if backend is not None:
            found = {b["name"]: b for b in info["backends"]}
            if backend not in found:
                errors.append(f"liger info lists no {backend!r} backend (found {sorted(found)})")
            elif found[backend]["distribution"] != dist or found[backend]["version"] != version:
                errors.append(
                    f"backend {backend!r} comes from {found[backend]['distribution']} {found[backend]['version']}"
                )
    for e in errors:
        print(f"smoke: {e}", file=sys.stderr)
    print(f"smoke: {dist} {version}: {'FAILED' if errors else 'ok'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
