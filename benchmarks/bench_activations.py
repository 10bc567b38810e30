"""SwiGLU, GEGLU, RoPE and M-RoPE on an NVIDIA GPU: copy-bandwidth fractions, peers, tile plans.

Complements ``liger bench`` (which times every op against its peers at model shapes) with
what the interface-1.2 acceptance needs in one run on one device:

- the device's copy bandwidth (device-to-device ``copy_``, read + write), measured here;
- device time of every provider under CUDA-graph replay (host launch cost drops out), for
  forward and full (forward + backward); backward is full minus forward;
- GB/s from the bytes each op must move (inputs read once, outputs written once) and that
  as a fraction of copy bandwidth;
- RoPE in both memory layouts models hand it: q/k as LLaMA's ``(b, s, h, d)`` projection
  viewed ``(b, h, s, d)`` ("llama"), and contiguous ``(b, h, s, d)`` ("bhsd");
- the acceptance checks: SwiGLU/GEGLU full >= 85% of copy bandwidth and no slower than the
  best peer; RoPE forward >= 75% of copy bandwidth and full <= 0.5x liger-kernel's time.

``--tune`` first sweeps the kernels' tile plans (elementwise block and warps; rotary
positions per program and warps) and prints the fastest, to set in ``hardware.py``.

    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src \\
        python benchmarks/bench_activations.py --tune \\
        --out benchmarks/results/H200/activations-tuning/activations_H200.json

liger-kernel 0.8.5 is a peer when importable (e.g. on PYTHONPATH). ``--smoke`` runs the
plumbing on CPU in the Triton interpreter at tiny sizes (wall clock; numbers meaningless).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import time
from importlib import metadata

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# The source tree's backend has no entry point: the registry loads it from this variable (set
# here unless the caller set it, as benchmarks/run_gpu.sh does).
os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_cuda")

import torch
import triton

from liger_core import __version__ as core_version
from liger_core.functional import liger_geglu, liger_qwen2vl_mrope, liger_rope, liger_swiglu
from liger_core.registry import serving
from liger_ops_cuda import BACKEND, glu, hardware, rotary

QUANTILES = [0.2, 0.5, 0.8]
SMOKE = False


# -- timing ------------------------------------------------------------------------------------


def device_time(call, grads_to_none=()):
    """(p20, p50, p80) ms of ``call`` replayed from a CUDA graph; wall clock in --smoke."""

    def fresh():
        for t in grads_to_none:
            t.grad = None
        call()

    if SMOKE:
        fresh()
        t0 = time.perf_counter()
        fresh()
        ms = (time.perf_counter() - t0) * 1e3
        return ms, ms, ms
    fresh()
    torch.cuda.synchronize()
    return tuple(triton.testing.do_bench_cudagraph(fresh, quantiles=QUANTILES, rep=200))


def copy_bandwidth(nbytes, device):
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    ms = device_time(lambda: dst.copy_(src))[1]
    return 2 * nbytes / (ms * 1e-3) / 1e9


# -- providers ---------------------------------------------------------------------------------


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def torch_rope(q, k, cos, sin, unsqueeze_dim=1):
    # transformers' apply_rotary_pos_emb
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def torch_mrope(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    # transformers' apply_multimodal_rotary_pos_emb
    sec = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sec, dim=-1))], dim=-1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sec, dim=-1))], dim=-1)
    return torch_rope(q, k, cos, sin, unsqueeze_dim)


@functools.cache
def _liger_kernel():
    """(version, SwiGLU, GEGLU, RoPE, M-RoPE autograd Functions) of liger-kernel, or None."""
    try:
        from liger_kernel.ops.geglu import LigerGELUMulFunction
        from liger_kernel.ops.qwen2vl_mrope import LigerQwen2VLMRopeFunction
        from liger_kernel.ops.rope import LigerRopeFunction
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except ImportError as e:
        print(f"liger-kernel not importable ({e}): no liger-kernel column", file=sys.stderr)
        return None
    try:
        ver = metadata.version("liger-kernel")
    except metadata.PackageNotFoundError:  # from PYTHONPATH without its dist-info
        ver = getattr(sys.modules["liger_kernel"], "__version__", "?")
    return ver, LigerSiLUMulFunction, LigerGELUMulFunction, LigerRopeFunction, LigerQwen2VLMRopeFunction


def glu_providers(op):
    act = torch.nn.functional.silu if op == "swiglu" else (lambda a: torch.nn.functional.gelu(a, approximate="tanh"))
    ours = liger_swiglu if op == "swiglu" else liger_geglu

    def eager(a, b):
        return act(a) * b

    provs = {
        "liger": lambda a, b: ours(a, b),
        # What LigerSwiGLUMLP / LigerGEGLUMLP run: the projections' buffers take the gradients.
        "liger in_place": lambda a, b: ours(a, b, True),
        "torch": eager,
    }
    if not SMOKE:
        provs["torch.compile"] = torch.compile(eager)
    lk = _liger_kernel()
    if lk:
        fn = lk[1] if op == "swiglu" else lk[2]
        provs[f"liger-kernel {lk[0]}"] = lambda a, b: fn.apply(a, b)
    return provs


def rope_providers(op, section):
    if op == "rope":
        provs = {"liger": lambda q, k, c, s: liger_rope(q, k, c, s), "torch": torch_rope}
    else:
        provs = {
            "liger": lambda q, k, c, s: liger_qwen2vl_mrope(q, k, c, s, section),
            "torch": lambda q, k, c, s: torch_mrope(q, k, c, s, section),
        }
    if not SMOKE:
        provs["torch.compile"] = torch.compile(provs["torch"])
    lk = _liger_kernel()
    if lk:
        if op == "rope":
            provs[f"liger-kernel {lk[0]}"] = lambda q, k, c, s: lk[3].apply(q, k, c, s)
        else:
            provs[f"liger-kernel {lk[0]}"] = lambda q, k, c, s: lk[4].apply(q, k, c, s, section)
    return provs


# -- inputs ------------------------------------------------------------------------------------


def rope_inputs(args, layout, dtype, device, mrope):
    b, s, hq, hk, d = args.batch, args.tokens // args.batch, args.heads, args.kv_heads, args.head_dim
    if layout == "llama":  # (b, s, h, d) projections viewed as (b, h, s, d)
        q = torch.randn(b, s, hq, d, device=device, dtype=dtype).transpose(1, 2)
        k = torch.randn(b, s, hk, d, device=device, dtype=dtype).transpose(1, 2)
    else:
        q = torch.randn(b, hq, s, d, device=device, dtype=dtype)
        k = torch.randn(b, hk, s, d, device=device, dtype=dtype)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    angles = torch.outer(torch.arange(s, device=device, dtype=torch.float32), inv_freq).repeat(1, 2)
    lead = (3, b) if mrope else (1,)
    angles = angles.expand(*lead, s, d).contiguous()
    return q, k, angles.cos().to(dtype), angles.sin().to(dtype)


def mrope_section(d):
    half = d // 2
    t = max(1, half // 4)
    h = (half - t) // 2
    return [t, h, half - t - h]


# -- measurements ------------------------------------------------------------------------------


def time_provider(fn, inputs, grads_out):
    """forward and full (forward + backward) device times; backward = full - forward."""
    # Fresh leaves per provider (liger-kernel's RoPE rotates its input buffers in place and
    # its GLU backward writes into them); clone() keeps the layout (LLaMA's transposed views).
    leaves = [t.detach().clone().requires_grad_() for t in inputs[:2]]
    rest = inputs[2:]
    with torch.no_grad():
        fwd = device_time(lambda: fn(*leaves, *rest))

    def full():
        out = fn(*leaves, *rest)
        outs = out if isinstance(out, tuple) else (out,)
        torch.autograd.backward(outs, grads_out)

    return fwd, device_time(full, grads_to_none=leaves)


def run_op(op, args, dtype, device, bw, rows):
    if op in ("swiglu", "geglu"):
        n = args.tokens * args.intermediate
        a = torch.randn(args.tokens, args.intermediate, device=device, dtype=dtype)
        b = torch.randn_like(a)
        dc = torch.randn_like(a)
        e = dtype.itemsize
        traffic = {"forward": 3 * n * e, "backward": 5 * n * e}
        cases = [("-", glu_providers(op), (a, b), (dc,))]
    else:
        mrope = op == "qwen2vl_mrope"
        section = mrope_section(args.head_dim)
        cases = []
        for layout in ("llama", "bhsd"):
            q, k, cos, sin = rope_inputs(args, layout, dtype, device, mrope)
            grads = (torch.randn_like(q), torch.randn_like(k))
            cases.append((layout, rope_providers(op, section), (q, k, cos, sin), grads))
        e = dtype.itemsize
        qk = 2 * (q.numel() + k.numel()) * e
        tables = 2 * cos.numel() * e  # cos and sin, read once
        traffic = {"forward": qk + tables, "backward": qk + tables}
    traffic["full"] = traffic["forward"] + traffic["backward"]
    for layout, provs, inputs, grads in cases:
        for name, fn in provs.items():
            try:
                fwd, full = time_provider(fn, inputs, grads)
            except Exception as ex:  # noqa: BLE001 - recorded, the run goes on
                print(f"  {op} {layout} {name}: {type(ex).__name__}: {ex}", file=sys.stderr)
                continue
            times = {"forward": fwd[1], "full": full[1], "backward": full[1] - fwd[1]}
            for mode, ms in times.items():
                gbps = traffic[mode] / (ms * 1e-3) / 1e9 if ms > 0 else None
                rows.append(
                    dict(
                        op=op,
                        layout=layout,
                        provider=name,
                        mode=mode,
                        ms=ms,
                        ms_p20=fwd[0] if mode == "forward" else full[0] if mode == "full" else None,
                        ms_p80=fwd[2] if mode == "forward" else full[2] if mode == "full" else None,
                        bytes=traffic[mode],
                        gbps=gbps,
                        copy_fraction=gbps / bw if gbps else None,
                    )
                )


def acceptance(rows):
    """The interface-1.2 targets, evaluated on this run's rows."""

    def get(op, provider, mode, layout="-"):
        return next(
            (r for r in rows if (r["op"], r["provider"], r["mode"], r["layout"]) == (op, provider, mode, layout)), None
        )

    def peers(op, mode, layout="-"):
        return [
            r
            for r in rows
            if r["op"] == op
            and r["mode"] == mode
            and r["layout"] == layout
            and not r["provider"].startswith("liger ")
            and r["provider"] != "liger"
        ]

    checks = []
    for op in ("swiglu", "geglu"):
        for name in ("liger", "liger in_place"):
            r = get(op, name, "full")
            if not r:
                continue
            checks.append(
                (
                    f"{op} full ({name}) >= 85% of copy bandwidth",
                    r["copy_fraction"] >= 0.85,
                    f"{100 * r['copy_fraction']:.0f}%",
                )
            )
            ps = peers(op, "full")
            if ps:
                best = min(ps, key=lambda p: p["ms"])
                checks.append(
                    (
                        f"{op} full ({name}) no slower than the best peer ({best['provider']})",
                        r["ms"] <= best["ms"],
                        f"{r['ms'] / best['ms']:.2f}x",
                    )
                )
    for layout in ("llama", "bhsd"):
        r = get("rope", "liger", "forward", layout)
        if r:
            checks.append(
                (
                    f"rope forward [{layout}] >= 75% of copy bandwidth",
                    r["copy_fraction"] >= 0.75,
                    f"{100 * r['copy_fraction']:.0f}%",
                )
            )
        lk = [p for p in peers("rope", "full", layout) if p["provider"].startswith("liger-kernel")]
        mine = get("rope", "liger", "full", layout)
        if lk and mine:
            checks.append(
                (
                    f"rope full [{layout}] <= 0.5x liger-kernel",
                    mine["ms"] <= 0.5 * lk[0]["ms"],
                    f"{mine['ms'] / lk[0]['ms']:.2f}x",
                )
            )
    return checks


