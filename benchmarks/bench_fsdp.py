"""FSDP2 training of a patched model across the GPUs of one host: stock vs liger-kernel 0.8.5 vs this project.

One variant per launch (patches never mix), every rank a process:

    torchrun --nproc_per_node 2 benchmarks/bench_fsdp.py --variant liger --out OUT/fsdp2_liger.json
    for v in stock liger-kernel liger; do torchrun --nproc_per_node 2 benchmarks/bench_fsdp.py \\
        --variant $v --out benchmarks/results/H100/fsdp2-1gpu/fsdp2_$v.json; done

The model is one of bench_e2e.py's presets (default LLaMA-3.2-1B as released, random weights, bf16),
each decoder layer and then the root wrapped with ``fully_shard`` (FSDP2), gradient checkpointing,
SDPA, fused AdamW (Trainer's default), ``--batch`` sequences of ``--seq`` tokens per rank, each rank
its own data. Reported by rank 0: the loss of every step averaged over ranks (same seed and data
for every variant, so the variants' columns should agree to bf16 noise), tokens/s over all ranks
from the median step, and the largest peak memory of any rank. With the patched model the fused
linear cross-entropy runs inside the LM head's FSDP unit (liger_core.transformers.sharding), so it
sees the gathered weight.

``--smoke`` runs the preset's tiny config on CPU over gloo (the reference ops): it checks the
script, e.g. ``torchrun --nproc_per_node 2 benchmarks/bench_fsdp.py --smoke --variant liger``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_e2e  # noqa: E402 - the presets, the patches and the version report live there


def shard(model: torch.nn.Module) -> None:
    """FSDP2 as the trainers apply it: each decoder layer a unit, then the root (embeddings, norm, head)."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)


def run(args: argparse.Namespace) -> dict | None:
    cuda = torch.cuda.is_available() and not args.smoke
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    from transformers import AutoModelForCausalLM

    info = bench_e2e._patch(args.variant, bench_e2e.MODELS[args.model].model_type)
    config = bench_e2e.model_config(args.model, args.smoke)
    torch.manual_seed(0)  # every rank builds the same weights; fully_shard keeps each rank's shard
    with torch.device(device):
        net = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    net.train()
    shard(net)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-5, fused=cuda)
    gen = torch.Generator(device="cpu").manual_seed(1234 + rank)
    data = [
        torch.randint(0, config.vocab_size, (args.batch, args.seq), generator=gen)
        for _ in range(args.warmup + args.steps)
    ]
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    losses, times = [], []
    for i, ids in enumerate(data):
        ids = ids.to(device)
        if cuda:
            torch.cuda.synchronize(device)
        dist.barrier()
        t0 = time.perf_counter()
        loss = net(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        mean = loss.detach().float().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
        if rank == 0:
            print(f"step {i + 1}/{len(data)}: loss {losses[-1]:.5f}, {times[-1]:.3f} s", flush=True)
    peak = torch.tensor([torch.cuda.max_memory_allocated(device) / 2**30 if cuda else 0.0], device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    median = statistics.median(times[args.warmup :])
    result = {
        "model": args.model,
        "variant": args.variant,
        "world_size": world,
        "batch_per_rank": args.batch,
        "seq": args.seq,
        "sharding": "FSDP2 fully_shard per decoder layer + root",
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "step_s": times[args.warmup :],
        "median_step_s": median,
        "tokens_per_s": world * args.batch * args.seq / median,
        "peak_allocated_gib_max_rank": peak.item() if cuda else None,
        "losses": losses,
        "versions": bench_e2e._versions(),
        **info,
    }
    dist.destroy_process_group()
    return result if rank == 0 else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-3.2-1b", choices=tuple(bench_e2e.MODELS))
    p.add_argument("--variant", default="liger", choices=bench_e2e.VARIANTS + bench_e2e.EXTRA_VARIANTS)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--smoke", action="store_true", help="tiny config on CPU over gloo: checks the script")
    p.add_argument("--out", help="JSON file rank 0 writes")
    args = p.parse_args(argv)
    if args.smoke:
        args.batch, args.seq, args.steps, args.warmup = min(args.batch, 2), min(args.seq, 32), 2, 1
    for name in ("batch", "seq", "steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1; got {getattr(args, name)}")
    if "RANK" not in os.environ:
        p.error("run it under torchrun, e.g. torchrun --nproc_per_node 2 benchmarks/bench_fsdp.py ...")
    result = run(args)
    if result is not None:
        text = json.dumps(result, indent=1)
        if args.out:
            Path(args.out).write_text(text)
            print("wrote", args.out)
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
