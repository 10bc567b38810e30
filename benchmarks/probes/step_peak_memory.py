"""What is alive at a training step's memory peak: one `bench_e2e.py` model and variant, a CUDA memory
history recorded over one step after warm-up, replayed to the moment of the peak; prints the peak, the
allocations made during the step that are live then (largest first, with the Python frames that made
them) and writes them as JSON. Compare two variants' lists to find what one holds that the other does not.

    python benchmarks/probes/step_peak_memory.py --model gemma-3-1b --variant liger --out /tmp/peak-liger.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_e2e as E  # noqa: E402


def _frames(frames: list[dict], keep: int = 5) -> list[str]:
    """The innermost ``keep`` frames outside torch's own autograd and allocation plumbing."""
    skip = (
        "torch/utils/_",
        "torch/autograd/",
        "torch/_tensor.py",
        "torch/nn/modules/module.py",
        "torch/cuda/memory.py",
    )
    out = [f"{f['filename'].split('site-packages/')[-1].split('/src/')[-1]}:{f['line']} {f['name']}" for f in frames]
    return [f for f in out if not any(s in f for s in skip)][:keep]


def live_at_peak(trace: list[dict]) -> tuple[int, list[dict]]:
    """The largest running total of the trace's allocations, and those live at that moment."""
    live: dict[int, dict] = {}
    total = peak = peak_at = 0
    for i, ev in enumerate(trace):
        if ev["action"] == "alloc":
            live[ev["addr"]] = ev
            total += ev["size"]
        elif ev["action"] == "free_requested" and ev["addr"] in live:
            total -= live.pop(ev["addr"])["size"]
        if total > peak:
            peak, peak_at = total, i
    live.clear()
    for ev in trace[: peak_at + 1]:
        if ev["action"] == "alloc":
            live[ev["addr"]] = ev
        elif ev["action"] == "free_requested":
            live.pop(ev["addr"], None)
    blocks = sorted(live.values(), key=lambda e: -e["size"])
    return peak, [{"mib": round(b["size"] / 2**20, 2), "frames": _frames(b.get("frames") or [])} for b in blocks]


def log_module_memory(net, events: list) -> None:
    """Append ``(phase, module name, memory_allocated)`` at every module's forward start and end and at
    its backward start and end (hooks on the output's and the inputs' gradients: no full backward hooks,
    which would wrap the tensors and change what is held)."""
    import torch

    def grad_logger(phase, name):
        def hook(_grad):
            events.append((phase, name, torch.cuda.memory_allocated()))

        return hook

    for name, mod in net.named_modules():
        if not name:
            continue

        def pre(m, args, name=name):
            events.append(("fwd>", name, torch.cuda.memory_allocated()))
            for t in args:
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(grad_logger("bwd<", name))

        def post(m, args, out, name=name):
            events.append(("fwd<", name, torch.cuda.memory_allocated()))
            first = out[0] if isinstance(out, (tuple, list)) else out
            if isinstance(first, torch.Tensor) and first.requires_grad:
                first.register_hook(grad_logger("bwd>", name))

        mod.register_forward_pre_hook(pre)
        mod.register_forward_hook(post)


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gemma-3-1b", choices=sorted(E.MODELS))
    p.add_argument(
        "--variant",
        default="liger",
        choices=("stock", "liger-kernel", "liger", "stock-compiled", "liger-kernel-compiled", "liger-compiled"),
    )
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out")
    p.add_argument("--module-log", action="store_true", help="log memory at every module's forward/backward edges")
    p.add_argument("--stacks", action="store_true", help="record Python stacks too (failed on torch 2.11)")
    a = p.parse_args()
    compiled = a.variant.endswith(E.COMPILED_SUFFIX)
    E._patch(a.variant, E.MODELS[a.model].model_type)
    config = E.model_config(a.model)
    torch.manual_seed(0)
    with torch.device("cuda"):
        net = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    net.train()
    opt = E._optimizer(net.parameters(), "adamw-fused")
    ids = torch.randint(0, config.vocab_size, (a.batch, a.seq), device="cuda")
    forward = torch.compile(net) if compiled else net

    def step():
        forward(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    events: list = []
    if a.module_log:
        log_module_memory(net, events)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    # No stacks by default: on torch 2.11 recording Python stacks made autograd.Function.apply fail
    # (SystemError) under checkpointing; block sizes alone tell two variants apart.
    context = "all" if a.stacks else None
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, context=context, stacks="python")
    step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][torch.cuda.current_device()]
    peak, blocks = live_at_peak(trace)
    result = {
        "model": a.model,
        "variant": a.variant,
        "max_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        "allocated_before_step_gib": base / 2**30,
        "step_peak_over_before_mib": peak / 2**20,
        "live_at_peak": blocks,
    }
    print(
        f"{a.model} {a.variant}: max allocated {result['max_memory_allocated_gib']:.3f} GiB, before the step "
        f"{result['allocated_before_step_gib']:.3f} GiB, peak {result['step_peak_over_before_mib']:.1f} MiB over it, "
        f"{len(blocks)} blocks made in the step live then; the largest:"
    )
    for b in blocks[: a.top]:
        print(f"  {b['mib']:9.2f} MiB  " + " <- ".join(b["frames"][:3]))
    sizes: dict[float, int] = {}
    for b in blocks:
        sizes[b["mib"]] = sizes.get(b["mib"], 0) + 1
    print("  live blocks by size (MiB: count):", dict(sorted(sizes.items(), reverse=True)[:40]))
    result["live_sizes_mib"] = {str(k): v for k, v in sorted(sizes.items(), reverse=True)}
    result["module_events"] = [(ph, n, round(b / 2**20, 2)) for ph, n, b in events]
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
