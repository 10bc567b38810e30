"""Opaque or decomposed under torch.compile: one op at a time, in a compiled training step of a small model
of a family that uses it (issue 39: each op's `liger_core.compile.COMPILE_STRATEGY` decided by measurement).

Per family, the baseline is the strategy table as committed (``LIGER_COMPILE_DECOMPOSE`` naming the table's
decomposed ops); each op in ``--ops`` is then added to the decomposed set alone. Each setting compiles a fresh
patched model (same seed and weights: bf16, SDPA, ``torch.compile(model)`` default mode, no checkpointing)
and times ``model(input_ids, labels).loss.backward()`` (median of 10 after 2 warm-up steps, CUDA events,
`block_timing.measure`), with the peak memory above the step's start and the loss (each setting's loss must
equal the baseline's to bf16 noise: the two are the same computation).

    export PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src:/tmp/e2e-site
    export LIGER_EXTRA_BACKENDS=liger_ops_cuda
    python3 benchmarks/probes/compile_strategy.py --out compile_strategy.json   # about 3 minutes on an H200

``--smoke`` runs tiny configs on the CPU (Inductor's CPU backend, the reference backend): checks the script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# family -> (ops whose strategy is measured, config); a layer's shapes as in a ~1B model, two layers.
FAMILIES = {
    "nemotron": (
        ("layer_norm", "relu_squared"),
        dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=16, num_key_value_heads=8),
    ),
    "phi3": (
        ("fused_gate_up_swiglu",),
        dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=16, num_key_value_heads=8),
    ),
    "mixtral": (
        ("fused_moe",),
        dict(
            hidden_size=2048,
            intermediate_size=2048,
            num_attention_heads=16,
            num_key_value_heads=8,
            num_local_experts=8,
            num_experts_per_tok=2,
        ),
    ),
}
TINY = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)


def _config(family: str, smoke: bool):
    from transformers import AutoConfig

    kw = dict(FAMILIES[family][1])
    if smoke:
        kw.update(TINY, **({"intermediate_size": 32} if family == "mixtral" else {}))
    config = AutoConfig.for_model(family, num_hidden_layers=2, vocab_size=32064 if not smoke else 128, **kw)
    for token in ("pad_token_id", "bos_token_id", "eos_token_id"):  # Phi-3's defaults lie past a small vocabulary
        if isinstance(getattr(config, token, None), int) and getattr(config, token) >= config.vocab_size:
            setattr(config, token, 0)
    config._attn_implementation = "sdpa"
    config.use_cache = False
    return config


def run(family: str, decomposed: list[str], args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from liger_core import compile as C
    from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN, revert_liger_kernel_patches

    os.environ[C.DECOMPOSE_ENV] = ",".join(decomposed) if decomposed else "none"
    device = "cpu" if args.smoke else "cuda"
    dtype = torch.float32 if args.smoke else torch.bfloat16
    MODEL_TYPE_TO_APPLY_LIGER_FN[family]()
    try:
        torch.manual_seed(0)
        net = AutoModelForCausalLM.from_config(_config(family, args.smoke)).to(device, dtype).train()
        batch, seq = (2, 16) if args.smoke else (args.batch, args.seq)
        ids = torch.randint(0, net.config.vocab_size, (batch, seq), device=device, generator=None)
        torch._dynamo.reset()
        compiled = torch.compile(net)
        losses = []

        def step():
            loss = compiled(input_ids=ids, labels=ids).loss
            loss.backward()
            losses.append(loss.item())

        if args.smoke:
            for p in net.parameters():
                p.grad = None
            step()
            ms, peak = float("nan"), float("nan")
        else:
            from block_timing import measure

            ms, peak = measure(step, list(net.parameters()))
        breaks = dict(torch._dynamo.utils.counters["graph_break"])
    finally:
        revert_liger_kernel_patches()
        torch._dynamo.reset()
    return {
        "family": family,
        "decomposed": decomposed,
        "ms_p50": ms,
        "peak_mb": peak,
        "first_loss": losses[0],
        "graph_breaks": sum(breaks.values()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--out")
    a = p.parse_args()
    from liger_core import compile as C

    table = sorted(name for name, how in C.COMPILE_STRATEGY.items() if how == "decompose")
    rows = []
    for family in a.families.split(","):
        if family not in FAMILIES:
            p.error(f"--families: {family!r} is not one of {sorted(FAMILIES)}")
        ops = FAMILIES[family][0]
        base = run(family, table, a)
        rows.append(base)
        print(f"{family:10s} table {base['ms_p50']:8.2f} ms {base['peak_mb']:9.1f} MB loss {base['first_loss']:.5f}")
        for op in ops:
            r = run(family, sorted({*table, op}), a)
            r["op"], r["vs_table"] = op, r["ms_p50"] / base["ms_p50"]
            rows.append(r)
            print(
                f"{family:10s} +{op:22s} {r['ms_p50']:8.2f} ms ({r['vs_table']:.3f}x) {r['peak_mb']:9.1f} MB "
                f"loss {r['first_loss']:.5f} breaks {r['graph_breaks']}"
            )
    if a.out:
        Path(a.out).write_text(json.dumps({"batch": a.batch, "seq": a.seq, "table": table, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
