"""The backend object, the package layout it is collected from, and the package metadata that
liger-core and pip rely on."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from liger_core import registry
from liger_core.backend import validate
from liger_core.interface import CATALOGUE, INTERFACE_VERSION, format_version

from liger_ops_ascend import BACKEND, __version__

PYPROJECT = (Path(__file__).parents[1] / "pyproject.toml").read_text()
# The modules that serve several ops (CONTRIBUTING.md, "The layout of a vendor package"); every
# other op has a module of its own name.
MODULE_OF = {
    "fused_add_rms_norm": "rms_norm",
    "swiglu": "glu",
    "geglu": "glu",
    "fused_gate_up_swiglu": "glu",
    "rope": "rotary",
    "qwen2vl_mrope": "rotary",
    "llama4_rope": "rotary",
    "fused_linear_dpo": "fused_linear_preference",
    "fused_linear_orpo": "fused_linear_preference",
    "fused_linear_cpo": "fused_linear_preference",
    "fused_linear_simpo": "fused_linear_preference",
    "fused_linear_kto": "fused_linear_preference",
    "kl_div": "divergence",
    "jsd": "divergence",
    "tvd": "divergence",
    "fused_ce_tvd": "divergence",
    "fused_linear_cosine_similarity": "fused_linear_distillation",
    "fused_linear_jsd_loss": "fused_linear_distillation",
    "mhc_coeffs": "mhc",
    "mhc_pre": "mhc",
    "mhc_post_res": "mhc",
    "fused_moe_clamped_swiglu": "fused_moe",
}


def test_backend_is_valid_for_this_core():
    validate(BACKEND)
    # Every op of the catalogue is implemented: the derived interface is core's own.
    assert (BACKEND.name, BACKEND.device_types) == ("ascend", ("npu",))
    assert BACKEND.interface_version == format_version(INTERFACE_VERSION)
    assert (BACKEND.distribution, BACKEND.version) == ("liger-ops-ascend", __version__)
    assert "triton" in BACKEND.runtime()


def test_registry_loads_the_source_tree_backend(backend):
    # tests/conftest.py names the package in LIGER_EXTRA_BACKENDS: the registry's backend is ours.
    assert backend is BACKEND and registry.get_backend("ascend") is BACKEND


def test_every_op_is_a_marked_function_in_its_module():
    assert sorted(BACKEND.ops) == sorted(CATALOGUE)
    for op, impl in BACKEND.ops.items():
        assert issubclass(impl, torch.autograd.Function), op
        assert impl.__module__ == f"liger_ops_ascend.{MODULE_OF.get(op, op)}", (op, impl.__module__)
        assert impl.__name__.startswith("Liger") and impl.__name__.endswith("Function"), impl.__name__


def test_entry_point_and_dependencies():
    assert 'ascend = "liger_ops_ascend.backend:BACKEND"' in PYPROJECT
    deps = re.search(r"^dependencies = \[(.*)\]$", PYPROJECT, re.MULTILINE).group(1)
    # triton-ascend installs the module `triton`; the `triton` distribution must never join it.
    assert '"triton-ascend>=3.2"' in deps and '"triton>' not in deps and '"triton"' not in deps
    assert '"liger-core>=0.1,<0.2"' in deps and '"pybind11"' in deps
    assert 'npu = ["torch-npu"]' in PYPROJECT


def test_the_npu_first_run_covers_every_op():
    # tools/npu_first_run.sh compiles and profiles the ops by family: a new op joins a family.
    from test_npu_first_run import FAMILIES

    ops = [op for family in FAMILIES.values() for op in family]
    assert sorted(ops) == sorted(BACKEND.ops), set(BACKEND.ops) ^ set(ops)
