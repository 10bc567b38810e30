"""CUDA-specific paths of the interface 1.2 kernels the shared suite may not reach: ragged
multi-program grids, several positions per rotary program, chunked softmax/sparsemax rows,
the in-place gradient buffers, and the memory layout of outputs and gradients."""

import pytest
import torch

from liger_core.conformance.geglu_check import check_geglu
from liger_core.conformance.qwen2vl_mrope_check import check_qwen2vl_mrope
from liger_core.conformance.qwen2vl_mrope_check import make_inputs as mrope_inputs
from liger_core.conformance.rope_check import check_rope
from liger_core.conformance.rope_check import make_inputs as rope_inputs
from liger_core.conformance.softmax_check import check_softmax
from liger_core.conformance.softmax_check import make_inputs as softmax_inputs
from liger_core.conformance.sparsemax_check import check_sparsemax
from liger_core.conformance.sparsemax_check import make_inputs as sparsemax_inputs
from liger_core.conformance.swiglu_check import check_swiglu
from liger_core.conformance.swiglu_check import make_inputs as glu_inputs
from liger_ops_cuda import BACKEND, hardware
from liger_ops_cuda._rotary import plan_rotary
from liger_ops_cuda.softmax import plan_rows

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("check", (check_swiglu, check_geglu), ids=("swiglu", "geglu"))
def test_glu_ragged_multi_program_grid(monkeypatch, check, in_place):
    monkeypatch.setattr(hardware, "GLU_BLOCK", 64)  # 300 elements: 5 programs, the last partial
    check(BACKEND, *glu_inputs((3, 100), torch.bfloat16, DEVICE), in_place=in_place)


def test_glu_in_place_reuses_the_input_buffers():
    a, b, dy = glu_inputs((4, 50), torch.float32, DEVICE)
    a_leaf, b_leaf = a.clone().requires_grad_(), b.clone().requires_grad_()
    a_buf, b_buf = a_leaf * 1, b_leaf * 1  # buffers the caller owns, as a module's projections
    BACKEND.ops["swiglu"](a_buf, b_buf, True).backward(dy)
    # The gradients were written over the activations (no new activation-sized buffers).
    torch.testing.assert_close(a_buf.detach(), a_leaf.grad)
    torch.testing.assert_close(b_buf.detach(), b_leaf.grad)


def test_glu_in_place_misuse_is_an_error_not_silent():
    # Another node saved `a` (a * w needs it for grad_w): once the in-place backward has
    # overwritten it, that node's backward must fail rather than use gradients as activations.
    a, b, dy = glu_inputs((4, 50), torch.float32, DEVICE)
    a_leaf, b_leaf = a.clone().requires_grad_(), b.clone().requires_grad_()
    w = torch.randn(50, device=DEVICE, requires_grad=True)
    a_buf, b_buf = a_leaf * 1, b_leaf * 1
    y = BACKEND.ops["swiglu"](a_buf, b_buf, True)
    z = a_buf * w
    y.backward(dy)  # runs the in-place backward first
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_glu_zero_dim_input():
    a = torch.tensor(0.7, device=DEVICE, requires_grad=True)
    b = torch.tensor(-1.5, device=DEVICE, requires_grad=True)
    y = BACKEND.ops["geglu"](a, b)
    y.backward()
    assert y.shape == () and a.grad.shape == () and b.grad.shape == ()
    torch.testing.assert_close(y, torch.nn.functional.gelu(a.detach(), approximate="tanh") * b.detach())


def test_rotary_plan_for_llama_3_8b():
    plan = plan_rotary(32, 8, 128, 4096)
    assert (plan.q_heads, plan.k_heads, plan.half) == (32, 8, 64)
    assert plan.block_p * (32 + 8) * 128 <= max(hardware.ROPE_TILE_ELEMENTS, (32 + 8) * 128)


@pytest.mark.parametrize("unsqueeze_dim", (1, 2))
def test_rope_several_positions_per_program_ragged(monkeypatch, unsqueeze_dim):
    monkeypatch.setattr(hardware, "ROPE_TILE_ELEMENTS", 200)
    plan = plan_rotary(2, 1, 16, 2 * 7)
    assert plan.block_p == 4  # 14 positions: 4 programs, the last one half empty
    q, k, cos, sin, dq, dk = rope_inputs(2, 2, 1, 7, 16, torch.float16, DEVICE, unsqueeze_dim, True, cos_batch=2)
    check_rope(BACKEND, q, k, cos, sin, dq, dk, unsqueeze_dim=unsqueeze_dim)


def test_mrope_several_positions_per_program(monkeypatch):
    monkeypatch.setattr(hardware, "ROPE_TILE_ELEMENTS", 256)
    q, k, cos, sin, dq, dk = mrope_inputs(2, 3, 1, 5, 16, torch.float32, DEVICE, table="random")
    check_qwen2vl_mrope(BACKEND, q, k, cos, sin, dq, dk, [1, 3, 4])


def test_rope_outputs_and_gradients_keep_the_input_layout():
    # LLaMA: q is a (b, h, s, d) view of a (b, s, h, d) projection; the result and the gradient
    # stay in that memory order so the view's backward needs no copy.
    q, k, cos, sin, dq, dk = rope_inputs(2, 4, 2, 5, 16, torch.float32, DEVICE, transposed_storage=True)
    q, k = q.requires_grad_(), k.requires_grad_()
    q_out, k_out = BACKEND.ops["rope"](q, k, cos, sin)
    assert q_out.stride() == q.stride() and k_out.stride() == k.stride()
    torch.autograd.backward((q_out, k_out), (dq, dk))
    assert q.grad.stride() == q.stride() and k.grad.stride() == k.stride()


