"""Probe for issue 14: at liger-kernel's chunk memory, token-major chunks (three GEMMs per chunk of
tokens, grad_weight accumulated chunk by chunk) against a two-pass vocabulary-major skeleton (four
GEMMs per chunk of the vocabulary: the logits twice, grad_input accumulated, each grad_weight slice
written once), cuBLAS GEMMs plus one elementwise pass per logits buffer standing in for the loss
kernels; and this project's fused linear cross-entropy op at the same shapes (bf16).

    PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src LIGER_EXTRA_BACKENDS=liger_ops_cuda \\
        OUT=DIR python benchmarks/probes/flce_layout_probe.py

Writes DIR/flce_layout_probe.json. liger-kernel's chunk: next_power_of_2(ceil(tokens / ceil(vocab /
hidden))) tokens; the vocabulary-major skeleton takes as many vocabulary rows as fit the same
number of logits. Skeleton rows time the buffers already allocated (their peak column is not
the memory they need); the op's peak is above its inputs and includes its gradients.
"""

import json
import os

import torch
import triton

from liger_core.functional import liger_fused_linear_cross_entropy as flce

DEV, DT = "cuda", torch.bfloat16
# issue 14's five training shapes (tokens, hidden, vocab)
SHAPES = (
    (16384, 2048, 128256),
    (16384, 4096, 128256),
    (16384, 1152, 262144),
    (16384, 2048, 151936),
    (8192, 4096, 128256),
)


def median_ms(fn, reps=5):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[reps // 2]


def liger_chunk(tokens, hidden, vocab):
    return triton.next_power_of_2(triton.cdiv(tokens, triton.cdiv(vocab, hidden)))


def token_major(x, w, gx, gw, chunk):
    tokens, vocab = x.shape[0], w.shape[0]
    buf = torch.empty(chunk * vocab, device=DEV, dtype=DT)

    def run():
        for i, s in enumerate(range(0, tokens, chunk)):
            xc = x[s : s + chunk]
            logits = buf[: xc.shape[0] * vocab].view(xc.shape[0], vocab)
            torch.mm(xc, w.t(), out=logits)
            logits.mul_(0.5)  # the loss kernels' read-modify-write of the chunk
            torch.mm(logits, w, out=gx[s : s + chunk])
            if i == 0:
                torch.mm(logits.t(), xc, out=gw)
            else:
                gw.addmm_(logits.t(), xc)

    return run


def vocab_major(x, w, gx, gw, rows, transposed):
    tokens, vocab = x.shape[0], w.shape[0]
    buf = torch.empty(rows * tokens, device=DEV, dtype=DT)

    def logits_of(s):
        wc = w[s : s + rows]
        n = wc.shape[0]
        if transposed:  # (rows, tokens): L^T = W_c x^T
            lt = buf[: n * tokens].view(n, tokens)
            torch.mm(wc, x.t(), out=lt)
            return wc, lt, lt.t()
        logits = buf[: n * tokens].view(tokens, n)
        torch.mm(x, wc.t(), out=logits)
        return wc, logits, logits

    def run():
        for s in range(0, vocab, rows):  # pass 1: the logits and a read of them (the lse partials)
            logits_of(s)[1].amax()
        for i, s in enumerate(range(0, vocab, rows)):  # pass 2: the logits again, then the gradients
            wc, stored, g = logits_of(s)
            stored.mul_(0.5)
            if i == 0:
                torch.mm(g, wc, out=gx)
            else:
                gx.addmm_(g, wc)
            torch.mm(g.t(), x, out=gw[s : s + wc.shape[0]])

    return run


def main():
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "timer": "cuda events, p50 of 5"}
    res["rows"] = []
    for tokens, hidden, vocab in SHAPES:
        gen = torch.Generator(device=DEV).manual_seed(0)
        x = torch.randn(tokens, hidden, device=DEV, dtype=DT, generator=gen)
        w = torch.randn(vocab, hidden, device=DEV, dtype=DT, generator=gen) * hidden**-0.5
        y = torch.randint(0, vocab, (tokens,), device=DEV, generator=gen)
        chunk = liger_chunk(tokens, hidden, vocab)
        budget = chunk * vocab  # liger-kernel's logits elements
        row = {"shape": [tokens, hidden, vocab], "liger_chunk_tokens": chunk, "budget_MiB": budget * 2 / 2**20}
        gx, gw = torch.empty_like(x), torch.empty_like(w)
        ours_chunk = max(128, (64 * 2**20 // vocab) // 128 * 128)  # this project's FLCE_CHUNK_ELEMENTS rule
        cands = {f"token_major_C{chunk}": token_major(x, w, gx, gw, chunk)}
        if ours_chunk != chunk:
            cands[f"token_major_C{ours_chunk}"] = token_major(x, w, gx, gw, ours_chunk)
        rows = max(256, budget // tokens // 256 * 256)
        cands[f"vocab_major_Vc{rows}"] = vocab_major(x, w, gx, gw, rows, False)
        cands[f"vocab_major_T_Vc{rows}"] = vocab_major(x, w, gx, gw, rows, True)
        xr, wr = x.detach().requires_grad_(), w.detach().requires_grad_()

        def op(xr=xr, wr=wr, y=y):
            xr.grad = wr.grad = None
            flce(xr, wr, y).backward()

        cands["ours_op"] = op
        for name, fn in cands.items():
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            ms = median_ms(fn)
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            row[name] = {"ms": round(ms, 3), "peak_MiB_above": round(peak, 1)}
        row["gemm_bound_ms_at_650"] = round(6 * tokens * hidden * vocab / 650e9, 2)
        print(json.dumps(row), flush=True)
        res["rows"].append(row)
        del x, w, gx, gw, xr, wr, cands
        torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "."), "flce_layout_probe.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
