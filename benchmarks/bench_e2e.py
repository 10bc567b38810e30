"""End-to-end training throughput and peak memory: stock transformers vs liger-kernel 0.8.5 vs this project.

A LLaMA-3.2-1B-shaped model from its config (hidden 2048, 16 layers, 32 heads / 8 KV heads,
intermediate 8192, vocab 128256, tied embeddings, RoPE theta 500000; random weights), bf16,
AdamW, gradient checkpointing, SDPA attention, trained on random tokens (labels = inputs) at
batch 4 and 8 x 2048 tokens. Each (variant, batch) runs in its own process, so patches never
mix and each peak-memory figure stands alone:

- ``stock``: transformers as installed;
- ``liger-kernel``: ``liger_kernel.transformers.apply_liger_kernel_to_llama()`` (0.8.5 defaults:
  RoPE, RMSNorm, SwiGLU, fused linear cross-entropy);
- ``liger``: ``liger_core.transformers.apply_liger_kernel_to_llama()`` with liger-ops-cuda
  (``LIGER_STRICT=1``: an op falling back to the PyTorch reference is an error, not a quiet
  slow figure).

Per run: ``--warmup`` steps, then ``--steps`` timed steps (CUDA-synchronised wall time per
step); tokens/s from the median step; peak ``torch.cuda.max_memory_allocated`` (and reserved)
over the whole run (model, AdamW states, activations); the loss of every step (same seed and
data for every variant, so the columns should agree to bf16 noise). An out-of-memory run is
recorded as such. Writes JSON and prints a table.

On a GPU host without a package index, from the source trees (see benchmarks/fetch_wheels.sh
for the wheels to carry: transformers 5.23.0 and its dependencies, liger-kernel 0.8.5):

    python3 -m venv --system-site-packages /tmp/e2e
    /tmp/e2e/bin/pip install --no-index --find-links .whl/hf transformers==5.23.0
    /tmp/e2e/bin/pip install --no-index --no-deps .whl/hf/liger_kernel-0.8.5-py3-none-any.whl
    /tmp/e2e/bin/python benchmarks/bench_e2e.py --out benchmarks/results/e2e_llama-3.2-1b_H100.json

``--smoke`` runs a tiny config for 2 steps (checks the script itself, on CPU too).
``--profile N`` adds N steps under `torch.profiler` after the timed ones (not timed) and
records, per step, the device time of each kernel category (GEMM, attention, optimizer, the
patched ops' Triton kernels, the rest) and the top kernels: where a variant's step goes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC_PATHS = [ROOT / "packages" / "liger-core" / "src", ROOT / "packages" / "liger-ops-cuda" / "src"]
VARIANTS = ("stock", "liger-kernel", "liger")

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
    rope_theta=500000.0,
    tie_word_embeddings=True,
)
SMOKE = dict(LLAMA_3_2_1B, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, vocab_size=512, max_position_embeddings=256)  # fmt: skip


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
        from liger_ops_cuda.__about__ import __version__ as cuda

        out["liger-core"], out["liger-ops-cuda"] = f"{core} (source tree)", f"{cuda} (source tree)"
    return out


def _patch(variant: str) -> dict:
    """Apply the variant's patch before the model is built; what served the ops."""
    if variant == "stock":
        return {}
    if variant == "liger-kernel":
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama()
        return {}
    import torch

    from liger_core.registry import REGISTRY

    # From the source tree liger-ops-cuda has no entry point: the registry loads it from here.
    os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_cuda")
    REGISTRY.reset()
    from liger_core.transformers import apply_liger_kernel_to_llama

    apply_liger_kernel_to_llama()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = REGISTRY.backend_for_device(device)
    ops = ("rms_norm", "swiglu", "rope", "fused_linear_cross_entropy")
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


def _category(name: str) -> str:
    low = name.lower()
    for cat, pats in KERNEL_CATEGORIES:
        if any(p in low for p in pats):
            return cat
    if "_kernel" in low and "at::" not in low and "void " not in low:
        return "triton"  # Triton kernels carry the jit function's name (..._kernel), ATen's are templated
    return "other elementwise/reduction"


