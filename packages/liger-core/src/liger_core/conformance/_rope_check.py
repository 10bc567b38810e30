"""Inputs and the check shared by the rotary embeddings (`rope`, `qwen2vl_mrope`)."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest


def _layout(batch, heads, seq, dim, unsqueeze_dim, transposed_storage, gen, dtype):
    """A q/k tensor with logical shape for ``unsqueeze_dim``; ``transposed_storage`` stores it
    with heads and seq swapped (LLaMA's ``view(b, s, h, d).transpose(1, 2)``)."""
    logical = (batch, heads, seq, dim) if unsqueeze_dim == 1 else (batch, seq, heads, dim)
    if not transposed_storage:
        return torch.randn(logical, generator=gen).to(dtype)
    stored = (logical[0], logical[2], logical[1], logical[3])
    return torch.randn(stored, generator=gen).to(dtype).transpose(1, 2)


def tables(shape_lead, seq, dim, dtype, kind, gen, position_offset=0):
    """cos/sin of shape ``(*shape_lead, seq, dim)``. ``kind="llama"``: cat(freqs, freqs) of
    distinct positions per leading row; ``"random"``: unrelated halves (the contract uses both)."""
    if kind == "random":
        return (
            torch.randn(*shape_lead, seq, dim, generator=gen).to(dtype),
            torch.randn(*shape_lead, seq, dim, generator=gen).to(dtype),
        )
    rows = 1
    for n in shape_lead:
        rows *= n
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    pos = torch.arange(seq, dtype=torch.float64)[None, :] * (1 + torch.arange(rows)[:, None]) + position_offset
    freqs = pos[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1).reshape(*shape_lead, seq, dim)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def make_qk(
    batch, q_heads, k_heads, seq, dim, dtype, device, unsqueeze_dim=1, transposed_storage=False, k_dtype=None, seed=0
):
    """``(q, k, dq, dk)`` laid out for ``unsqueeze_dim``; incoming grads contiguous."""
    gen = torch.Generator().manual_seed(seed)
    q = _layout(batch, q_heads, seq, dim, unsqueeze_dim, transposed_storage, gen, dtype)
    k = _layout(batch, k_heads, seq, dim, unsqueeze_dim, transposed_storage, gen, k_dtype or dtype)
    dq = torch.randn(q.shape, generator=gen).to(q.dtype)
    dk = torch.randn(k.shape, generator=gen).to(k.dtype)
    return tuple(t.to(device) for t in (q, k, dq, dk))


def check_rotary(op: str, fn, math, q, k, cos, sin, dq, dk, extra_args: tuple) -> None:
    """Run ``fn(q, k, cos, sin, *extra_args)`` forward and backward against ``math``."""
    q_in = q.clone().requires_grad_()
    k_in = k.clone().requires_grad_()
    cos_in, sin_in, dq_in, dk_in = cos.clone(), sin.clone(), dq.clone(), dk.clone()
    q_out, k_out = fn(q_in, k_in, cos_in, sin_in, *extra_args)
    torch.autograd.backward((q_out, k_out), (dq_in, dk_in))

    q64 = q.detach().cpu().double().requires_grad_()
    k64 = k.detach().cpu().double().requires_grad_()
    q64_out, k64_out = math(q64, k64, cos.cpu().double(), sin.cpu().double())
    torch.autograd.backward((q64_out, k64_out), (dq.cpu().double(), dk.cpu().double()))

    for name, x, out, out64, x_in, x64 in (("q", q, q_out, q64_out, q_in, q64), ("k", k, k_out, k64_out, k_in, k64)):
        tol = loosest(x.dtype, cos.dtype, sin.dtype)
        assert out.dtype == x.dtype and out.device == x.device, f"{op} {name}_out dtype/device"
        assert_close(out, out64, tol, f"{op} {name}_out")
        assert x_in.grad is not None and x_in.grad.dtype == x.dtype, f"{op} grad_{name} missing or wrong dtype"
        assert_close(x_in.grad, x64.grad, tol, f"{op} grad_{name}")
        assert torch.equal(x_in.detach(), x), f"{op} modified its input {name}"
    assert torch.equal(cos_in, cos) and torch.equal(sin_in, sin), f"{op} modified cos/sin"
    assert torch.equal(dq_in, dq) and torch.equal(dk_in, dk), f"{op} modified the incoming gradients"
