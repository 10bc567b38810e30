"""The catalogue's benchmarks: each op's `BenchSpec` as its declaration gives it.

Sits above the catalogue (`liger_core.interface`), which sits above the op declarations, which
sit above `liger_core.bench.spec` (what a spec is, and the helpers they build theirs from): the
declarations never import this module, so the import graph has no circle.
"""

from __future__ import annotations

from dataclasses import replace

from liger_core.bench.spec import GROUPS, BenchSpec
from liger_core.interface import CATALOGUE


def specs() -> dict[str, BenchSpec]:
    """The spec of every catalogue op that declares one, in catalogue order."""
    return {name: replace(op.bench, op=name, bind=op.bind) for name, op in CATALOGUE.items() if op.bench is not None}


def missing_specs() -> list[str]:
    """Catalogue ops without a bench spec (they cannot be benchmarked until their declaration has one)."""
    return [name for name, op in CATALOGUE.items() if op.bench is None]


def groups() -> dict[str, tuple[str, ...]]:
    """Group name -> its ops (for ``--ops norms``)."""
    all_specs = specs()
    return {g: tuple(name for name, s in all_specs.items() if s.group == g) for g in GROUPS}
