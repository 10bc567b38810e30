"""What an NPU runner runs first (``pytest -m npu``, or ``tools/npu_first_run.sh``): every kernel
compiled natively at the sizes the plans give it, the compiler's own UB figure set beside the
model's (``src/liger_ops_ascend/ub_model.md``), and msprof of each kernel family. Without an NPU
every test here skips.

Reports go to ``$LIGER_NPU_REPORT_DIR`` (default ``./npu-first-run``): ``ub.json`` (one row per
compiled kernel: the plan, the model's bytes, the compiler's bytes) and ``msprof/<family>/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from liger_core.device import npu_available

pytestmark = [
    pytest.mark.npu,
    pytest.mark.skipif(not npu_available(), reason="needs an Ascend NPU (torch_npu with CANN)"),
]

REPORT = Path(os.environ.get("LIGER_NPU_REPORT_DIR", "npu-first-run"))
PACKAGE = Path(__file__).resolve().parents[1]
# Kernel families as the package's modules group them: one msprof run each, through `liger bench`
# (the op's benchmark inputs at a model's shapes; ops without a bench spec are left out).
FAMILIES = {
    "norms": ("rms_norm", "fused_add_rms_norm", "layer_norm", "group_norm", "poly_norm", "dyt", "attn_res"),
    "elementwise": ("swiglu", "geglu", "relu_squared", "fused_gate_up_swiglu", "tiled_mlp"),
    "rotary": ("rope", "qwen2vl_mrope", "llama4_rope"),
    "softmax": ("softmax", "sparsemax"),
    "cross_entropy": (
        "cross_entropy",
        "fused_linear_cross_entropy",
        "vocab_parallel_cross_entropy",
        "fused_linear_dpo",
        "fused_linear_orpo",
        "fused_linear_cpo",
        "fused_linear_simpo",
        "fused_linear_kto",
        "fused_linear_scaled_cross_entropy",
    ),
    "divergence": ("kl_div", "jsd", "tvd", "fused_linear_jsd", "fused_ce_tvd"),
    # 1.9: GPT-OSS's experts (fused_moe's kernels with the biases and the clamped SwiGLU).
    "moe": ("fused_moe", "fused_moe_clamped_swiglu"),
    # 1.6: the GRPO and distillation losses (cross-entropy's kernels; kl_div's and jsd's for the soft terms).
    "policy_and_distillation": (
        "fused_linear_grpo",
        "grpo_loss",
        "fused_linear_kl_div",
        "fused_linear_cosine_similarity",
        "fused_linear_jsd_loss",
    ),
    "embedding": ("embedding",),
    "modulated_rms_norm": ("modulated_rms_norm",),
    # 1.7: attention (the causal fill; softmax's and sparsemax's row kernels).
    "attention": ("multi_token_attention",),
    # 1.8: mhc (the Sinkhorn coefficients and the two stream mixes).
    "mhc": ("mhc_coeffs", "mhc_pre", "mhc_post_res"),
    # 1.8: neighborhood attention (banded flash-style kernels on the cube units).
    "neighborhood_attention": ("fused_neighborhood_attention",),
}
CONFIG = "llama-3-8b"
# Families whose shapes a dense model's config does not have.
FAMILY_CONFIG = {"moe": "qwen3-30b-a3b"}


def config_of(op: str) -> str:
    return next((FAMILY_CONFIG[f] for f, ops in FAMILIES.items() if op in ops and f in FAMILY_CONFIG), CONFIG)


@pytest.fixture(scope="module")
def ub_rows():
    rows: list[dict] = []
    yield rows
    REPORT.mkdir(parents=True, exist_ok=True)
    (REPORT / "ub.json").write_text(json.dumps(rows, indent=1))


def _record_launches(monkeypatch, rows: list[dict]) -> None:
    """Launch through the guard as usual, and keep each compiled kernel's UB figure."""
    from liger_ops_ascend import launch

    def recording_launch(kernel, plan, hw, *args, **kwargs):
        launch.check(plan, hw)
        compiled = kernel[plan.grid](*args, **kwargs)
        bits = getattr(getattr(compiled, "metadata", None), "required_ub_bits", None)
        rows.append(
            {
                "kernel": plan.kernel,
                "grid": list(plan.grid),
                "tiles": [str(t) for t in plan.tiles],
                "model_bytes": plan.ub_bytes,
                "budget_bytes": hw.ub_budget,
                "ub_bytes": hw.ub_bytes,
                "compiler_bytes": None if bits is None else bits // 8,
                "soc": hw.soc,
            }
        )

    # The op modules call `launch` through their own import: patch every reference (the
    # launch module's own last would hide the others from the `is` test: compare with `real`).
    import liger_ops_ascend

    real = launch.launch
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name.startswith(liger_ops_ascend.__name__) and getattr(module, "launch", None) is real:
            monkeypatch.setattr(module, "launch", recording_launch)


@pytest.mark.parametrize("op", sorted(op for ops in FAMILIES.values() for op in ops))
def test_every_kernel_compiles_within_the_modelled_ub(monkeypatch, backend, ub_rows, op):
    """Each op forward and backward at llama-3-8b's shapes (bf16) and on its smoke samples: every
    launch compiles on the NPU, and the compiler's UB need is at most what the model planned."""
    from liger_core.bench.catalogue import specs
    from liger_core.bench.configs import get_config
    from liger_core.conformance.check import check_sample
    from liger_core.interface import CATALOGUE

    monkeypatch.setenv("ENABLE_PRINT_UB_BITS", "1")  # triton-ascend: report the compiler's UB bits
    start = len(ub_rows)
    _record_launches(monkeypatch, ub_rows)
    for sample in CATALOGUE[op].smoke:
        check_sample(backend, op, sample, "npu")
    spec = specs().get(op)
    if spec is not None:
        kwargs = spec.inputs(get_config(config_of(op)), torch.bfloat16, "npu")
        args = [
            v.detach().requires_grad_() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for v in CATALOGUE[op].bind(kwargs).values()
        ]
        out = backend.op(op)(*args)  # an autograd Function's apply: positional arguments
        first = out[0] if isinstance(out, tuple) else out
        first.float().sum().backward()
        torch.npu.synchronize()
    mine = ub_rows[start:]
    assert mine, f"{op} launched no kernel"
    over = [r for r in mine if r["compiler_bytes"] is not None and r["compiler_bytes"] > r["model_bytes"]]
    assert not over, f"the UB model undercounts (compiler > model): {over}"


@pytest.mark.skipif(shutil.which("msprof") is None, reason="msprof (CANN's profiler) is not on PATH")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_msprof_each_kernel_family(family):
    """msprof op over `liger bench` of the family's ops (this backend only): op_summary per kernel."""
    from liger_core.bench.catalogue import specs

    ops = [op for op in FAMILIES[family] if op in specs()]
    out = REPORT / "msprof" / family
    out.mkdir(parents=True, exist_ok=True)
    bench = [
        sys.executable, "-m", "liger_core", "bench", "--ops", ",".join(ops), "--config", FAMILY_CONFIG.get(family, CONFIG), "--device", "npu",
        "--backend", "ascend", "--providers", "liger", "--timer", "do_bench", "--no-plots", "--no-progress",
        "--out", str(out / "bench"),
    ]  # fmt: skip
    done = subprocess.run(["msprof", "op", f"--output={out}", *bench], check=False, capture_output=True, text=True)
    (out / "msprof.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(out.rglob("op_summary*.csv")), f"msprof wrote no op_summary under {out}"
