"""The benchmark harness behind ``liger bench``: this project's ops against their peers.

    from liger_core.bench import run_bench, write_results
    result = run_bench(ops=["rms_norm"], config="llama-3-8b", sweep=("tokens", [1024, 4096]))
    write_results(result, "bench-results/H100")

See `liger_core.bench.runner.run_bench` for the options, `liger_core.bench.specs` for what
each op's benchmark builds and whom it compares with (`specs.specs()`: the ops benchable now).
"""

from liger_core.bench.configs import AXES, MODEL_CONFIGS, ModelShape
from liger_core.bench.report import plot_folder, read_json, render_summary, write_csv, write_json, write_results
from liger_core.bench.runner import FIELDS, PROVIDERS, BenchResult, run_bench
from liger_core.bench.specs import ALL_SPECS, MODES, BenchSpec

__all__ = [
    "ALL_SPECS",
    "AXES",
    "FIELDS",
    "MODEL_CONFIGS",
    "MODES",
    "PROVIDERS",
    "BenchResult",
    "BenchSpec",
    "ModelShape",
    "plot_folder",
    "read_json",
    "render_summary",
    "run_bench",
    "write_csv",
    "write_json",
    "write_results",
]
