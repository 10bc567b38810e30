"""End-to-end training throughput and peak memory: stock transformers vs liger-kernel 0.8.5 vs this project.

Three model shapes from their released configs (random weights): LLaMA-3.2-1B, Qwen3-1.7B and
Gemma-3-1B (text), each ``--models`` preset below with the source of its values. Defaults: bf16,
batch 8 x 2048 tokens, gradient checkpointing, SDPA attention, fused AdamW
(``torch.optim.AdamW(fused=True)``, what Hugging Face's Trainer uses by default:
``optim="adamw_torch_fused"``), random tokens as inputs and labels. Each (model, variant, batch)
runs in its own process, so patches never mix and each peak-memory figure stands alone:

- ``stock``: transformers as installed;
- ``liger-kernel``: ``liger_kernel.transformers.apply_liger_kernel_to_<family>()`` (0.8.5
  defaults: RoPE, RMSNorm, SwiGLU/GEGLU, fused linear cross-entropy);
- ``liger``: ``liger_core.transformers.apply_liger_kernel_to_<family>()`` with liger-ops-cuda
  (on a GPU ``LIGER_STRICT=1``: an op falling back to the PyTorch reference is an error, not a
  quiet slow figure);
- ``liger-unfused-add`` (not run by default): ``liger`` with ``fused_add_rms_norm=False``, the
  decoder layers stock apart from their norms and MLPs: what the fused add-norm alone gives.
- ``stock-compiled``, ``liger-kernel-compiled``, ``liger-compiled`` (not run by default): the same
  three with the model under ``torch.compile(model)`` (default mode; ``--compile-mode`` picks
  ``max-autotune-no-cudagraphs`` or ``reduce-overhead``; the optimizer step stays eager). The
  compile happens in the warmup steps (``first_step_s`` records the first step, compile included).
  Their losses are compared with stock eager's like every variant's: a compiled model that trains
  differently shows there.

Per run: ``--warmup`` steps, then ``--steps`` timed steps (CUDA-synchronised wall time per
step); tokens/s from the median step; peak ``torch.cuda.max_memory_allocated`` (and reserved)
over the whole run (model, optimizer states, activations); the loss of every step (same seed and
data for every variant: each variant's losses are compared with stock's, ``loss_vs_stock``).
``--profile N`` (default 2) adds N steps under `torch.profiler` after the timed ones
(not timed) and records, per step, the device time of each kernel category (GEMM, attention,
optimizer, the patched ops' Triton kernels by op, the rest) and the top kernels: where each
model's step goes (on a CPU-only host: CPU self time per operator instead, for the smoke test).
``--profile-dir DIR`` also writes each run's whole per-kernel table (name, calls, ms per step,
sorted by time) to ``DIR/<model>_<variant>_b<batch>.json``. An out-of-memory run is recorded as
such. Writes JSON (``--out``) and prints a table, with each variant's tokens/s relative to stock
and to liger-kernel and the geometric mean over the models.

On a GPU host without a package index, from the source trees (see benchmarks/fetch_wheels.sh
and ``benchmarks/run_e2e_gpu.sh setup``/``bench``): about 6 minutes on one H100 for the three
models x three variants at the defaults.

``--smoke`` runs a tiny config of each preset for 1+2 steps (checks the script itself, on CPU
too; tests/hf/test_bench_e2e.py runs it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC_PATHS = [ROOT / "packages" / "liger-core" / "src", ROOT / "packages" / "liger-ops-cuda" / "src"]
VARIANTS = ("stock", "liger-kernel", "liger")
COMPILED_SUFFIX = "-compiled"
# Not run by default: this project without the decoder layer's fused add-norm (fused_add_rms_norm=False), to
# measure what that fusion alone gives; and each variant under torch.compile(model).
EXTRA_VARIANTS = ("liger-unfused-add", *(v + COMPILED_SUFFIX for v in VARIANTS))
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead")


@dataclass(frozen=True)
class Preset:
    """A model shape: the transformers model type (its config class and the patch's family) and the config."""

    model_type: str
    config: dict
    tiny: dict  # overrides for --smoke: the same layout at a size the CPU runs in seconds


# meta-llama/Llama-3.2-1B config.json (as quoted, e.g., by kevinstephano/thunder_model_blocks
# hf_llama/llama_config.py): hidden 2048, 16 layers, 32 heads / 8 KV heads, head_dim 64,
# intermediate 8192, vocab 128256, max positions 131072, rms_norm_eps 1e-5, RoPE theta 500000
# with llama3 scaling (factor 32, low/high freq factors 1/4, original 8192 positions), tied embeddings.
LLAMA_3_2_1B = dict(
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=64,
    vocab_size=128256,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_parameters={
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    tie_word_embeddings=True,
)
# Qwen/Qwen3-1.7B config.json (the same values in, e.g., THUDM/slime scripts/models/qwen3-1.7B.sh):
# hidden 2048, 28 layers, 16 heads / 8 KV heads, head_dim 128, intermediate 6144, vocab 151936,
# rms_norm_eps 1e-6, RoPE theta 1000000, max positions 40960, tied embeddings.
QWEN3_1_7B = dict(
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=40960,
    rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    tie_word_embeddings=True,
)
# google/gemma-3-1b-pt config.json (Gemma3TextConfig; the same values in keras-hub's gemma3 presets,
# 999,885,952 parameters): hidden 1152, 26 layers, 4 heads / 1 KV head, head_dim 256, intermediate
# 6912, vocab 262144, max positions 32768, rms_norm_eps 1e-6, sliding window 512 on five of every six
# layers (sliding_window_pattern 6), RoPE theta 1000000 global / 10000 local, query_pre_attn_scalar
# 256, no attention or final logit soft-capping, gelu_pytorch_tanh, tied embeddings.
GEMMA_3_1B = dict(
    hidden_size=1152,
    intermediate_size=6912,
    num_hidden_layers=26,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=256,
    vocab_size=262144,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    sliding_window=512,
    layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)],
    rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    },
    query_pre_attn_scalar=256,
    final_logit_softcapping=None,
    attn_logit_softcapping=None,
    hidden_activation="gelu_pytorch_tanh",
    tie_word_embeddings=True,
)
_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, vocab_size=512, max_position_embeddings=256)  # fmt: skip