def _profile_steps(step, n: int) -> dict:
    """Device time per step by kernel category and the 40 costliest kernels, over ``n`` steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    per_kernel: dict[str, float] = {}
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:  # a kernel (or memcpy/memset) on the device
            per_kernel[evt.name] = per_kernel.get(evt.name, 0.0) + evt.time_range.elapsed_us() / 1e3  # ms
    cats: dict[str, float] = {}
    for name, ms in per_kernel.items():
        cats[_category(name)] = cats.get(_category(name), 0.0) + ms / n
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:40]
    return {
        "steps": n,
        "device_ms_per_step": sum(cats.values()),
        "category_ms_per_step": dict(sorted(cats.items(), key=lambda kv: -kv[1])),
        "top_kernels_ms_per_step": [[name[:120], ms / n] for name, ms in top],
    }


def run_one(variant: str, batch: int, seq: int, steps: int, warmup: int, smoke: bool, profile_steps: int = 0) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    info = _patch(variant)
    kw = dict(SMOKE if smoke else LLAMA_3_2_1B)
    theta = kw.pop("rope_theta")
    config = LlamaConfig(**kw, rope_parameters={"rope_type": "default", "rope_theta": theta})
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
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
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())
    except torch.cuda.OutOfMemoryError as e:
        return {"variant": variant, "batch": batch, "seq": seq, "oom": True, "error": str(e).splitlines()[0], **info}
    timed = times[warmup:]
    median = statistics.median(timed)
    if profile_steps and cuda:

        def step():
            ids = data[-1].to(device)
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        try:
            info["profile"] = _profile_steps(step, profile_steps)
        except Exception as e:  # noqa: BLE001 - the profile is extra; never lose the timed result over it
            info["profile_error"] = repr(e)
    return {
        "variant": variant,
        "batch": batch,
        "seq": seq,
        "oom": False,
        "params": sum(p.numel() for p in model.parameters()),
        "step_s": timed,
        "median_step_s": median,
        "tokens_per_s": batch * seq / median,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
        "losses": losses,
        **info,
    }


def _table(results: list[dict]) -> str:
    head = f"{'variant':<13} {'batch':>5} {'tokens/s':>10} {'vs stock':>8} {'peak GiB':>9} {'vs stock':>8}  losses"
    lines = [head, "-" * len(head)]
    stock = {r["batch"]: r for r in results if r["variant"] == "stock" and not r.get("oom")}
    for r in results:
        if r.get("oom"):
            lines.append(f"{r['variant']:<13} {r['batch']:>5} {'OOM':>10}")
            continue
        s = stock.get(r["batch"])
        speed = f"{r['tokens_per_s'] / s['tokens_per_s']:.2f}x" if s else "-"
        peak = r["peak_allocated_gib"]
        mem = f"{peak / s['peak_allocated_gib']:.2f}x" if s and peak else "-"
        peak_s = f"{peak:.2f}" if peak is not None else "-"
        loss = " ".join(f"{x:.3f}" for x in r["losses"][-3:])
        lines.append(
            f"{r['variant']:<13} {r['batch']:>5} {r['tokens_per_s']:>10.0f} {speed:>8} {peak_s:>9} {mem:>8}  {loss}"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {VARIANTS}")
    p.add_argument("--batches", default="4,8", help="batch sizes (comma-separated)")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=10, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="tiny config, 2+1 steps: checks the script")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="profile N extra steps (CUDA only)")
    p.add_argument("--out", help="JSON file to write")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.child:
        variant, batch = args.child.split(":")
        if variant == "liger":
            os.environ["LIGER_STRICT"] = "1"
            sys.path[:0] = [str(path) for path in SRC_PATHS]
        result = run_one(variant, int(batch), args.seq, args.steps, args.warmup, args.smoke, args.profile)
        print("RESULT " + json.dumps(result))
        return 0

    if args.smoke:
        args.seq, args.steps, args.warmup = min(args.seq, 64), 2, 1
    variants = [v for v in args.variants.split(",") if v]
    bad = sorted(set(variants) - set(VARIANTS))
    if bad:
        p.error(f"--variants: unknown {bad}; choose from {VARIANTS}")
    import torch

    env_info = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "versions": _versions(),
        "model": "LLaMA-3.2-1B shape from config" if not args.smoke else "smoke config",
        "config": SMOKE if args.smoke else LLAMA_3_2_1B,
        "seq": args.seq,
        "steps": args.steps,
        "warmup": args.warmup,
        "dtype": "bfloat16",
        "optimizer": "torch.optim.AdamW lr 1e-5",
        "gradient_checkpointing": True,
        "attention": "sdpa",
    }
    print(json.dumps(env_info["versions"]), flush=True)
    results = []
    for batch in [int(b) for b in args.batches.split(",")]:
        for variant in variants:
            cmd = [sys.executable, __file__, "--child", f"{variant}:{batch}", "--seq", str(args.seq)]
            cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--profile", str(args.profile)]
            cmd += ["--smoke"] if args.smoke else []
            print(f"running {variant} at batch {batch} x {args.seq} ...", flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                err = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
                print("\n".join(err), file=sys.stderr)
                results.append({"variant": variant, "batch": batch, "seq": args.seq, "failed": True, "error": err})
                continue
            results.append(json.loads(line[len("RESULT ") :]))
    ok = [r for r in results if not r.get("failed")]
    print()
    print(_table(ok))
    for r in ok:
        prof = r.get("profile")
        if prof:
            cats = "  ".join(f"{k} {v:.1f}" for k, v in prof["category_ms_per_step"].items())
            print(f"{r['variant']} batch {r['batch']}: device {prof['device_ms_per_step']:.1f} ms/step: {cats}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({**env_info, "results": results}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 1 if len(ok) != len(results) else 0


if __name__ == "__main__":
    sys.exit(main())