# -- tuning ------------------------------------------------------------------------------------


def tune(args, dtype, device, bw):
    n = args.tokens * args.intermediate
    a = torch.randn(n, device=device, dtype=dtype)
    b, dc = torch.randn_like(a), torch.randn_like(a)
    e = dtype.itemsize
    print(f"tuning the elementwise GLU kernels on {n} elements (copy {bw:.0f} GB/s)")
    for act, name in ((glu.SILU, "swiglu"), (glu.GELU_TANH, "geglu")):
        res = []
        for block in (1024, 2048, 4096, 8192):
            for warps in (4, 8, 16):
                if SMOKE and (block > 1024 or warps > 4):
                    continue
                old = hardware.GLU_NUM_WARPS
                hardware.GLU_NUM_WARPS = warps
                try:
                    f = device_time(lambda: glu.glu_forward(a, b, act, block))[1]
                    bk = device_time(lambda: glu.glu_backward(dc, a, b, act, False, block))[1]
                finally:
                    hardware.GLU_NUM_WARPS = old
                res.append((f + bk, block, warps, f, bk))
        for _, block, warps, f, bk in sorted(res)[:5]:
            print(
                f"  {name} block={block:5d} warps={warps:2d}: "
                f"fwd {f * 1e3:7.1f} us ({100 * 3 * n * e / (f * 1e-3) / 1e9 / bw:3.0f}% copy)  "
                f"bwd {bk * 1e3:7.1f} us ({100 * 5 * n * e / (bk * 1e-3) / 1e9 / bw:3.0f}% copy)"
            )
    print(f"  default: GLU_BLOCK={hardware.GLU_BLOCK} GLU_NUM_WARPS={hardware.GLU_NUM_WARPS}")

    for layout in ("llama", "bhsd"):
        q, k, cos, sin = rope_inputs(args, layout, dtype, device, False)
        dq, dk = torch.randn_like(q), torch.randn_like(k)
        n_pos = q.shape[0] * q.shape[2]
        base = rotary.plan_rotary(q.shape[1], k.shape[1], q.shape[3], n_pos)
        traffic = 2 * (q.numel() + k.numel()) * e + 2 * cos.numel() * e
        res = []
        for block_p in (1, 2, 4, 8):
            for warps in (1, 2, 4, 8, 16):
                if SMOKE and (block_p > 2 or warps > 2):
                    continue
                plan = rotary.RotaryPlan(block_p, base.q_heads, base.k_heads, base.half, warps)
                f = device_time(lambda: rotary.rotary(q, k, cos, sin, 1, plan=plan))[1]
                bk = device_time(lambda: rotary.rotary(dq, dk, cos, sin, 1, backward=True, plan=plan))[1]
                res.append((f + bk, block_p, warps, f, bk))
        print(f"tuning rotary [{layout}] {tuple(q.shape)} / {tuple(k.shape)}; default plan {base}")
        for _, block_p, warps, f, bk in sorted(res)[:5]:
            print(
                f"  positions/program={block_p} warps={warps:2d}: fwd {f * 1e3:7.1f} us "
                f"({100 * traffic / (f * 1e-3) / 1e9 / bw:3.0f}% copy)  bwd {bk * 1e3:7.1f} us"
            )


