"""rotary.py's own paths (rope, qwen2vl_mrope): several positions per program, the memory
layout of outputs and gradients, unusual strides of q, cos/sin and the incoming gradients."""

import pytest
import torch

from liger_core.conformance import assert_close, loosest
from liger_core.conformance.check import check, declaration, make_args
from liger_ops_cuda import hardware, rotary
from liger_ops_cuda.rotary import pair_bits, plan_rotary


def _randn(shape, seed, device):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(device)


def _check_as_given(backend, op, args, upstream):
    """`check`'s comparison with the float64 oracle, on the tensors exactly as given: `check`
    copies its inputs (a copy of a broadcast or sliced view is contiguous) and draws contiguous
    incoming gradients, so the layouts below would never reach the kernels through it."""
    decl = declaration(op)
    bound = decl.bind(args)
    before = {k: v.clone() for k, v in bound.items() if isinstance(v, torch.Tensor)}
    upstream_before = [g.clone() for g in upstream]
    call = {
        k: v.detach().requires_grad_(k in decl.grads) if isinstance(v, torch.Tensor) else v for k, v in bound.items()
    }
    outs = backend.op(op)(*call.values())
    torch.autograd.backward(outs, upstream)
    args64 = {
        k: v.detach().cpu().double().requires_grad_(k in decl.grads) if isinstance(v, torch.Tensor) else v
        for k, v in bound.items()
    }
    outs64 = decl.math(*args64.values())
    torch.autograd.backward(outs64, [g.detach().cpu().double() for g in upstream])
    tol = loosest(*(v.dtype for v in bound.values() if isinstance(v, torch.Tensor) and v.is_floating_point()))
    for name, out, out64 in zip(decl.outputs, outs, outs64):
        assert_close(out, out64, tol, f"{op} {name}")
    for name in decl.grads:
        assert call[name].grad.dtype == bound[name].dtype, f"{op} grad_{name} dtype"
        assert_close(call[name].grad, args64[name].grad, tol, f"{op} grad_{name}")
    for name, t in before.items():
        assert torch.equal(bound[name], t), f"{op} modified its input {name}"
    assert all(torch.equal(g, g0) for g, g0 in zip(upstream, upstream_before)), f"{op} modified an incoming gradient"


def test_plan_for_llama_3_8b():
    plan = plan_rotary(32, 8, 128, 4096)
    assert (plan.q_heads, plan.k_heads, plan.half) == (32, 8, 64)
    assert plan.block_p * (32 + 8) * 128 <= max(hardware.ROPE_TILE_ELEMENTS, (32 + 8) * 128)


@pytest.mark.parametrize("unsqueeze_dim", (1, 2))
def test_rope_several_positions_per_program_ragged(backend, device, monkeypatch, unsqueeze_dim):
    monkeypatch.setattr(hardware, "ROPE_TILE_ELEMENTS", 200)
    plan = plan_rotary(2, 1, 16, 2 * 7)
    assert plan.block_p == 4  # 14 positions: 4 programs, the last one half empty
    args = make_args(
        "rope", device, shape=(2, 2, 1, 7, 16), dtype=torch.float16, unsqueeze_dim=unsqueeze_dim, transposed=True,
        cos_batch=2,
    )  # fmt: skip
    check(backend, "rope", args)


def test_mrope_several_positions_per_program(backend, device, monkeypatch):
    monkeypatch.setattr(hardware, "ROPE_TILE_ELEMENTS", 256)
    args = make_args("qwen2vl_mrope", device, shape=(2, 3, 1, 5, 16), table="random", section=[1, 3, 4])
    check(backend, "qwen2vl_mrope", args)


def test_rope_outputs_and_gradients_keep_the_input_layout(backend, device):
    # LLaMA: q is a (b, h, s, d) view of a (b, s, h, d) projection; the result and the gradient
    # stay in that memory order so the view's backward needs no copy.
    args = make_args("rope", device, shape=(2, 4, 2, 5, 16), transposed=True)
    q, k = args["q"].requires_grad_(), args["k"].requires_grad_()
    q_out, k_out = backend.op("rope")(q, k, args["cos"], args["sin"], None, 1)
    assert q_out.stride() == q.stride() and k_out.stride() == k.stride()
    torch.autograd.backward((q_out, k_out), (_randn(q.shape, 1, device), _randn(k.shape, 2, device)))
    assert q.grad.stride() == q.stride() and k.grad.stride() == k.stride()


def test_rope_gradient_of_one_output_only(backend, device):
    args = make_args("rope", device, shape=(1, 2, 1, 3, 8))
    q, k = args["q"].requires_grad_(), args["k"].requires_grad_()
    q_out, _ = backend.op("rope")(q, k, args["cos"], args["sin"], None, 1)
    q_out.backward(_randn(q.shape, 1, device))
    assert torch.count_nonzero(k.grad) == 0 and torch.count_nonzero(q.grad) > 0


def test_rope_unusual_strides(backend, device):
    # Tables broadcast over batch (stride 0), cos and sin with different strides, q with a
    # non-unit last-dim stride, a non-contiguous incoming gradient: all read in place.
    args = make_args("rope", device, shape=(3, 4, 2, 5, 16))
    q, k, cos, sin = args["q"], args["k"], args["cos"], args["sin"]
    dq, dk = _randn(q.shape, 1, device), _randn(k.shape, 2, device)
    _check_as_given(backend, "rope", dict(args, cos=cos.expand(3, 5, 16), sin=sin.expand(3, 5, 16)), (dq, dk))
    wide = _randn((3, 4, 5, 32), 5, device)
    cos_t = cos.transpose(1, 2).contiguous().transpose(1, 2)
    _check_as_given(backend, "rope", dict(args, q=wide[..., ::2], cos=cos_t), (dq, dk))
    dq_t = _randn((3, 5, 4, 16), 6, device).transpose(1, 2)
    _check_as_given(backend, "rope", args, (dq_t, dk))


def test_llama4_rope_pair_words_only_where_every_pair_is_one_aligned_word():
    x = torch.zeros(2, 3, 4, 16, dtype=torch.bfloat16)
    assert pair_bits(x, x) == 32
    assert pair_bits(x.float(), x.float()) == 64
    assert pair_bits(x, x.float()) == 0  # one word size for all four tensors
    assert pair_bits(x.double(), x.double()) == 0
    assert pair_bits(x[..., 1:15], x) == 0  # pairs start at an odd element
    assert pair_bits(x[..., ::2], x) == 0  # element stride 2
    wide = torch.zeros(2, 3, 4, 17, dtype=torch.bfloat16)[..., :16]
    assert pair_bits(wide, x) == 0  # odd head stride
    assert pair_bits(x.transpose(1, 2), x) == 32  # a transposed view of whole pairs


@pytest.mark.parametrize("words", (True, False), ids=("pair_words", "element_loads"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_llama4_rope_both_interleaved_paths(backend, device, monkeypatch, words, dtype):
    # The pair-word path takes every aligned layout; the element path (each element and its
    # partner loaded) the rest: forced here on the same contiguous shapes.
    if not words:
        monkeypatch.setattr(rotary, "pair_bits", lambda *tensors: 0)
    for shape in ((2, 7, 4, 2, 16), (3, 17, 6, 1, 64)):
        check(backend, "llama4_rope", make_args("llama4_rope", device, shape=shape, dtype=dtype))
