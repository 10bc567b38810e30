"""The backend object liger-core discovers through the `liger.backends` entry point."""

from __future__ import annotations

from liger_core.backend import Backend, triton_runtime

from liger_ops_ascend import (
    cross_entropy,
    dyt,
    fused_linear_cross_entropy,
    fused_linear_jsd,
    geglu,
    group_norm,
    jsd,
    kl_div,
    layer_norm,
    poly_norm,
    qwen2vl_mrope,
    rms_norm,
    rope,
    softmax,
    sparsemax,
    swiglu,
    tvd,
)
from liger_ops_ascend.__about__ import __version__

# 1.1: every norm op (rms_norm, fused_add_rms_norm, layer_norm, group_norm, poly_norm, dyt);
# 1.2: every activation (swiglu, geglu, rope, qwen2vl_mrope, softmax, sparsemax);
# 1.3: every loss (cross_entropy, fused_linear_cross_entropy, kl_div, jsd, fused_linear_jsd, tvd).
INTERFACE_VERSION = "1.3"


BACKEND = Backend(
    name="ascend",
    distribution="liger-ops-ascend",
    version=__version__,
    device_types=("npu",),
    interface_version=INTERFACE_VERSION,
    ops={
        "rms_norm": rms_norm.rms_norm,
        "fused_add_rms_norm": rms_norm.fused_add_rms_norm,
        "layer_norm": layer_norm.layer_norm,
        "group_norm": group_norm.group_norm,
        "poly_norm": poly_norm.poly_norm,
        "dyt": dyt.dyt,
        "swiglu": swiglu.swiglu,
        "geglu": geglu.geglu,
        "rope": rope.rope,
        "qwen2vl_mrope": qwen2vl_mrope.qwen2vl_mrope,
        "softmax": softmax.softmax,
        "sparsemax": sparsemax.sparsemax,
        "cross_entropy": cross_entropy.cross_entropy,
        "fused_linear_cross_entropy": fused_linear_cross_entropy.fused_linear_cross_entropy,
        "kl_div": kl_div.kl_div,
        "jsd": jsd.jsd,
        "fused_linear_jsd": fused_linear_jsd.fused_linear_jsd,
        "tvd": tvd.tvd,
    },
    runtime=lambda: triton_runtime("triton-ascend"),
)
