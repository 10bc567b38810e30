"""GPT-OSS's MoE block (router + experts), patched against stock transformers (forward + backward,
bf16, one NVIDIA GPU), at GPT-OSS-20B's and GPT-OSS-120B's layer shapes: hidden 2880, experts of
intermediate 2880, top-4 of 32 or 128 experts; tokens of one micro-batch.

    bash benchmarks/run_e2e_gpu.sh setup
    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src:/tmp/e2e-site \\
        LIGER_EXTRA_BACKENDS=liger_ops_cuda OUT=DIR python benchmarks/bench_gpt_oss_moe.py [TOKENS ...]

Writes DIR/gpt_oss_moe.json. Per shape and token count, three rows:
- ``stock eager``: transformers' ``GptOssMLP`` with its experts' eager loop (the default).
- ``stock grouped_mm``: the same with ``experts_implementation="grouped_mm"`` (torch's grouped
  GEMMs, transformers' gathers, bias adds, activation and scatter around them).
- ``liger``: the patch's experts (`layers.clamped_experts_class`): fused_moe_clamped_swiglu on the
  transposed expert weights, read in place.
Per row: p50 of cuda-event time around a synchronized step, and the step's peak memory above
what was allocated before it (parameters and inputs excluded, gradients included); the patched
output's largest difference from stock eager's, relative to stock's largest element.
"""

import copy
import json
import os
import sys

import torch
from block_timing import measure
from transformers import GptOssConfig
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts, GptOssMLP

from liger_core.transformers.layers import clamped_experts_class

DEV, DT = "cuda", torch.bfloat16
SHAPES = {"gpt-oss-20b": dict(experts=32, top_k=4), "gpt-oss-120b": dict(experts=128, top_k=4)}
HIDDEN = INTERMEDIATE = 2880


def block(config, implementation, experts_class=None):
    # Each block its own config: the experts read _experts_implementation from it at every call.
    config = copy.deepcopy(config)
    config._experts_implementation = implementation
    module = GptOssMLP(config)
    if experts_class is not None:
        module.experts = experts_class(config)
    return module


def main(token_counts):
    rows = []
    for shape, moe in SHAPES.items():
        config = GptOssConfig(
            hidden_size=HIDDEN,
            intermediate_size=INTERMEDIATE,
            num_local_experts=moe["experts"],
            num_experts_per_tok=moe["top_k"],
        )
        torch.manual_seed(0)
        stock = block(config, "eager")
        with torch.no_grad():
            for name, p in stock.named_parameters():
                scale = 0.02 if "bias" in name else (INTERMEDIATE if "down_proj" in name else HIDDEN) ** -0.5
                p.normal_(0.0, scale)
        stock.to(DEV, DT)
        grouped = block(config, "grouped_mm").to(DEV, DT)
        liger = block(config, "eager", clamped_experts_class(GptOssExperts)).to(DEV, DT)
        for module in (grouped, liger):
            module.load_state_dict(stock.state_dict())
        for tokens in token_counts:
            x = torch.randn(1, tokens, HIDDEN, device=DEV, dtype=DT, requires_grad=True)
            dy = torch.randn(1, tokens, HIDDEN, device=DEV, dtype=DT)

            def step_of(module):
                def step():
                    out, _ = module(x)
                    out.backward(dy)

                return step

            with torch.no_grad():
                want, got = stock(x)[0].float(), liger(x)[0].float()
            rel = float((got - want).abs().max() / want.abs().max())
            for name, module in (("stock eager", stock), ("stock grouped_mm", grouped), ("liger", liger)):
                ms, mb = measure(step_of(module), [*module.parameters(), x])
                row = {"shape": shape, "tokens": tokens, "case": name, "ms": round(ms, 3), "peak_mb": round(mb, 1)}
                if name == "liger":
                    row["max_rel_diff_vs_stock"] = round(rel, 5)
                print(row, flush=True)
                rows.append(row)
        del stock, grouped, liger
        torch.cuda.empty_cache()
    out = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "shapes": {name: {"hidden": HIDDEN, "intermediate": INTERMEDIATE, **moe} for name, moe in SHAPES.items()},
        "timer": "forward + backward, p50 of 10 cuda-event timings around a synchronized step; peak_mb: "
        "max_memory_allocated during one step above what was allocated before it",
        "rows": rows,
    }
    with open(os.path.join(os.environ.get("OUT", "."), "gpt_oss_moe.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main([int(t) for t in sys.argv[1:]] or [4096, 8192])
