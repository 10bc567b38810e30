"""Probe for issue 14 (fused linear cross-entropy at tokens > hidden): what the three GEMMs of
one token chunk cost at liger-kernel's chunk (16384 x 2048 x 128256, bf16, 512-token chunks), and
whether grad_weight's per-chunk accumulation (K = the chunk) pays for its read-modify-write.

    python benchmarks/probes/flce_weight_grad_probe.py [CHUNK]            # cuBLAS mm / addmm, Triton GEMMs
    python benchmarks/probes/flce_weight_grad_probe.py [CHUNK] --steps    # cuBLAS GEMMs, then both FLCE steps

Triton GEMM modes: 0 writes C = A @ B; 1 loads the C tile before the K loop and adds it after;
2 starts the accumulator at C. `--steps` needs liger-kernel 0.8.5 importable and this project's
sources on PYTHONPATH (LIGER_EXTRA_BACKENDS=liger_ops_cuda). Results:
benchmarks/results/H200/flce-gemm-probe/README.md.
"""

import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

torch.manual_seed(0)
dev = "cuda"
dt = torch.bfloat16
print(torch.cuda.get_device_name(), flush=True)


@triton.jit
def gemm_acc(
    A,
    B,
    C,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    MODE: tl.constexpr,
):
    # MODE 0: C = A @ B; 1: C += A @ B with C loaded before the K loop and added after; 2: acc starts at C
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * num_n)
    first_m = group * GROUP_M
    gm = min(num_m - first_m, GROUP_M)
    pm = first_m + (pid % (GROUP_M * num_n)) % gm
    pn = (pid % (GROUP_M * num_n)) // gm
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    c_ptrs = C + rm[:, None].to(tl.int64) * scm + rn[None, :] * scn
    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    if MODE == 1:
        c_old = tl.load(c_ptrs, mask=cmask, other=0.0)
    if MODE == 2:
        acc = tl.load(c_ptrs, mask=cmask, other=0.0).to(tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    a_ptrs = A + rm[:, None].to(tl.int64) * sam + rk[None, :] * sak
    b_ptrs = B + rk[:, None] * sbk + rn[None, :] * sbn
    for _k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=rm[:, None] < M, other=0.0)
        b = tl.load(b_ptrs, mask=rn[None, :] < N, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    if MODE == 1:
        acc += c_old.to(tl.float32)
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=cmask)


def tri(a, b, c, mode, bm, bn, bk, gm, w, s):
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    gemm_acc[grid](
        a,
        b,
        c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=gm,
        MODE=mode,
        num_warps=w,
        num_stages=s,
    )


T, H, V, C = 16384, 2048, 128256, int(sys.argv[1]) if len(sys.argv) > 1 else 512
x = torch.randn(C, H, device=dev, dtype=dt)
g = torch.randn(C, V, device=dev, dtype=dt) * 0.01
w = torch.randn(V, H, device=dev, dtype=dt) * 0.02
gw = torch.zeros(V, H, device=dev, dtype=dt)
gw32 = torch.zeros(V, H, device=dev, dtype=torch.float32)
chunks = T // C
flop = 2 * C * H * V


def rep(name, f):
    try:
        ms = do_bench(f, warmup=50, rep=300)
    except Exception as e:
        print(f"{name:60s} failed: {type(e).__name__} {str(e)[:120]}", flush=True)
        return None
    print(
        f"{name:60s} {ms * 1000:8.1f} us/chunk  x{chunks} = {ms * chunks:6.2f} ms  {flop / ms / 1e9:6.0f} TFLOP/s",
        flush=True,
    )
    return ms


gt = g.t()
rep("cuBLAS mm gw = g.T @ x (beta 0)", lambda: torch.mm(gt, x, out=gw))
rep("cuBLAS addmm_ gw += g.T @ x (bf16 C)", lambda: gw.addmm_(gt, x))
rep("cuBLAS logits = x @ w.T", lambda: torch.mm(x, w.t()))
rep("cuBLAS gx = g @ w", lambda: torch.mm(g, w))
ref = gt.float() @ x.float()
if "--steps" in sys.argv:
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy as lk_flce

    from liger_core.functional import liger_fused_linear_cross_entropy

    xs = (torch.randn(T, H, device=dev, dtype=dt)).requires_grad_()
    wt = (torch.randn(V, H, device=dev, dtype=dt) * 0.02).requires_grad_()
    y = torch.randint(0, V, (T,), device=dev)

    def step(f):
        xs.grad = None
        wt.grad = None
        f(xs, wt, y).backward()

    for name, f in (
        ("ours", lambda a, b, c: liger_fused_linear_cross_entropy(a, b, c)),
        ("liger-kernel", lambda a, b, c: lk_flce(a, b, c)),
    ):
        for _ in range(3):
            step(f)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step(f)
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        ms = do_bench(lambda: step(f), warmup=5, rep=500)
        print(f"full step {name:14s} {ms:7.2f} ms  peak above inputs {peak:7.0f} MiB", flush=True)
    sys.exit(0)
for bm, bn, bk, gm, wa, st in [
    (128, 256, 64, 8, 8, 3),
    (128, 128, 64, 8, 4, 4),
    (128, 128, 64, 8, 8, 3),
    (256, 128, 64, 8, 8, 3),
    (128, 256, 32, 8, 8, 4),
]:
    for mode in (0, 1, 2):
        try:
            gw.zero_()
            tri(gt, x, gw, mode, bm, bn, bk, gm, wa, st)
            torch.cuda.synchronize()
            err = (gw.float() - ref).abs().max().item()
            rep(
                f"triton mode {mode} {bm}x{bn}x{bk} g{gm} w{wa} s{st} (err {err:.3g})",
                lambda: tri(gt, x, gw, mode, bm, bn, bk, gm, wa, st),
            )
        except Exception as e:
            print("fail", bm, bn, bk, mode, type(e).__name__, str(e)[:100], flush=True)
