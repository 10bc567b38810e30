"""The model patches' RoPE functions and Phi-3 MLP against stock transformers' (forward + backward,
bf16, one NVIDIA GPU), inputs as the models' attention passes them (transposed views and slices
of the projections), tables from realistic angles.

    bash benchmarks/run_e2e_gpu.sh setup
    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src:/tmp/e2e-site \\
        LIGER_EXTRA_BACKENDS=liger_ops_cuda OUT=DIR python benchmarks/bench_patch_functions.py

Writes DIR/patch_functions.json. Device time (profiler, kernels only) is what a training step
pays when the host runs ahead of the GPU; the synchronized wall time adds host launch cost,
which dominates at these sizes.
"""

import json
import os

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import Phi3Config
from transformers.models.deepseek_v2.modeling_deepseek_v2 import apply_rotary_emb as dsv2_rope
from transformers.models.deepseek_v3.modeling_deepseek_v3 import apply_rotary_pos_emb_interleave as dsv3_rope
from transformers.models.gemma4.modeling_gemma4 import apply_rotary_pos_emb as gemma4_rope
from transformers.models.glm4.modeling_glm4 import apply_rotary_pos_emb as glm4_rope
from transformers.models.llama4.modeling_llama4 import apply_rotary_emb as llama4_rope
from transformers.models.phi3.modeling_phi3 import Phi3MLP

from liger_core.transformers.layers import phi3_mlp_class, rope_function

DEV, DT = "cuda", torch.bfloat16
BATCH, SEQ = 2, 4096


def wall_ms(fn, n=20):
    """Synchronized call time (host launch cost included), p50."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(n):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[n // 2]


def gpu_ms(fn, n=10):
    """Device time per call: the sum of the CUDA kernels' times (host launch cost excluded)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages()) / 1000 / n


def case(name, make_args, stock, liger):
    def step(fn):
        def run():
            outs = fn(*make_args())
            torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])

        return run

    ws, wl = wall_ms(step(stock)), wall_ms(step(liger))
    gs, gl = gpu_ms(step(stock)), gpu_ms(step(liger))
    row = {
        "case": name,
        "wall_ms": {"stock": round(ws, 4), "liger": round(wl, 4)},
        "gpu_ms": {"stock": round(gs, 4), "liger": round(gl, 4)},
        "gpu_speedup": round(gs / gl, 2),
        "wall_speedup": round(ws / wl, 2),
    }
    print(row, flush=True)
    return row


def tables(width):
    angles = torch.rand(BATCH, SEQ, width, device=DEV) * 100
    return torch.cat([angles.cos()] * 2, -1).to(DT), torch.cat([angles.sin()] * 2, -1).to(DT)


def leaf(*shape):
    return torch.randn(*shape, device=DEV, dtype=DT, requires_grad=True)


def main():
    torch.manual_seed(0)
    b, s = BATCH, SEQ
    rows = []
    # GLM-4-9B attention: 32 q heads, 2 kv heads, head_dim 128, partial rotary 0.5.
    qp, kp = leaf(b, s, 32 * 128), leaf(b, s, 2 * 128)
    cos, sin = tables(32)

    def glm4_args():
        return qp.view(b, s, 32, 128).transpose(1, 2), kp.view(b, s, 2, 128).transpose(1, 2), cos, sin

    name = "glm4 rope (2x4096, 32/2 heads, 128, rotary 64)"
    rows.append(case(name, glm4_args, glm4_rope, rope_function(glm4_rope, "interleaved")))
    # DeepSeek-V2/V3 MLA: 32 heads of nope 128 + rope 64; single-head k from the compressed projection.
    qp, kvp = leaf(b, s, 32 * 192), leaf(b, s, 512 + 64)
    freqs = torch.polar(torch.ones(b, s, 32, device=DEV), torch.rand(b, s, 32, device=DEV) * 100)

    def mla(*table):
        def args():
            return (qp.view(b, s, 32, 192).transpose(1, 2)[..., 128:], kvp[..., 512:].view(b, 1, s, 64), *table)

        return args

    name = "deepseek_v2 rope (32 heads, rope 64)"
    rows.append(case(name, mla(freqs), dsv2_rope, rope_function(dsv2_rope, "complex_heads_major")))
    name = "deepseek_v3 interleaved rope (32 heads, rope 64)"
    rows.append(case(name, mla(*tables(32)), dsv3_rope, rope_function(dsv3_rope, "deinterleaved")))
    # Llama 4 Scout attention: 40 q heads, 8 kv heads, head_dim 128, (batch, seq, heads, dim) views.
    qp, kp = leaf(b, s, 40 * 128), leaf(b, s, 8 * 128)
    freqs4 = torch.polar(torch.ones(b, s, 64, device=DEV), torch.rand(b, s, 64, device=DEV) * 100)

    def llama4_args():
        return qp.view(b, s, 40, 128), kp.view(b, s, 8, 128), freqs4

    rows.append(case("llama4 rope (40/8 heads, 128)", llama4_args, llama4_rope, rope_function(llama4_rope, "complex")))
    # Gemma 4 attention: q and k rotated in separate calls, (batch, seq, heads, dim) views; 8 q heads of 256.
    qp = leaf(b, s, 8 * 256)
    cos4, sin4 = tables(128)

    def gemma4_args():
        return qp.view(b, s, 8, 256), cos4, sin4

    def one(fn):
        return lambda x, cos, sin: (fn(x, cos, sin, unsqueeze_dim=2),)

    name = "gemma4 rope, one tensor (8 heads, 256)"
    rows.append(case(name, gemma4_args, one(gemma4_rope), one(rope_function(gemma4_rope, "one_tensor"))))
    # Phi-3-mini MLP: hidden 3072, intermediate 8192, 8192 tokens: stock class vs the patch's subclass.
    cfg = Phi3Config(hidden_size=3072, intermediate_size=8192, hidden_act="silu")
    stock_mlp = Phi3MLP(cfg).to(DEV, DT)
    liger_mlp = phi3_mlp_class(Phi3MLP)(cfg).to(DEV, DT)
    liger_mlp.load_state_dict(stock_mlp.state_dict())
    x = leaf(b, s, 3072)
    name = "phi3 MLP (8192 tokens, 3072 -> 8192)"
    rows.append(case(name, lambda: (x,), lambda x: (stock_mlp(x),), lambda x: (liger_mlp(x),)))
    out = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "timer": (
            "forward + backward of one call, gradients accumulating into the projections' leaves; wall_ms: cuda "
            "events around a synchronized call (host launch cost included), p50 of 20; gpu_ms: profiler sum of "
            "kernel times per call, mean of 10"
        ),
        "rows": rows,
    }
    with open(os.path.join(os.environ.get("OUT", "."), "patch_functions.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