MODELS: dict[str, Preset] = {
    "llama-3.2-1b": Preset("llama", LLAMA_3_2_1B, _TINY),
    "qwen3-1.7b": Preset("qwen3", QWEN3_1_7B, _TINY),
    "gemma-3-1b": Preset(
        "gemma3_text",
        GEMMA_3_1B,
        dict(_TINY, num_hidden_layers=3, sliding_window=16, layer_types=["sliding_attention"] * 2 + ["full_attention"]),
    ),
}


def model_config(name: str, smoke: bool = False):
    """The transformers config of preset ``name`` (``smoke``: its tiny variant), SDPA attention, no KV cache."""
    from transformers import AutoConfig

    preset = MODELS[name]
    kw = dict(preset.config, **(preset.tiny if smoke else {}))
    config = AutoConfig.for_model(preset.model_type, **kw)
    config._attn_implementation = "sdpa"
    config.use_cache = False
    return config


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("torch", "triton", "transformers", "liger-kernel", "liger-core", "liger-ops-cuda"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    if out["liger-core"] is None:  # from the source tree
        sys.path[:0] = [str(p) for p in SRC_PATHS]
        from liger_core.__about__ import __version__ as core

        out["liger-core"] = f"{core} (source tree)"
        try:
            from liger_ops_cuda.__about__ import __version__ as cuda

            out["liger-ops-cuda"] = f"{cuda} (source tree)"
        except ImportError as e:  # a CPU smoke run without Triton: the reference serves every op
            out["liger-ops-cuda"] = f"not importable: {e}"
    return out


def _patch(variant: str, model_type: str) -> dict:
    """Apply the variant's patch to the model's family before the model is built; what served the ops."""
    variant = variant.removesuffix(COMPILED_SUFFIX)
    if variant == "stock":
        return {}
    if variant == "liger-kernel":
        import liger_kernel.transformers as liger_kernel

        getattr(liger_kernel, f"apply_liger_kernel_to_{model_type}")()
        return {}
    import torch

    from liger_core.registry import REGISTRY

    # From the source tree liger-ops-cuda has no entry point: the registry loads it from here.
    os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_cuda")
    REGISTRY.reset()
    from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN
    from liger_core.transformers.monkey_patch import family_ops

    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](
        **({"fused_add_rms_norm": False} if variant == "liger-unfused-add" else {})
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = REGISTRY.backend_for_device(device)
    ops = sorted({op for flag_ops in family_ops(model_type).values() for op in flag_ops} - {"cross_entropy"})
    return {
        "backend": backend.name if backend else "reference",
        "served_natively": {op: bool(backend and op in backend.ops) for op in ops},
    }


# Kernel-name patterns per category, checked in order (lower-cased names).
KERNEL_CATEGORIES = (
    ("attention", ("flash", "fmha", "attention", "attn")),
    ("gemm", ("gemm", "cutlass", "nvjet", "sm90_xmma", "sm80_xmma", "cublas", "splitkreduce")),
    ("optimizer", ("multi_tensor", "foreach", "adam")),
    ("embedding", ("embedding", "index_put", "indexing_backward", "radix", "sort", "scatter", "gather")),
    ("copy/cast", ("copy", "cast", "to_copy", "convert")),
)


# Triton kernels by the op they serve (the jit function's name), checked in order.
TRITON_OPS = (
    ("rms_norm", ("rms_norm", "rmsnorm")),
    ("rope", ("rope", "rotary")),
    ("swiglu/geglu", ("swiglu", "geglu", "glu")),
    ("cross_entropy", ("cross_entropy", "flce", "logsumexp", "_ce_")),
)


def _category(name: str) -> str:
    low = name.lower()
    for cat, pats in KERNEL_CATEGORIES:
        if any(p in low for p in pats):
            return cat
    if "_kernel" in low and "at::" not in low and "void " not in low:
        # Triton kernels carry the jit function's name (..._kernel), ATen's are templated
        op = next((op for op, pats in TRITON_OPS if any(p in low for p in pats)), "other")
        return f"triton/{op}"
    return "other elementwise/reduction"


def _profile_steps(step, n: int, cuda: bool = True) -> tuple[dict, list[dict]]:
    """Device time per step by kernel category and the 40 costliest kernels, over ``n`` steps; and every
    kernel's calls and time per step, costliest first. Without CUDA: each operator's CPU self time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(n):
            step()
        if cuda:
            torch.cuda.synchronize()
    per_kernel: dict[str, float] = {}
    calls: dict[str, int] = {}
    if cuda:
        for evt in prof.events():
            if evt.device_type == torch.autograd.DeviceType.CUDA:  # a kernel (or memcpy/memset) on the device
                per_kernel[evt.name] = per_kernel.get(evt.name, 0.0) + evt.time_range.elapsed_us() / 1e3  # ms
                calls[evt.name] = calls.get(evt.name, 0) + 1
    else:
        for avg in prof.key_averages():
            if avg.self_cpu_time_total > 0:
                per_kernel[avg.key] = avg.self_cpu_time_total / 1e3
                calls[avg.key] = avg.count
    cats: dict[str, float] = {}
    for name, ms in per_kernel.items():
        cats[_category(name)] = cats.get(_category(name), 0.0) + ms / n
    ranked = sorted(per_kernel.items(), key=lambda kv: -kv[1])
    summary = {
        "steps": n,
        "timer": "cuda kernels" if cuda else "cpu operators (self time)",
        "device_ms_per_step": sum(cats.values()),
        "category_ms_per_step": dict(sorted(cats.items(), key=lambda kv: -kv[1])),
        "top_kernels_ms_per_step": [[name[:120], ms / n] for name, ms in ranked[:40]],
    }
    table = [
        {"name": name, "category": _category(name), "calls_per_step": calls[name] / n, "ms_per_step": ms / n}
        for name, ms in ranked
    ]
    return summary, table


def _optimizer(params, name: str):
    import torch

    if name == "adamw-fused":
        return torch.optim.AdamW(params, lr=1e-5, fused=True)
    return torch.optim.AdamW(params, lr=1e-5, foreach=True)


def run_one(
    model: str,
    variant: str,
    batch: int,
    seq: int,
    steps: int,
    warmup: int,
    smoke: bool,
    profile_steps: int = 0,
    optimizer: str = "adamw-fused",
    compile_mode: str = "default",
    compile_backend: str = "inductor",
    profile_dir: str | None = None,
) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    head = {"model": model, "variant": variant, "batch": batch, "seq": seq}
    info = _patch(variant, MODELS[model].model_type)
    config = model_config(model, smoke)
    torch.manual_seed(0)
    with torch.device(device):
        net = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    net.train()
    opt = _optimizer(net.parameters(), optimizer)
    compiled = variant.endswith(COMPILED_SUFFIX)
    if compiled:
        head["compile"] = {"mode": compile_mode, "backend": compile_backend}
        forward = torch.compile(net, backend=compile_backend, mode=None if compile_mode == "default" else compile_mode)
    else:
        forward = net
    g = torch.Generator(device="cpu").manual_seed(1234)
    data = [torch.randint(0, config.vocab_size, (batch, seq), generator=g) for _ in range(warmup + steps)]
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    try:
        for ids in data:
            ids = ids.to(device)
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = forward(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())
    except torch.cuda.OutOfMemoryError as e:
        return {**head, "oom": True, "error": str(e).splitlines()[0], **info}
    timed = times[warmup:]
    median = statistics.median(timed)
    if profile_steps:

        def step():
            ids = data[-1].to(device)
            forward(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        try:
            info["profile"], table = _profile_steps(step, profile_steps, cuda)
            if profile_dir:
                path = Path(profile_dir) / f"{model}_{variant}_b{batch}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps({**head, "timer": info["profile"]["timer"], "kernels": table}, indent=1))
                info["profile_file"] = str(path)
        except Exception as e:  # noqa: BLE001 - the profile is extra; never lose the timed result over it
            info["profile_error"] = repr(e)
    return {
        **head,
        "oom": False,
        "params": sum(p.numel() for p in net.parameters()),
        "first_step_s": times[0],
        "step_s": timed,
        "median_step_s": median,
        "tokens_per_s": batch * seq / median,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
        "losses": losses,
        **info,
    }


# What each variant's speed and memory are compared with (its loss: with stock eager's).
PEERS = ("stock", "liger-kernel", "stock-compiled")


def compare(results: list[dict]) -> dict:
    """Per model and batch: each variant's tokens/s and peak memory over stock's and liger-kernel's, its largest
    loss difference from stock's (same data and seed); per variant the geometric mean of tokens/s over the models
    (at each model's largest batch that every variant ran)."""
    ok = [r for r in results if not r.get("failed") and not r.get("oom") and not r.get("skipped")]
    by = {(r["model"], r["batch"], r["variant"]): r for r in ok}
    rows = []
    for r in ok:
        row = {"model": r["model"], "batch": r["batch"], "variant": r["variant"], "tokens_per_s": r["tokens_per_s"]}
        for peer in PEERS:
            ref = by.get((r["model"], r["batch"], peer))
            if ref is None:
                continue
            key = peer.replace("-", "_")
            row[f"speed_vs_{key}"] = r["tokens_per_s"] / ref["tokens_per_s"]
            if r["peak_allocated_gib"] and ref["peak_allocated_gib"]:
                row[f"memory_vs_{key}"] = r["peak_allocated_gib"] / ref["peak_allocated_gib"]
            if peer == "stock":
                diffs = [abs(a - b) for a, b in zip(r["losses"], ref["losses"])]
                row["loss_vs_stock"] = {
                    "max_abs_diff": max(diffs),
                    "max_rel_diff": max(d / max(abs(b), 1e-12) for d, b in zip(diffs, ref["losses"])),
                }
        rows.append(row)
    geomean = {}
    models = sorted({r["model"] for r in ok})
    for variant in sorted({r["variant"] for r in ok}):
        for peer in PEERS:
            ratios = []
            for m in models:
                batches = [b for (mm, b, v) in by if mm == m and v == variant and (m, b, peer) in by]
                if batches:
                    b = max(batches)
                    ratios.append(by[(m, b, variant)]["tokens_per_s"] / by[(m, b, peer)]["tokens_per_s"])
            if ratios and len(ratios) == len(models):
                geomean.setdefault(variant, {})[f"vs_{peer.replace('-', '_')}"] = math.prod(ratios) ** (1 / len(ratios))
    return {"rows": rows, "geomean_tokens_per_s": geomean}


def _table(results: list[dict], comparison: dict) -> str:
    head = (
        f"{'model':<13} {'variant':<13} {'batch':>5} {'tokens/s':>10} {'vs stock':>8} {'vs lk':>6} {'peak GiB':>9} "
        f"{'vs lk':>6} {'loss diff':>9}  last losses"
    )
    lines = [head, "-" * len(head)]
    rel = {(c["model"], c["batch"], c["variant"]): c for c in comparison["rows"]}
    for r in results:
        where = f"{r['model']:<13} {r['variant']:<13} {r['batch']:>5}"
        if r.get("oom") or r.get("failed") or r.get("skipped"):
            what = "OOM" if r.get("oom") else "skipped" if r.get("skipped") else "failed"
            lines.append(f"{where} {what:>10}  {r.get('skipped') or ''}")
            continue
        c = rel.get((r["model"], r["batch"], r["variant"]), {})

        def ratio(key, width):
            return f"{c[key]:.3f}x".rjust(width) if key in c else "-".rjust(width)

        peak = r["peak_allocated_gib"]
        peak_s = f"{peak:.2f}" if peak is not None else "-"
        diff = c.get("loss_vs_stock", {}).get("max_abs_diff")
        diff_s = f"{diff:.2e}" if diff is not None else "-"
        loss = " ".join(f"{x:.3f}" for x in r["losses"][-3:])
        lines.append(
            f"{where} {r['tokens_per_s']:>10.0f} {ratio('speed_vs_stock', 8)} {ratio('speed_vs_liger_kernel', 6)} "
            f"{peak_s:>9} {ratio('memory_vs_liger_kernel', 6)} {diff_s:>9}  {loss}"
        )
    for variant, g in comparison["geomean_tokens_per_s"].items():
        lines.append(
            f"geomean tokens/s over the models, {variant}: " + ", ".join(f"{k} {v:.3f}x" for k, v in g.items())
        )
    return "\n".join(lines)


def _installed(variant: str) -> str | None:
    """Why ``variant`` cannot run here (None: it can)."""
    if variant.removesuffix(COMPILED_SUFFIX) == "liger-kernel":
        import importlib.util

        if importlib.util.find_spec("liger_kernel") is None:
            return "liger-kernel is not installed"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated presets, of {tuple(MODELS)}")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {VARIANTS + EXTRA_VARIANTS}")
    p.add_argument("--batches", default="8", help="batch sizes (comma-separated; default 8)")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=5, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--optimizer",
        default="adamw-fused",
        choices=("adamw-fused", "adamw-foreach"),
        help="torch.optim.AdamW(fused=True) (Trainer's default adamw_torch_fused), or foreach=True",
    )
    p.add_argument("--smoke", action="store_true", help="tiny configs, 1+2 steps: checks the script")
    p.add_argument("--profile", type=int, default=2, metavar="N", help="profile N extra steps (0: none)")
    p.add_argument("--profile-dir", help="write each run's per-kernel table (JSON) into this folder")
    p.add_argument(
        "--compile-mode", default="default", choices=COMPILE_MODES, help="torch.compile mode of the -compiled variants"
    )
    p.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile backend of the -compiled variants (aot_eager: the cheap CPU check of the smoke test)",
    )
    p.add_argument("--out", help="JSON file to write")
    p.add_argument(
        "--memory-budget",
        metavar="BYTES",
        help="this project's fused linear memory budget for every run (bytes or e.g. 512MiB; sets "
        "LIGER_FLCE_MEMORY_BUDGET, which the runs also take from the environment; default: the vendor's)",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_budget:
        os.environ["LIGER_FLCE_MEMORY_BUDGET"] = args.memory_budget  # the child processes inherit it

    if args.child:
        model, variant, batch = args.child.split(":")
        if variant.startswith("liger") and not variant.startswith("liger-kernel"):
            sys.path[:0] = [str(path) for path in SRC_PATHS]
            import torch

            if torch.cuda.is_available():
                os.environ["LIGER_STRICT"] = "1"
        result = run_one(
            model,
            variant,
            int(batch),
            args.seq,
            args.steps,
            args.warmup,
            args.smoke,
            args.profile,
            args.optimizer,
            args.compile_mode,
            args.compile_backend,
            args.profile_dir,
        )
        print("RESULT " + json.dumps(result))
        return 0

    if args.smoke:
        args.seq, args.steps, args.warmup = min(args.seq, 64), 2, 1
    models = [m for m in args.models.split(",") if m]
    variants = [v for v in args.variants.split(",") if v]
    for given, known, what in ((models, MODELS, "--models"), (variants, VARIANTS + EXTRA_VARIANTS, "--variants")):
        bad = sorted(set(given) - set(known))
        if bad or not given:
            p.error(f"{what}: unknown {bad or 'none given'}; choose from {tuple(known)}")
    import torch

    env_info = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "versions": _versions(),
        "models": {
            m: {"model_type": MODELS[m].model_type, **model_config(m, args.smoke).to_diff_dict()} for m in models
        },
        "smoke": args.smoke,
        "seq": args.seq,
        "steps": args.steps,
        "warmup": args.warmup,
        "dtype": "bfloat16",
        "optimizer": "torch.optim.AdamW lr 1e-5, "
        + ("fused=True" if args.optimizer == "adamw-fused" else "foreach=True"),
        "gradient_checkpointing": True,
        "attention": "sdpa",
        "compile": {"mode": args.compile_mode, "backend": args.compile_backend},
        # What the liger runs' fused linear losses chunk within (liger_core.memory_budget).
        "flce_memory_budget": os.environ.get("LIGER_FLCE_MEMORY_BUDGET") or "the vendor default (hardware.py)",
    }
    print(json.dumps(env_info["versions"]), flush=True)
    results = []
    for model in models:
        for batch in [int(b) for b in args.batches.split(",")]:
            for variant in variants:
                head = {"model": model, "variant": variant, "batch": batch, "seq": args.seq}
                why = _installed(variant)
                if why:
                    results.append({**head, "skipped": why})
                    continue
                cmd = [sys.executable, __file__, "--child", f"{model}:{variant}:{batch}", "--seq", str(args.seq)]
                cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--profile", str(args.profile)]
                cmd += ["--optimizer", args.optimizer] + (["--smoke"] if args.smoke else [])
                cmd += ["--compile-mode", args.compile_mode, "--compile-backend", args.compile_backend]
                cmd += ["--profile-dir", args.profile_dir] if args.profile_dir else []
                print(f"running {model} {variant} at batch {batch} x {args.seq} ...", flush=True)
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True)
                line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
                if proc.returncode != 0 or line is None:
                    err = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
                    print("\n".join(err), file=sys.stderr)
                    results.append({**head, "failed": True, "error": err})
                    continue
                results.append({**json.loads(line[len("RESULT ") :]), "process_s": time.perf_counter() - t0})
    comparison = compare(results)
    print()
    print(_table(results, comparison))
    for r in results:
        prof = r.get("profile")
        if prof:
            cats = "  ".join(f"{k} {v:.1f}" for k, v in prof["category_ms_per_step"].items())
            where = f"{r['model']} {r['variant']} batch {r['batch']}"
            print(f"{where}: device {prof['device_ms_per_step']:.1f} ms/step: {cats}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({**env_info, "results": results, **comparison}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 1 if any(r.get("failed") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
