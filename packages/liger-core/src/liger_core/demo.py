"""The main job: train a small LLaMA twice, stock and with Liger's kernels, and compare.

    python -m liger_core.demo            (what ``nox -s demo`` runs)

Both runs build the same LLaMA-family model from a config (random weights, same seed),
train it with AdamW on the same generated token data for a few steps, with a progress bar,
each in its own process (so each patch and each peak-memory figure stands alone). Then one
table: the loss of every step for both, their difference, step time and peak memory.

Device: the machine's accelerator (cuda, npu, xpu) with its vendor backend; without one, the
CPU with liger-ops-cuda's Triton kernels in the Triton interpreter (``TRITON_INTERPRET=1``,
``LIGER_BACKEND=cuda``) when installed, else the PyTorch reference. On CPU the model is small
enough to finish in a couple of minutes, and "peak memory" is the process's peak RSS.
Needs transformers (``pip install "liger-core[transformers]"``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Setup:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    batch: int
    seq: int
    steps: int
    dtype: str
    lr: float


# CPU: the Triton interpreter runs every kernel program in Python, so keep rows and vocab small.
CPU_SETUP = Setup(
    hidden=64,
    layers=2,
    heads=4,
    kv_heads=2,
    intermediate=128,
    vocab=256,
    batch=4,
    seq=32,
    steps=12,
    dtype="float32",
    lr=3e-3,
)
# An accelerator: a ~0.2B-parameter LLaMA, bf16, where the fused kernels' savings show.
ACCEL_SETUP = Setup(
    hidden=1024,
    layers=8,
    heads=16,
    kv_heads=4,
    intermediate=2816,
    vocab=32000,
    batch=8,
    seq=1024,
    steps=20,
    dtype="bfloat16",
    lr=3e-4,
)


def _device() -> str:
    from liger_core.device import infer_device

    return infer_device()


def _child_env(device: str) -> tuple[dict[str, str], str]:
    """Environment for the training processes, and a line saying where the kernels run."""
    env = dict(os.environ)
    if device != "cpu":
        return env, f"{device}, native kernels of the installed vendor backend"
    if "LIGER_BACKEND" in env:
        return env, f"cpu, LIGER_BACKEND={env['LIGER_BACKEND']} (TRITON_INTERPRET={env.get('TRITON_INTERPRET', '')})"
    if importlib.util.find_spec("liger_ops_cuda") and importlib.util.find_spec("triton"):
        env.update(TRITON_INTERPRET="1", LIGER_BACKEND="cuda")
        return env, "cpu, liger-ops-cuda's Triton kernels in the Triton interpreter (TRITON_INTERPRET=1)"
    return env, "cpu, the PyTorch reference ops (install liger-ops-cuda and triton to run kernels)"


def _data(setup: Setup, device: str, seed: int = 1234):
    """Token batches with structure to learn: a fixed successor table, followed 3 times in 4."""
    import torch

    g = torch.Generator().manual_seed(seed)
    successor = torch.randint(0, setup.vocab, (setup.vocab,), generator=g)
    out = []
    for _ in range(setup.steps):
        ids = torch.empty(setup.batch, setup.seq, dtype=torch.long)
        ids[:, 0] = torch.randint(0, setup.vocab, (setup.batch,), generator=g)
        noise = torch.randint(0, setup.vocab, (setup.batch, setup.seq), generator=g)
        follow = torch.rand(setup.batch, setup.seq, generator=g) < 0.75
        for t in range(1, setup.seq):
            ids[:, t] = torch.where(follow[:, t], successor[ids[:, t - 1]], noise[:, t])
        out.append(ids.to(device))
    return out


def _peak_bytes(device: str) -> int:
    import torch

    if device == "cpu":
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return getattr(torch, device).max_memory_allocated()


def _sync(device: str) -> None:
    import torch

    if device != "cpu":
        getattr(torch, device).synchronize()


def train_once(variant: str, setup: Setup, device: str, progress: bool = True) -> dict:
    """One training run in this process: ``variant`` is ``stock`` or ``liger``."""
    import torch
    from tqdm.auto import tqdm
    from transformers import LlamaConfig, LlamaForCausalLM

    if device == "cpu":
        torch.set_num_threads(1)  # tiny matmuls; threads only add contention
    if variant == "liger":
        from liger_core.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama()
    config = LlamaConfig(
        hidden_size=setup.hidden,
        intermediate_size=setup.intermediate,
        num_hidden_layers=setup.layers,
        num_attention_heads=setup.heads,
        num_key_value_heads=setup.kv_heads,
        vocab_size=setup.vocab,
        max_position_embeddings=setup.seq,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device=device, dtype=getattr(torch, setup.dtype))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=setup.lr)
    data = _data(setup, device)
    if device != "cpu":
        getattr(torch, device).reset_peak_memory_stats()
    losses, times = [], []
    for ids in tqdm(data, desc=f"{variant:>5}", unit="step", disable=not progress, file=sys.stderr):
        _sync(device)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    from liger_core.registry import REGISTRY

    backend = REGISTRY.backend_for_device(device)
    return {
        "variant": variant,
        "losses": losses,
        "step_s": times,
        "peak_bytes": _peak_bytes(device),
        "backend": backend.name if backend is not None else "reference",
        "params": sum(p.numel() for p in model.parameters()),
    }


def speed_ratio(stock_s: float, liger_s: float) -> str:
    """Liger's speed against stock in words: a ratio below 1 printed as ``0.00x`` said nothing
    (the Triton interpreter on a CPU is hundreds of times slower than stock)."""
    if stock_s <= 0 or liger_s <= 0:
        return "no ratio: a zero time"
    if liger_s <= stock_s:
        return f"liger {stock_s / liger_s:.2f}x as fast"
    return f"liger {liger_s / stock_s:.3g}x slower"


def _table(stock: dict, liger: dict, setup: Setup, device: str, where: str) -> str:
    lines = [
        f"LLaMA from config: hidden {setup.hidden}, {setup.layers} layers, {setup.heads} heads / {setup.kv_heads} KV, "
        f"intermediate {setup.intermediate}, vocab {setup.vocab}; {stock['params'] / 1e6:.2f}M parameters",
        f"batch {setup.batch} x {setup.seq} tokens, {setup.dtype}, AdamW lr {setup.lr}, {setup.steps} steps, seed 0",
        f"device: {where}; liger ops served by backend {liger['backend']!r}",
        "",
        f"{'step':>4}  {'stock loss':>10}  {'liger loss':>10}  {'difference':>11}  {'stock s':>8}  {'liger s':>8}",
    ]
    for i, (a, b, ta, tb) in enumerate(zip(stock["losses"], liger["losses"], stock["step_s"], liger["step_s"])):
        lines.append(f"{i + 1:>4}  {a:>10.5f}  {b:>10.5f}  {b - a:>+11.2e}  {ta:>8.3f}  {tb:>8.3f}")

    def mean_after_first(xs: list[float]) -> float:
        rest = xs[1:] or xs
        return sum(rest) / len(rest)

    ts, tl = mean_after_first(stock["step_s"]), mean_after_first(liger["step_s"])
    mem = "peak RSS" if device == "cpu" else "peak allocated"
    ms, ml = stock["peak_bytes"] / 2**20, liger["peak_bytes"] / 2**20
    worst = max(abs(b - a) for a, b in zip(stock["losses"], liger["losses"]))
    lines += [
        "",
        f"max |loss difference|: {worst:.2e}",
        f"mean step time (steps 2..): stock {ts:.3f} s, liger {tl:.3f} s ({speed_ratio(ts, tl)})",
        f"{mem}: stock {ms:.1f} MiB, liger {ml:.1f} MiB ({(ml - ms) / ms * 100:+.1f}%)",
    ]
    if device == "cpu":
        lines.append(
            "(CPU: the Liger kernels run in the Triton interpreter, which checks them but is far slower than "
            "native code; speed and memory figures mean something on an accelerator)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m liger_core.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="training steps (default: 12 on CPU, 20 on an accelerator)")
    parser.add_argument("--json", help="also write both runs' figures to this file")
    parser.add_argument("--child", choices=["stock", "liger"], help=argparse.SUPPRESS)
    parser.add_argument("--setup", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:  # one training run, in its own process
        setup = Setup(**json.loads(args.setup))
        result = train_once(args.child, setup, _device())
        with open(args.out, "w") as f:
            json.dump(result, f)
        return 0

    if importlib.util.find_spec("transformers") is None:
        print('the demo needs transformers: pip install "liger-core[transformers]"', file=sys.stderr)
        return 2
    device = _device()
    setup = CPU_SETUP if device == "cpu" else ACCEL_SETUP
    if args.steps:
        setup = Setup(**{**asdict(setup), "steps": args.steps})
    env, where = _child_env(device)
    print(f"training a small LLaMA twice (stock, then Liger) on {where}", flush=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in ("stock", "liger"):
            out = os.path.join(tmp, f"{variant}.json")
            cmd = [sys.executable, "-m", "liger_core.demo", "--child", variant, "--setup", json.dumps(asdict(setup))]
            proc = subprocess.run([*cmd, "--out", out], env=env)
            if proc.returncode != 0:
                print(f"the {variant} run failed (exit {proc.returncode})", file=sys.stderr)
                return proc.returncode
            with open(out) as f:
                results[variant] = json.load(f)
    print()
    print(_table(results["stock"], results["liger"], setup, device, where))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "where": where, "setup": asdict(setup), **results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
