"""The backend object: every op of the catalogue implemented (collected from the ``@implements``
marks, nothing else lists them), at the interface version derived from them, valid for
liger-core, and the one liger-core loads from LIGER_EXTRA_BACKENDS."""

import re

from liger_core import registry
from liger_core.backend import validate
from liger_core.interface import CATALOGUE, INTERFACE_VERSION, format_version

from liger_ops_xpu import BACKEND, __version__

# The ops implemented in their family's module (every other op has a module of its own name).
_FAMILY = {
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


def test_every_catalogue_op_is_implemented_at_the_current_interface():
    assert list(BACKEND.ops) == list(CATALOGUE)
    assert BACKEND.interface_version == format_version(INTERFACE_VERSION)
    assert (BACKEND.name, BACKEND.distribution, BACKEND.version, BACKEND.device_types) == (
        "xpu",
        "liger-ops-xpu",
        __version__,
        ("xpu",),
    )
    validate(BACKEND)


def test_implementations_are_autograd_functions_named_after_their_op():
    for op, impl in BACKEND.ops.items():
        words = re.sub(r"[^a-z0-9]", "", op)
        assert impl.__name__.startswith("Liger") and impl.__name__.endswith("Function"), impl
        assert impl.__name__[len("Liger") : -len("Function")].lower() == words, (op, impl.__name__)
        assert impl.__module__ == f"liger_ops_xpu.{_FAMILY.get(op, op)}", (op, impl.__module__)


def test_the_registry_serves_this_source_tree():
    assert registry.get_backend("xpu") is BACKEND
