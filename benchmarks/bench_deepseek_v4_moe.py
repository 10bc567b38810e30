"""DeepSeek-V4's MoE block (router + routed experts + shared expert), patched against stock
transformers (forward + backward, bf16, one NVIDIA GPU), at DeepSeek-V4-Flash's layer shape
(transformers' ``DeepseekV4Config`` defaults: hidden 4096, 256 experts of intermediate 2048, top-6,
one shared expert, swiglu limit 10); tokens of one micro-batch.

    bash benchmarks/run_e2e_gpu.sh setup
    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src:/tmp/e2e-site \\
        LIGER_EXTRA_BACKENDS=liger_ops_cuda OUT=DIR python benchmarks/bench_deepseek_v4_moe.py [TOKENS ...]

Writes DIR/deepseek_v4_moe.json. One block (its 13 GB of expert weights held once), run three ways
per token count:
- ``stock eager``: transformers' ``DeepseekV4SparseMoeBlock`` with its experts' eager loop (the default).
- ``stock grouped_mm``: the same with ``experts_implementation="grouped_mm"`` (torch's grouped
  GEMMs, transformers' gathers, clamps, activation and scatter around them).
- ``liger``: the experts converted to the patch's class (`layers.clamped_experts_class`, layout
  ``deepseek_v4``): fused_moe_clamped_swiglu on the expert weights in place. The router and the
  shared expert (a clamped dense MLP) stay stock in every row.
Per row: p50 of cuda-event time around a synchronized step, and the step's peak memory above
what was allocated before it (parameters and inputs excluded, gradients included); the patched
output's largest difference from stock eager's, relative to stock's largest element.
"""

import json
import os
import sys

import torch
from block_timing import measure
from transformers import DeepseekV4Config
from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Experts, DeepseekV4SparseMoeBlock

from liger_core.transformers.layers import clamped_experts_class, prepare_live

DEV, DT = "cuda", torch.bfloat16


def main(token_counts):
    config = DeepseekV4Config(num_hidden_layers=4, mlp_layer_types=["moe"] * 4)
    hidden, intermediate = config.hidden_size, config.moe_intermediate_size
    torch.manual_seed(0)
    block = DeepseekV4SparseMoeBlock(config, layer_idx=0)
    with torch.no_grad():
        for name, p in block.named_parameters():
            fan_in = intermediate if "down_proj" in name else hidden
            p.normal_(0.0, fan_in**-0.5)
    block.to(DEV, DT)
    stock_experts, liger_experts = DeepseekV4Experts, clamped_experts_class(DeepseekV4Experts, "deepseek_v4")

    def use(case):
        # The experts read config._experts_implementation at every call.
        config._experts_implementation = "grouped_mm" if case == "stock grouped_mm" else "eager"
        block.experts.__class__ = liger_experts if case == "liger" else stock_experts
        if case == "liger":
            prepare_live(block.experts)
            assert block.experts._liger_fallback is None, block.experts._liger_fallback

    rows = []
    for tokens in token_counts:
        x = torch.randn(1, tokens, hidden, device=DEV, dtype=DT, requires_grad=True)
        dy = torch.randn(1, tokens, hidden, device=DEV, dtype=DT)

        def step():
            block(x).backward(dy)

        outputs = {}
        for case in ("stock eager", "stock grouped_mm", "liger"):
            use(case)
            with torch.no_grad():
                outputs[case] = block(x).float()
            ms, mb = measure(step, [*block.parameters(), x])
            row = {"tokens": tokens, "case": case, "ms": round(ms, 3), "peak_mb": round(mb, 1)}
            if case != "stock eager":
                want = outputs["stock eager"]
                row["max_rel_diff_vs_stock_eager"] = round(
                    float((outputs[case] - want).abs().max() / want.abs().max()), 5
                )
            print(row, flush=True)
            rows.append(row)
        del outputs
    out = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "shape": {
            "hidden": hidden,
            "intermediate": intermediate,
            "experts": config.n_routed_experts,
            "top_k": config.num_experts_per_tok,
            "shared_experts": config.n_shared_experts,
            "swiglu_limit": config.swiglu_limit,
        },
        "timer": "forward + backward, p50 of 10 cuda-event timings around a synchronized step; peak_mb: "
        "max_memory_allocated during one step above what was allocated before it",
        "rows": rows,
    }
    with open(os.path.join(os.environ.get("OUT", "."), "deepseek_v4_moe.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main([int(t) for t in sys.argv[1:]] or [4096, 8192])
