"""Which parameters' gradients a compiled Liger-patched model gets wrong (issue 39's diagnosis, GPU or CPU).

One of bench_e2e.py's presets (bf16, SDPA, gradient checkpointing, random tokens as inputs and labels),
the same weights and batch three times: stock eager, patched eager, patched under ``torch.compile``
(``--backend``, default inductor; ``--mode``). Prints the three first-step losses, then every
parameter whose compiled gradient is further from stock's than the patched eager one is (relative
max-abs error over the gradient's max-abs, ``--factor`` times eager's plus 1e-2), and a per-step loss
of ``--steps`` AdamW steps (lr ``--lr``) of each. ``--smoke``: the preset's tiny config (CPU).

    python benchmarks/probes/compile_grad_check.py --model gemma-3-1b --batch 2 --seq 1024
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_e2e  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gemma-3-1b", choices=tuple(bench_e2e.MODELS))
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--mode", default=None)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--factor", type=float, default=4.0)
    p.add_argument("--no-checkpointing", action="store_true")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    sys.path[:0] = [str(path) for path in bench_e2e.SRC_PATHS]
    os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_cuda")
    import torch
    from transformers import AutoModelForCausalLM

    from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN

    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = bench_e2e.model_config(args.model, args.smoke)
    torch.manual_seed(0)
    with torch.device(device):
        state = {
            k: v.clone() for k, v in AutoModelForCausalLM.from_config(config).to(torch.bfloat16).state_dict().items()
        }
    g = torch.Generator().manual_seed(1234)
    data = [
        torch.randint(0, config.vocab_size, (args.batch, args.seq), generator=g).to(device) for _ in range(args.steps)
    ]

    def build():
        with torch.device(device):
            net = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
        net.load_state_dict(state)
        if not args.no_checkpointing:
            net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        net.train()
        return net

    def run(net, forward):
        loss = forward(input_ids=data[0], labels=data[0]).loss
        loss.backward()
        grads = {n: p.grad.float().clone() if p.grad is not None else None for n, p in net.named_parameters()}
        net.zero_grad(set_to_none=True)
        opt = torch.optim.AdamW(net.parameters(), lr=args.lr, fused=device == "cuda")
        losses = []
        for ids in data:
            step_loss = forward(input_ids=ids, labels=ids).loss
            step_loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(round(step_loss.item(), 5))
        return loss.item(), grads, losses

    stock = run(net := build(), net)
    MODEL_TYPE_TO_APPLY_LIGER_FN[config.model_type]()
    eager = run(net := build(), net)
    compiled = run(net := build(), torch.compile(net, backend=args.backend, mode=args.mode))
    print(f"first-step loss: stock {stock[0]:.5f}  patched eager {eager[0]:.5f}  patched compiled {compiled[0]:.5f}")
    for label, r in (("stock eager", stock), ("patched eager", eager), ("patched compiled", compiled)):
        print(f"losses over {args.steps} AdamW steps, {label}: {r[2]}")
    bad = 0
    for name, want in stock[1].items():
        e, c = eager[1][name], compiled[1][name]
        if want is None or c is None or e is None:
            if (want is None) != (c is None):
                print(f"{name}: gradient present in stock {want is not None}, compiled {c is not None}")
                bad += 1
            continue
        scale = want.abs().max().item() or 1.0
        err_e, err_c = (e - want).abs().max().item() / scale, (c - want).abs().max().item() / scale
        if err_c > args.factor * err_e + 1e-2:
            bad += 1
            print(f"{name}: compiled {err_c:.3e} vs eager {err_e:.3e} (relative max-abs error against stock)")
    print(f"{bad} parameters whose compiled gradient is off")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
