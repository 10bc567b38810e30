"""Every op of the backend launches its kernels through the launch guard, and through
nothing else: each op's first `liger check` smoke sample runs with `launch.check` recording."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from liger_core.conformance.check import check_sample
from liger_core.interface import CATALOGUE

from liger_ops_ascend import launch

SRC = Path(launch.__file__).parent
# Kernel names say which op they belong to (guard errors name them); the ops that run another
# op's kernels name that op.
KERNEL_PREFIX = {
    "fused_linear_cross_entropy": "cross_entropy",
    "fused_linear_jsd": "jsd",
    "vocab_parallel_cross_entropy": "cross_entropy",
    "tiled_mlp": "swiglu",  # its smoke samples' activation is silu: swiglu's kernels
    "fused_linear_dpo": "cross_entropy",
    "fused_linear_orpo": "cross_entropy",
    "fused_linear_cpo": "cross_entropy",
    "fused_linear_simpo": "cross_entropy",
    "fused_linear_kto": "cross_entropy",
    "fused_linear_grpo": "cross_entropy",
    "grpo_loss": "cross_entropy",
    "fused_linear_kl_div": "kl_div",
    "fused_linear_cosine_similarity": "cross_entropy",
    # Two ops' kernels (str.startswith takes a tuple of prefixes).
    "fused_linear_jsd_loss": ("jsd", "cross_entropy"),
    "modulated_rms_norm": ("rms_norm", "modulated_rms_norm"),
    "multi_token_attention": ("multi_token_attention", "softmax", "sparsemax"),
    "mhc_coeffs": "_mhc_coeffs",
    "mhc_pre": "_mhc_pre",
    "mhc_post_res": "_mhc_post_res",
    "fused_moe_clamped_swiglu": "fused_moe",  # fused_moe's kernels, CLAMPED
}


@pytest.mark.parametrize("op", sorted(CATALOGUE))
def test_op_launches_through_the_guard(monkeypatch, backend, device, op):
    seen = []
    real_check = launch.check
    monkeypatch.setattr(launch, "check", lambda plan, hw: (seen.append(plan.kernel), real_check(plan, hw)))
    check_sample(backend, op, CATALOGUE[op].smoke[0].with_params(dtype=torch.float32), device)
    assert seen, f"{op} launched no kernel through liger_ops_ascend.launch"
    prefix = KERNEL_PREFIX.get(op, op)
    assert all(name.startswith(prefix) for name in seen), (op, seen)


def test_no_kernel_is_launched_around_the_guard():
    # Triton launches look like `kernel[grid](...)`: only launch.py may write one.
    for path in SRC.glob("*.py"):
        if path.name == "launch.py":
            continue
        hits = re.findall(r"\w+\[[^\]]*\]\s*\(", path.read_text())
        assert not [h for h in hits if "kernel" in h.lower()], f"{path.name} launches a kernel directly: {hits}"