# -- main --------------------------------------------------------------------------------------


def main():
    global SMOKE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=14336)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--ops", default="swiglu,geglu,rope,qwen2vl_mrope")
    ap.add_argument("--out", default=None, help="JSON path")
    ap.add_argument("--tune", action="store_true", help="sweep the tile plans first")
    ap.add_argument("--smoke", action="store_true", help="CPU + Triton interpreter at tiny sizes")
    args = ap.parse_args()
    SMOKE = args.smoke
    if SMOKE:
        args.tokens, args.intermediate, args.heads, args.kv_heads, args.head_dim = 6, 40, 4, 2, 16
        device = "cpu"
        device_name = "cpu (Triton interpreter smoke run)"
    else:
        device = "cuda"
        device_name = torch.cuda.get_device_name()
    os.environ.setdefault("LIGER_BACKEND", BACKEND.name)  # the interpreter smoke run: force it
    ops = [op.strip() for op in args.ops.split(",")]
    for op in ops:  # "liger" must be this package's kernels, not the reference fallback
        served = serving(op, device)
        if served.backend != BACKEND.name:
            why = served.error or f"backend {served.backend!r} serves it"
            sys.exit(f"{op} on {device} would not run {BACKEND.distribution}'s kernels: {why}")
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)

    bw = copy_bandwidth(2 * 2**30 if not SMOKE else 2**20, device)
    print(f"{device_name}: copy bandwidth {bw:.0f} GB/s (2 GiB device-to-device, read + write)")
    if args.tune:
        tune(args, dtype, device, bw)

    rows = []
    for op in ops:
        run_op(op, args, dtype, device, bw, rows)

    print(f"\n{'op':14} {'layout':6} {'mode':9} {'provider':22} {'ms':>9} {'GB/s':>7} {'copy%':>6}")
    for r in rows:
        gb = f"{r['gbps']:7.0f} {100 * r['copy_fraction']:5.0f}%" if r["gbps"] else "      -      -"
        print(f"{r['op']:14} {r['layout']:6} {r['mode']:9} {r['provider']:22} {r['ms']:9.4f} {gb}")
    checks = acceptance(rows)
    print("\nacceptance:")
    for what, ok, value in checks:
        print(f"  [{'pass' if ok else 'FAIL'}] {what}: {value}")
    if args.out:
        result = dict(
            benchmark="activations",
            device=device_name,
            dtype=args.dtype,
            shapes=dict(
                tokens=args.tokens,
                intermediate=args.intermediate,
                batch=args.batch,
                heads=args.heads,
                kv_heads=args.kv_heads,
                head_dim=args.head_dim,
            ),
            copy_bandwidth_gbps=bw,
            timer="CUDA-graph replay (triton.testing.do_bench_cudagraph), p50; backward = full - forward",
            versions=dict(
                torch=torch.__version__,
                triton=triton.__version__,
                liger_core=core_version,
                liger_ops_cuda=BACKEND.version,
                python=platform.python_version(),
            ),
            plans=dict(
                GLU_BLOCK=hardware.GLU_BLOCK,
                GLU_NUM_WARPS=hardware.GLU_NUM_WARPS,
                ROPE_TILE_ELEMENTS=hardware.ROPE_TILE_ELEMENTS,
                ROPE_ELEMENTS_PER_WARP=hardware.ROPE_ELEMENTS_PER_WARP,
            ),
            acceptance=[dict(check=w, passed=ok, value=v) for w, ok, v in checks],
            rows=rows,
        )
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
