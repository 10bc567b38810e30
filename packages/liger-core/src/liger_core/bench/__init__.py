"""The benchmark harness behind ``liger bench``: this project's ops against their peers.

    from liger_core.bench import run_bench, write_results
    result = run_bench(ops=["rms_norm"], config="llama-3-8b", sweep=("tokens", [1024, 4096]))
    write_results(result, "bench-results/H100")

Each op's benchmark is part of its declaration (``liger_core/ops/<op>.py``, a
`liger_core.bench.spec.BenchSpec`); `catalogue.specs()` lists the ops benchable now. The modules by
job: `spec` (what a benchmark is; below the catalogue), `catalogue` (every op's spec; above it),
`providers` (this project and its peers as callables),
`timing` (the timers), `runner` (the loop), `report` (JSON, CSV, plots, tables), `cli`.

The names below are imported on first use: the op declarations import `spec`, and Python runs
this package's ``__init__`` first, while the catalogue is being built; importing the runner
(which needs the catalogue) here would run it before the catalogue exists.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "AXES": "configs",
    "MODEL_CONFIGS": "configs",
    "ModelShape": "configs",
    "MODES": "spec",
    "BenchSpec": "spec",
    "specs": "catalogue",
    "PROVIDERS": "providers",
    "FIELDS": "runner",
    "BenchResult": "runner",
    "run_bench": "runner",
    "plot_folder": "report",
    "read_json": "report",
    "render_summary": "report",
    "write_csv": "report",
    "write_json": "report",
    "write_results": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"liger_core.bench.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'liger_core.bench' has no attribute {name!r}")
