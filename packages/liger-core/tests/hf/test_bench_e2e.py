"""benchmarks/bench_e2e.py on CPU: its model presets are the released configs, and a tiny training run of each
variant the machine has produces the result rows and comparisons the GPU run writes."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

SCRIPT = Path(__file__).resolve().parents[4] / "benchmarks" / "bench_e2e.py"


@pytest.fixture(scope="module")
def bench_e2e():
    if not SCRIPT.exists():
        pytest.skip(f"{SCRIPT} is not here (an installed liger-core without the repository)")
    spec = importlib.util.spec_from_file_location("bench_e2e", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_e2e"] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("bench_e2e", None)


# Parameter counts of the released checkpoints (tied embeddings counted once): LLaMA-3.2-1B 1.24B; Qwen3-1.7B
# 1.7B of which 1.4B non-embedding (its model card); Gemma-3-1B 999,885,952 (keras-hub's gemma3_1b preset).
PARAMS = {"llama-3.2-1b": 1_235_814_400, "qwen3-1.7b": 1_720_574_976, "gemma-3-1b": 999_885_952}


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_presets_build_the_released_shapes(bench_e2e, name):
    config = bench_e2e.model_config(name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert config.tie_word_embeddings and config._attn_implementation == "sdpa" and not config.use_cache
    # transformers 5.0 ties the embeddings on a real device only (the benchmark's), not on the meta device.
    model.lm_head.weight = model.get_input_embeddings().weight
    assert sum(p.numel() for p in model.parameters()) == PARAMS[name]
    if name == "qwen3-1.7b":
        assert config.vocab_size * config.hidden_size == 311_164_928  # the 0.3B of embedding
    if name == "gemma-3-1b":
        assert config.sliding_window == 512 and config.final_logit_softcapping is None
        assert config.layer_types.count("full_attention") == 4  # every sixth of 26 layers
    if name == "llama-3.2-1b":
        assert config.rope_parameters["rope_type"] == "llama3" and config.rope_parameters["factor"] == 32.0


def test_smoke_runs_and_compares_with_stock(bench_e2e, monkeypatch):
    """Stock and this project's patch on each tiny preset, in this process (the script runs each in its own):
    the same losses to bf16 noise, and the comparison rows and geometric mean the JSON carries."""
    # The script's patch resets the registry (which reloads from the environment) and, where LIGER_EXTRA_BACKENDS is
    # unset, names liger-ops-cuda's source tree there: keep the session's value, so the same backends serve the
    # tests after this one.
    monkeypatch.setenv("LIGER_EXTRA_BACKENDS", os.environ.get("LIGER_EXTRA_BACKENDS", ""))
    from liger_core import functional
    from liger_core.transformers import revert_liger_kernel_patches

    fused = []
    op = functional.liger_fused_add_rms_norm
    monkeypatch.setattr(functional, "liger_fused_add_rms_norm", lambda *a: fused.append(1) or op(*a))
    results = []
    for name in bench_e2e.MODELS:
        for variant in ("stock", "liger"):
            run = bench_e2e.run_one(name, variant, batch=2, seq=16, steps=2, warmup=1, smoke=True)
            revert_liger_kernel_patches()
            assert not run["oom"] and len(run["losses"]) == 3 and run["tokens_per_s"] > 0
            results.append(run)
    assert fused, "the patched decoder layers did not run fused_add_rms_norm"
    calls = len(fused)
    unfused = bench_e2e.run_one("llama-3.2-1b", "liger-unfused-add", batch=2, seq=16, steps=2, warmup=1, smoke=True)
    revert_liger_kernel_patches()
    assert len(fused) == calls, "fused_add_rms_norm=False still fused"
    torch.testing.assert_close(unfused["losses"], results[0]["losses"], rtol=2e-2, atol=0)
    served = results[1]["served_natively"]
    assert {"rms_norm", "rope", "swiglu", "fused_linear_cross_entropy", "fused_add_rms_norm"} <= set(served)
    comparison = bench_e2e.compare(results + [{"model": "llama-3.2-1b", "variant": "liger-kernel", "skipped": "x"}])
    rows = {(r["model"], r["variant"]): r for r in comparison["rows"]}
    for name in bench_e2e.MODELS:
        row = rows[(name, "liger")]
        assert row["loss_vs_stock"]["max_rel_diff"] < 2e-2, row  # bf16 weights and activations
        assert "speed_vs_liger_kernel" not in row
    expected = math.prod(rows[(n, "liger")]["speed_vs_stock"] for n in bench_e2e.MODELS) ** (1 / 3)
    assert comparison["geomean_tokens_per_s"]["liger"]["vs_stock"] == pytest.approx(expected)
    table = bench_e2e._table(results, comparison)
    assert "gemma-3-1b" in table and "geomean tokens/s over the models, liger" in table


def test_arguments(bench_e2e, capsys):
    with pytest.raises(SystemExit):
        bench_e2e.main(["--models", "gpt-9"])
    assert "--models: unknown ['gpt-9']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_e2e.main(["--variants", "stock,bogus"])
    assert bench_e2e._category("triton_rms_norm_forward_kernel") == "triton/rms_norm"
    assert bench_e2e._category("_rope_backward_kernel") == "triton/rope"
    assert bench_e2e._category("sm90_xmma_gemm_bf16") == "gemm"


def test_compiled_variants_and_kernel_profile(bench_e2e, monkeypatch, tmp_path):
    """The -compiled variants (aot_eager here: the script's compile path without Inductor's CPU compile time)
    train like stock eager, and --profile-dir writes each run's per-kernel table."""
    monkeypatch.setenv("LIGER_EXTRA_BACKENDS", os.environ.get("LIGER_EXTRA_BACKENDS", ""))
    from liger_core.transformers import revert_liger_kernel_patches

    results = []
    for variant in ("stock", "stock-compiled", "liger-compiled"):
        try:
            run = bench_e2e.run_one(
                "gemma-3-1b", variant, batch=2, seq=16, steps=2, warmup=1, smoke=True, profile_steps=1,
                compile_backend="aot_eager", profile_dir=str(tmp_path),
            )  # fmt: skip
        finally:
            revert_liger_kernel_patches()
            torch._dynamo.reset()
        assert not run["oom"] and len(run["losses"]) == 3 and run["first_step_s"] > 0, run
        assert "profile_error" not in run, run["profile_error"]
        results.append(run)
    assert results[1]["compile"] == {"mode": "default", "backend": "aot_eager"}
    kernels = json.loads((tmp_path / "gemma-3-1b_liger-compiled_b2.json").read_text())["kernels"]
    names = [k["name"] for k in kernels]
    assert any(n.startswith("liger::") for n in names), names[:20]  # the compiled step calls the custom ops
    assert [k["ms_per_step"] for k in kernels] == sorted((k["ms_per_step"] for k in kernels), reverse=True)
    rows = {r["variant"]: r for r in bench_e2e.compare(results)["rows"]}
    for variant in ("stock-compiled", "liger-compiled"):
        assert rows[variant]["loss_vs_stock"]["max_rel_diff"] < 2e-2, rows[variant]  # bf16
    assert "speed_vs_stock_compiled" in rows["liger-compiled"]
