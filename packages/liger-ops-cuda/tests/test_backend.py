"""The backend this package exposes: every catalogue op, each an `implements`-marked
``Liger<Op>Function`` in its module (an op family's in the family's module), at the interface
version the catalogue derives."""

import torch

import liger_ops_cuda
from liger_core.backend import validate
from liger_core.interface import CATALOGUE, INTERFACE_VERSION, format_version


def test_backend_serves_every_op_of_the_interface(backend):
    assert backend is liger_ops_cuda.BACKEND  # loaded through LIGER_EXTRA_BACKENDS
    validate(backend)
    assert backend.name == "cuda" and backend.device_types == ("cuda",)
    assert backend.version == liger_ops_cuda.__version__
    assert backend.interface_version == format_version(INTERFACE_VERSION)
    assert set(backend.ops) == set(CATALOGUE)


# The modules that serve several ops; every other op has a module of its own name.
FAMILIES = {
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


def test_each_op_is_a_marked_autograd_function_named_after_it(backend):
    for name, impl in backend.ops.items():
        assert isinstance(impl, type) and issubclass(impl, torch.autograd.Function), name
        assert impl.__name__.startswith("Liger") and impl.__name__.endswith("Function"), impl
        assert impl.__module__ == f"liger_ops_cuda.{FAMILIES.get(name, name)}", (name, impl.__module__)
