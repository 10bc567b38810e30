"""Llama 4's MoE block, patched against stock transformers (forward + backward, bf16, one NVIDIA GPU),
at Llama-4-Scout's layer shape: hidden 5120, 16 experts of intermediate 8192, top-1, a shared
expert of 8192; tokens of one micro-batch.

    bash benchmarks/run_e2e_gpu.sh setup
    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src:/tmp/e2e-site \\
        LIGER_EXTRA_BACKENDS=liger_ops_cuda OUT=DIR python benchmarks/bench_llama4_moe.py [TOKENS ...]

Writes DIR/llama4_moe.json. Three rows per token count:
- ``stock``: transformers' ``Llama4TextMoe`` (every expert on every token, unselected ones on zeros).
- ``liger``: the patch's block (`layers.scaled_input_moe_class`): fused_moe on the selected experts,
  the transposed expert weights read in place.
- ``fused_moe on copies``: the same fused_moe call on contiguous copies of the weights made inside
  the step (what fused_moe cost before it read transposed weights in place: its Function copied
  them and saved the copies), for the memory that in-place reading saves.
Per row: p50 of cuda-event time around a synchronized step, and the step's peak memory above
what was allocated before it (parameters and inputs excluded, gradients included).
"""

import json
import os
import sys

import torch
from block_timing import measure
from transformers import Llama4TextConfig
from transformers.models.llama4.modeling_llama4 import Llama4TextMoe

from liger_core.functional import liger_fused_moe
from liger_core.transformers.layers import scaled_input_moe_class

DEV, DT = "cuda", torch.bfloat16
HIDDEN, INTERMEDIATE, EXPERTS, TOP_K = 5120, 8192, 16, 1


def main(token_counts):
    torch.manual_seed(0)
    config = Llama4TextConfig(
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        intermediate_size_mlp=2 * INTERMEDIATE,
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        hidden_act="silu",
    )
    stock = Llama4TextMoe(config)
    with torch.no_grad():
        for name, p in stock.named_parameters():
            p.normal_(0.0, (INTERMEDIATE if "down_proj" in name else HIDDEN) ** -0.5)
    stock.to(DEV, DT)
    liger = scaled_input_moe_class(Llama4TextMoe)(config).to(DEV, DT)
    liger.load_state_dict(stock.state_dict())
    rows = []
    for tokens in token_counts:
        x = torch.randn(1, tokens, HIDDEN, device=DEV, dtype=DT, requires_grad=True)
        dy = torch.randn(tokens, HIDDEN, device=DEV, dtype=DT)

        def block_step(module):
            def step():
                out, _ = module(x)
                out.backward(dy)

            return step

        # Agreement on this input: the output relative to stock's largest element.
        with torch.no_grad():
            want, got = stock(x)[0].float(), liger(x)[0].float()
        rel = float((got - want).abs().max() / want.abs().max())
        experts = liger.experts
        flat = x.detach().view(tokens, HIDDEN)
        index = torch.topk(liger.router(flat)[1], TOP_K, dim=1).indices.reshape(-1, 1)
        ones = torch.ones(index.shape, device=DEV, dtype=DT)

        def op_step(copy):
            def step():
                gate_up, down = experts.gate_up_proj.transpose(1, 2), experts.down_proj.transpose(1, 2)
                if copy:
                    gate_up, down = gate_up.contiguous(), down.contiguous()
                liger_fused_moe(x.view(tokens, HIDDEN), gate_up, down, index, ones).backward(dy)

            return step

        cases = (
            ("stock Llama4TextMoe", block_step(stock), list(stock.parameters())),
            ("liger Llama4TextMoe", block_step(liger), list(liger.parameters())),
            ("fused_moe on the transposed weights (in place)", op_step(False), list(experts.parameters())),
            ("fused_moe on copies of the weights", op_step(True), list(experts.parameters())),
        )
        for name, step, params in cases:
            ms, mb = measure(step, [*params, x])
            row = {"tokens": tokens, "case": name, "ms": round(ms, 3), "peak_mb": round(mb, 1)}
            if name.startswith("liger"):
                row["max_rel_diff_vs_stock"] = round(rel, 5)
            print(row, flush=True)
            rows.append(row)
    out = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "shape": {"hidden": HIDDEN, "intermediate": INTERMEDIATE, "experts": EXPERTS, "top_k": TOP_K},
        "timer": "forward + backward, p50 of 10 cuda-event timings around a synchronized step; peak_mb: "
        "max_memory_allocated during one step above what was allocated before it",
        "rows": rows,
    }
    with open(os.path.join(os.environ.get("OUT", "."), "llama4_moe.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main([int(t) for t in sys.argv[1:]] or [4096, 8192])