def test_rope_gradient_of_one_output_only():
    q, k, cos, sin, dq, _ = rope_inputs(1, 2, 1, 3, 8, torch.float32, DEVICE)
    q, k = q.requires_grad_(), k.requires_grad_()
    q_out, _ = BACKEND.ops["rope"](q, k, cos, sin)
    q_out.backward(dq)
    assert torch.count_nonzero(k.grad) == 0 and torch.count_nonzero(q.grad) > 0


def _force_chunks(monkeypatch, fused=64, chunk=32):
    monkeypatch.setattr(hardware, "SOFTMAX_MAX_FUSED_BLOCK", fused)
    monkeypatch.setattr(hardware, "SOFTMAX_CHUNK_BLOCK", chunk)


def test_row_plans():
    assert not plan_rows(64).chunked and plan_rows(64).block_m > 1
    wide = plan_rows(hardware.SOFTMAX_MAX_FUSED_BLOCK + 1)
    assert wide.chunked and wide.block_m == 1 and wide.block_n == hardware.SOFTMAX_CHUNK_BLOCK


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=("fp32", "bf16"))
def test_softmax_chunked_rows(monkeypatch, dtype):
    _force_chunks(monkeypatch)
    assert plan_rows(300).chunked
    check_softmax(BACKEND, *softmax_inputs((5, 300), dtype, DEVICE))


def test_softmax_chunked_row_starting_with_a_masked_chunk(monkeypatch):
    # The running max starts at -inf for a whole chunk; the rescaling must not produce NaN.
    _force_chunks(monkeypatch)
    x, dy = softmax_inputs((3, 100), torch.float32, DEVICE)
    x[:, :40] = float("-inf")
    x[1, 70:] = 500.0
    check_softmax(BACKEND, x, dy)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16), ids=("fp32", "fp16"))
def test_sparsemax_chunked_rows(monkeypatch, dtype):
    _force_chunks(monkeypatch)
    check_sparsemax(BACKEND, *sparsemax_inputs((3, 100), dtype, DEVICE))


def test_sparsemax_chunked_along_a_leading_dim(monkeypatch):
    _force_chunks(monkeypatch, fused=16, chunk=16)
    check_sparsemax(BACKEND, *sparsemax_inputs((40, 3), torch.float32, DEVICE), dim=0)


def test_sparsemax_exact_after_few_bisection_steps(monkeypatch):
    # The refinement steps, not the bisection, make tau exact: with only 8 bisection steps
    # (bracket 1/256 wide) the result still matches the oracle.
    monkeypatch.setattr(hardware, "SPARSEMAX_BISECTION_STEPS", 8)
    monkeypatch.setattr(hardware, "SPARSEMAX_REFINE_STEPS", 3)
    check_sparsemax(BACKEND, *sparsemax_inputs((64, 40), torch.float32, DEVICE))


@pytest.mark.parametrize("op", ("swiglu", "geglu"))
def test_gated_mlp_module_with_in_place_kernels(monkeypatch, op):
    """LigerSwiGLUMLP / LigerGEGLUMLP hand their projection outputs to the kernel with in_place:
    the gradients of x and of every weight still match the hand-written transformers MLP."""
    from types import SimpleNamespace

    from liger_core.nn import LigerGEGLUMLP, LigerSwiGLUMLP
    from liger_core.nn import mlp as mlp_module

    kernel = BACKEND.ops[op]
    monkeypatch.setattr(mlp_module, f"liger_{op}", lambda a, b, in_place=False: kernel(a, b, in_place))
    if op == "swiglu":
        module = LigerSwiGLUMLP(SimpleNamespace(hidden_size=24, intermediate_size=40, hidden_act="silu"))
        act = torch.nn.functional.silu
    else:
        module = LigerGEGLUMLP(SimpleNamespace(hidden_size=24, intermediate_size=40, hidden_act="gelu_pytorch_tanh"))
        act = lambda a: torch.nn.functional.gelu(a, approximate="tanh")  # noqa: E731
    module = module.to(DEVICE)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 24, generator=gen).to(DEVICE)
    dy = torch.randn(3, 5, 24, generator=gen).to(DEVICE)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    module(x1).backward(dy)
    p = dict(module.named_parameters())
    w = {k: v.detach().clone().requires_grad_() for k, v in p.items()}
    h = act(x2 @ w["gate_proj.weight"].t()) * (x2 @ w["up_proj.weight"].t())
    (h @ w["down_proj.weight"].t()).backward(dy)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)
    for k in p:
        torch.testing.assert_close(p[k].grad, w[k].grad, rtol=1e-4, atol=1e-5, msg=k)


def test_rope_unusual_strides():
    # Tables broadcast over batch (stride 0), cos and sin with different strides, q with a
    # non-unit last-dim stride, a non-contiguous incoming gradient: all read in place.
    q, k, cos, sin, dq, dk = rope_inputs(3, 4, 2, 5, 16, torch.float32, DEVICE, cos_batch=1)
    check_rope(BACKEND, q, k, cos.expand(3, 5, 16), sin.expand(3, 5, 16), dq, dk)
    wide = torch.randn(3, 4, 5, 32, generator=torch.Generator().manual_seed(5)).to(DEVICE)
    check_rope(BACKEND, wide[..., ::2], k, cos.transpose(1, 2).contiguous().transpose(1, 2), sin, dq, dk)
    dq_t = torch.randn(3, 5, 4, 16, generator=torch.Generator().manual_seed(6)).to(DEVICE).transpose(1, 2)
    check_rope(BACKEND, q, k, cos, sin, dq_t, dk)
