"""The `fused_moe_clamped_swiglu` op: the routed experts of GPT-OSS's mixture-of-experts MLP (biased
projections, gate and up columns interleaved, a clamped SwiGLU with a sigmoid slope and an offset
on the up half), declared once. The same experts without biases, with concatenated halves, slope 1
and no offset are DeepSeek-V4's, GLM-5-Next's and HunYuan-V4's; MiniMax-M3's are GPT-OSS's with
concatenated halves.

The routing is `fused_moe`'s (`liger_core.ops.fused_moe.route`), and so are the GEMMs; what is new
per backend is the activation epilogue (its clamp, slope and offset, the halves' column layout) and
the biases. The down projection's bias reaches every output through the gather-sum; its gradients
and the gate-up bias's are small GEMMs over the routing that every backend shares
(`down_bias_backward`, `gate_up_bias_grad`): vendor-neutral torch, like `route`.
"""

from __future__ import annotations

import math as pymath

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Op, bad, on_other_device, sample, set_item
from liger_core.ops import _samples as S
from liger_core.ops import fused_moe as moe
from liger_core.ops._checks import check_floating, check_same_device, check_same_dtype

OP_NAME = "fused_moe_clamped_swiglu"

# GPT-OSS's activation (transformers' GptOssConfig: swiglu_limit 7.0, swiglu_alpha 1.702, and
# the ``up + 1`` of GptOssExperts._apply_gate).
GPT_OSS_LIMIT = 7.0
GPT_OSS_ALPHA = 1.702
GPT_OSS_UP_OFFSET = 1.0


def fused_moe_clamped_swiglu(
    hidden_states: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_bias: torch.Tensor | None = None,
    down_bias: torch.Tensor | None = None,
    limit: float = GPT_OSS_LIMIT,
    alpha: float = GPT_OSS_ALPHA,
    up_offset: float = GPT_OSS_UP_OFFSET,
    interleaved: bool = True,
) -> torch.Tensor:
    """The routed experts of a mixture-of-experts MLP with a clamped SwiGLU, as transformers'
    ``GptOssExperts`` computes them (the defaults are GPT-OSS's). Per token ``t``
    (``x = hidden_states[t]``) and selection ``k`` (expert ``e = top_k_index[t, k]``)::

        h        = gate_up_proj[e] @ x + gate_up_bias[e]       # (2I,)
        gate, up = h[0::2], h[1::2]   if interleaved   else   h[:I], h[I:]
        gate     = min(gate, limit);  up = clamp(up, -limit, limit)
        act      = gate * sigmoid(alpha * gate) * (up + up_offset)
        y_tk     = down_proj[e] @ act + down_bias[e]
        out[t]   = sum_k top_k_weights[t, k] * y_tk

    The projections accumulate in float32; ``h`` is rounded to ``hidden_states.dtype`` once before
    the activation (the models hold it so, and the backward's clamp then sees the values the
    forward clamped) and ``act`` may be rounded once before the down projection. The K selections
    are summed in float32 and rounded once. A clamp passes the gradient where its input is inside
    the closed range (``torch.clamp``'s rule). A token may name one expert twice; an expert no token
    selects gets zero gradients, biases included.

    Args:
        hidden_states: ``(tokens, H)``, float32, bfloat16 or float16, any layout.
        gate_up_proj: ``(E, 2 * I, H)``, ``hidden_states``' dtype; its rows are the gate and up
            rows as ``interleaved`` says. GPT-OSS stores ``(E, H, 2 * I)``: pass its transpose
            (read in place, its gradient in the same layout, as for `fused_moe`).
        down_proj: ``(E, H, I)`` (GPT-OSS: the transpose of its ``(E, I, H)``).
        top_k_index: ``(tokens, K)`` integer expert ids in ``[0, E)``; anything else is a ValueError.
        top_k_weights: ``(tokens, K)`` routing weights, float32, bfloat16 or float16.
        gate_up_bias: ``(E, 2 * I)`` in ``hidden_states``' dtype (the rows' order as the weight's), or None.
        down_bias: ``(E, H)`` in ``hidden_states``' dtype, or None.
        limit: the clamp, a number > 0 (``math.inf``: no clamp).
        alpha: the sigmoid's slope (1: SiLU), a finite number.
        up_offset: added to the clamped up half (GPT-OSS: 1), a finite number.
        interleaved: gate and up rows alternate (GPT-OSS) rather than gate rows then up rows.

    Returns:
        ``(tokens, H)`` in ``hidden_states.dtype``. Backward gives the gradients of
        ``hidden_states``, both weights, both biases and ``top_k_weights`` (each in its input's
        dtype; ``grad_top_k_weights[t, k] = <grad_out[t], y_tk>``, the bias included).
        No input is modified.
    """
    check_args(
        hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights, gate_up_bias, down_bias,
        limit, alpha, up_offset, interleaved,
    )  # fmt: skip
    moe.check_expert_ids(top_k_index, gate_up_proj.shape[0], OP_NAME)
    return math(
        hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights, gate_up_bias, down_bias,
        limit, alpha, up_offset, interleaved,
    )  # fmt: skip


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def check_args(
    hidden_states: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_bias: torch.Tensor | None,
    down_bias: torch.Tensor | None,
    limit: float,
    alpha: float,
    up_offset: float,
    interleaved: bool,
) -> None:
    """`fused_moe`'s checks, then the biases' and the activation's."""
    op = OP_NAME
    moe.check_args(hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights, op=op)
    n_experts, two_i, hidden = gate_up_proj.shape
    for name, bias, shape in (
        ("gate_up_bias", gate_up_bias, (n_experts, two_i)),
        ("down_bias", down_bias, (n_experts, hidden)),
    ):
        if bias is None:
            continue
        check_floating("fused_moe_clamped_swiglu", name, bias)
        check_same_dtype(op, name, bias, "hidden_states", hidden_states)
        if tuple(bias.shape) != shape:
            raise ValueError(f"{op}: {name} must have shape {shape} to match the weights; got {tuple(bias.shape)}")
        check_same_device(op, hidden_states=hidden_states, **{name: bias})
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
        raise ValueError(f"{op}: limit must be a number > 0 (math.inf: no clamp); got {limit!r}")
    for name, value in (("alpha", alpha), ("up_offset", up_offset)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not pymath.isfinite(value):
            raise ValueError(f"{op}: {name} must be a finite number; got {value!r}")
    if not isinstance(interleaved, bool):
        raise TypeError(f"{op}: interleaved must be True or False; got {interleaved!r}")


def halves(h: torch.Tensor, interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(gate, up)`` columns of the gate-up projection's output ``h`` (..., 2I)."""
    if interleaved:
        return h[..., 0::2], h[..., 1::2]
    return h.chunk(2, dim=-1)


def activation(h: torch.Tensor, limit: float, alpha: float, up_offset: float, interleaved: bool) -> torch.Tensor:
    """The clamped SwiGLU of ``h`` (..., 2I), differentiable by autograd."""
    gate, up = halves(h, interleaved)
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return gate * torch.sigmoid(alpha * gate) * (up + up_offset)


def math(
    hidden_states: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_bias: torch.Tensor | None = None,
    down_bias: torch.Tensor | None = None,
    limit: float = GPT_OSS_LIMIT,
    alpha: float = GPT_OSS_ALPHA,
    up_offset: float = GPT_OSS_UP_OFFSET,
    interleaved: bool = True,
) -> torch.Tensor:
    """The formula (float64 for the oracle, else float32): `fused_moe.math`'s loop over every
    expert on every token, weighted by the token's summed routing weight for it."""
    compute = torch.float64 if hidden_states.dtype == torch.float64 else torch.float32
    x = hidden_states.to(compute)
    w_gate_up = gate_up_proj.to(compute)
    w_down = down_proj.to(compute)
    weights = top_k_weights.to(compute)
    out = torch.zeros_like(x)
    for e in range(w_gate_up.shape[0]):
        weight_e = (weights * (top_k_index == e).to(compute)).sum(-1, keepdim=True)  # (tokens, 1)
        h = x @ w_gate_up[e].t()
        if gate_up_bias is not None:
            h = h + gate_up_bias[e].to(compute)
        # Rounded to the input dtype once before the clamp, as the contract says (the clamp's
        # gradient mask then reads the values the forward clamped).
        h = h.to(hidden_states.dtype).to(compute)
        y = activation(h, limit, alpha, up_offset, interleaved) @ w_down[e].t()
        if down_bias is not None:
            y = y + down_bias[e].to(compute)
        out = out + weight_e * y
    return out.to(hidden_states.dtype)


# -- the biases' backward: small GEMMs over the routing, shared by every backend ----------------


def slot_experts(r: moe.Routing, shape: torch.Size) -> torch.Tensor:
    """``(tokens, K)`` int64: each selection's expert, as routed (bad ids clamped)."""
    return r.expert_of_row.long()[r.row_of_slot.long()].view(shape)


def down_bias_backward(
    dy: torch.Tensor, down_bias: torch.Tensor, r: moe.Routing, top_k_weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_down_bias, ds)``: ``grad_down_bias[e] = sum over selections (t, k) of e of
    w[t, k] * dy[t]`` and ``ds[t, k] = <dy[t], down_bias[e]>`` (float32, the routing weight's
    gradient from the bias), as two GEMMs against the (tokens, E) routing matrix: deterministic."""
    ids = slot_experts(r, top_k_weights.shape)
    n_experts = down_bias.shape[0]
    dy32 = dy.float()
    routed = (F.one_hot(ids, n_experts).float() * top_k_weights.float()[..., None]).sum(1)  # (tokens, E)
    grad_bias = (routed.t() @ dy32).to(down_bias.dtype)
    ds = (dy32 @ down_bias.float().t()).gather(1, ids)
    return grad_bias, ds


def gate_up_bias_grad(dpre: torch.Tensor, r: moe.Routing, gate_up_bias: torch.Tensor) -> torch.Tensor:
    """``grad_gate_up_bias[e]``: the sum of expert e's sorted rows of ``dpre`` (the gate-up
    projection's output gradient, (rows, 2I) in the weight's row order), as one GEMM of the
    (E, rows) one-hot expert matrix: deterministic, float32 accumulation."""
    n_experts = gate_up_bias.shape[0]
    one_hot = F.one_hot(r.expert_of_row.long(), n_experts).to(dpre.dtype)
    if dpre.dtype == torch.float32 or dpre.device.type == "cpu":
        return (one_hot.t().float() @ dpre.float()).to(gate_up_bias.dtype)
    return (one_hot.t() @ dpre).to(gate_up_bias.dtype)


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    bias=True,
    interleaved=True,
    limit=None,
    alpha=GPT_OSS_ALPHA,
    up_offset=GPT_OSS_UP_OFFSET,
    dtype=torch.float32,
    seed=0,
    eighths=False,
    **moe_args,
):
    """`fused_moe.args` plus the biases and the activation. ``limit`` None: 0.6 in float32 (a
    third of the gates and up values clamped, so the clamps' gradients are checked), 7.0
    (GPT-OSS's, no clamp at these scales) in the half dtypes, where rounding ``h`` could move a
    value across the limit that the float64 oracle keeps on the other side; unless ``eighths``:
    hidden_states in {-1, 0, 1}, the gate-up weight and bias on multiples of 1/8, so every gate
    and up value is a multiple of 1/8, exact in every dtype, and the limit (0.9375 by default) is
    none: the half dtypes clamp the elements the oracle clamps."""
    kw = moe.args(device, dtype=dtype, seed=seed, **moe_args)
    n_experts, two_i, hidden = kw["gate_up_proj"].shape
    g = S.gen(seed + 1)
    kw["gate_up_bias"] = S.to(device, dtype, S.normal((n_experts, two_i), g, 0.5)) if bias else None
    kw["down_bias"] = S.to(device, dtype, S.normal((n_experts, hidden), g, 0.5)) if bias else None
    if eighths:
        for name, low, high, scale in (("hidden_states", -1, 2, 1.0), ("gate_up_proj", -2, 3, 0.125),
                                       ("gate_up_bias", -4, 5, 0.125)):  # fmt: skip
            t = kw[name]
            if t is not None:
                t.copy_((torch.randint(low, high, t.shape, generator=g) * scale).to(t.dtype))
    if limit is None:
        limit = 0.9375 if eighths else 0.6 if dtype == torch.float32 else GPT_OSS_LIMIT
    return dict(kw, limit=limit, alpha=alpha, up_offset=up_offset, interleaved=interleaved)


def samples():
    # GPT-OSS's experts (interleaved, biased, transposed weights as it stores them), odd sizes, every dtype.
    yield from S.grid(args, dict(dtype=S.DTYPES), transposed_weights=True)
    # The clamps cutting in the half dtypes too, on values exact in every dtype.
    yield from S.grid(args, dict(dtype=S.DTYPES[1:]), transposed_weights=True, eighths=True, seed=11)
    # Concatenated halves without biases, slope 1, no offset (DeepSeek-V4's): also contiguous weights.
    yield from S.grid(
        args, dict(dtype=S.OPTION_DTYPES), bias=False, interleaved=False, alpha=1.0, up_offset=0.0, seed=1
    )
    # ... and with its clamps cutting in the half dtypes (the 1/8 grid).
    deepseek_v4 = dict(bias=False, interleaved=False, alpha=1.0, up_offset=0.0)
    yield from S.grid(args, dict(dtype=S.DTYPES[1:]), eighths=True, seed=12, **deepseek_v4)
    # No clamp at all; biases with concatenated halves (MiniMax-M3's layout).
    yield sample(args, limit=pymath.inf, interleaved=False, seed=2)
    # Routing: top-1; experts without tokens (zero bias gradients); a token naming one expert
    # twice; one token; an empty batch.
    yield sample(args, tokens=7, hidden=33, intermediate=17, experts=3, top_k=1, seed=3)
    yield sample(args, tokens=11, experts=6, routing="even", seed=4)
    yield sample(args, tokens=9, experts=3, top_k=3, routing="repeat", seed=5)
    yield sample(args, tokens=1, hidden=16, intermediate=8, experts=4, top_k=2, seed=6)
    yield sample(args, tokens=0)
    # Tiles wider than one block on every axis of every vendor's plan, in both weight layouts.
    yield sample(args, tokens=70, hidden=130, intermediate=72, experts=2, top_k=2, seed=7)
    yield sample(
        args, tokens=70, hidden=144, intermediate=80, experts=3, top_k=2, transposed_weights=True, seed=8,
        dtype=torch.bfloat16,
    )  # fmt: skip
    # The router's weights in float32 under bf16 experts; int32 ids; hidden_states as a view.
    yield sample(args, dtype=torch.bfloat16, weights_dtype=torch.float32, seed=9)
    yield sample(args, index_dtype=torch.int32, strided=True, seed=10)


def _transformers_eager(
    hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights, gate_up_bias=None, down_bias=None,
    limit=GPT_OSS_LIMIT, alpha=GPT_OSS_ALPHA, up_offset=GPT_OSS_UP_OFFSET, interleaved=True,
):  # fmt: skip
    # GptOssExperts.forward's eager loop (transformers 5.x), on the transposed views it stores.
    out = torch.zeros_like(hidden_states)
    n_experts = gate_up_proj.shape[0]
    with torch.no_grad():
        mask = F.one_hot(top_k_index, num_classes=n_experts).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    for (e,) in hit.tolist():
        k_pos, token = torch.where(mask[e])
        h = hidden_states[token] @ gate_up_proj[e].t() + gate_up_bias[e]
        y = activation(h, limit, alpha, up_offset, interleaved) @ down_proj[e].t() + down_bias[e]
        out.index_add_(0, token, (y * top_k_weights[token, k_pos, None]).to(out.dtype))
    return out


def _bench_args(s, dt, dev, gen):
    kw = moe._bench_args(s, dt, dev, gen)
    experts, _ = moe._moe_shape(s)
    # GPT-OSS's parameters: (E, H, 2I) and (E, I, H), passed as the transposed views the patch makes
    # every step (their gradients reach the parameters through the views' backward, as in training).
    for name, (rows, cols), fan_in in (
        ("gate_up_proj", (s.hidden, 2 * s.intermediate), s.hidden),
        ("down_proj", (s.intermediate, s.hidden), s.intermediate),
    ):
        stored = B.normal((experts, rows, cols), dt, dev, gen, scale=fan_in**-0.5)
        kw[name] = B.ViewOf(stored, lambda t: t.transpose(1, 2))
    kw["gate_up_bias"] = B.normal((experts, 2 * s.intermediate), dt, dev, gen, scale=0.5)
    kw["down_bias"] = B.normal((experts, s.hidden), dt, dev, gen, scale=0.5)
    return kw


def _transformers_grouped_mm() -> B.Peer:
    def load():
        from types import SimpleNamespace

        from transformers.integrations.moe import grouped_mm_experts_forward

        def call(hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights, gate_up_bias, down_bias, **_):
            # GptOssExperts' attributes (is_transposed: the (E, H, 2I) storage the views come from).
            module = SimpleNamespace(
                num_experts=gate_up_proj.shape[0],
                gate_up_proj=gate_up_proj.transpose(1, 2),
                gate_up_proj_bias=gate_up_bias,
                down_proj=down_proj.transpose(1, 2),
                down_proj_bias=down_bias,
                has_gate=True,
                has_bias=True,
                has_post_expert_norm=False,
                is_transposed=True,
                _is_expert_parallel=False,
            )
            module._apply_gate = lambda h: activation(h, GPT_OSS_LIMIT, GPT_OSS_ALPHA, GPT_OSS_UP_OFFSET, True)
            return grouped_mm_experts_forward(module, hidden_states, top_k_index, top_k_weights)

        return call

    return B.Peer(load, note="GptOssExperts, experts_implementation='grouped_mm'")


OP = Op(
    fused_moe_clamped_swiglu,
    since=(1, 9),
    math=math,
    grads=("hidden_states", "gate_up_proj", "down_proj", "top_k_weights", "gate_up_bias", "down_bias"),
    samples=samples,
    smoke=(
        sample(args, shape=(13, 40)),
        sample(args, shape=(40, 72), intermediate=40, experts=4, transposed_weights=True),
    ),
    error_sample=sample(args, tokens=4, hidden=16, intermediate=8, experts=5, top_k=2),
    errors=(
        bad(
            "index_range",
            ValueError,
            r"fused_moe_clamped_swiglu: top_k_index must be in \[0, 5\) \(the experts of gate_up_proj\); "
            r"1 are not \(first: 5\)",
            top_k_index=set_item((2, 1), 5),
        ),
        bad(
            "gate_up_hidden",
            ValueError,
            r"fused_moe_clamped_swiglu: gate_up_proj must have shape \(experts, 2 \* intermediate, hidden\) "
            r"with hidden = 16",
            gate_up_proj=lambda w: w[:, :, :15],
        ),
        bad(
            "gate_up_bias_shape",
            ValueError,
            r"gate_up_bias must have shape \(5, 16\) to match the weights; got \(5, 15\)",
            gate_up_bias=lambda b: b[:, :15],
        ),
        bad(
            "down_bias_shape",
            ValueError,
            r"down_bias must have shape \(5, 16\) to match the weights; got \(4, 16\)",
            down_bias=lambda b: b[:4],
        ),
        bad(
            "down_bias_dtype",
            TypeError,
            r"down_bias must have hidden_states' dtype float32; got bfloat16",
            down_bias=lambda b: b.bfloat16(),
        ),
        bad(
            "bias_int",
            TypeError,
            r"gate_up_bias must have dtype float32, bfloat16, float16; got int64",
            gate_up_bias=lambda b: b.long(),
        ),  # fmt: skip
        bad("limit_zero", ValueError, r"limit must be a number > 0 \(math.inf: no clamp\); got 0", limit=0),
        bad("limit_nan", ValueError, r"limit must be a number > 0.*got nan", limit=float("nan")),
        bad("alpha_inf", ValueError, r"alpha must be a finite number; got inf", alpha=pymath.inf),
        bad("up_offset_str", ValueError, r"up_offset must be a finite number; got '1'", up_offset="1"),
        bad("interleaved_int", TypeError, r"interleaved must be True or False; got 1", interleaved=1),
        bad(
            "mixed_devices",
            ValueError,
            r"one device.*hidden_states is on .*down_bias is on",
            down_bias=on_other_device,
        ),
    ),
    bench=B.BenchSpec(
        group="moe",
        axes=("tokens", "hidden", "intermediate", "experts", "top_k"),
        layouts={"routed": _bench_args},
        torch_fn=_transformers_eager,
        traffic=moe._traffic,
        describe=moe.OP.bench.describe,
        flops=moe._flops,
        peers={B.TRANSFORMERS_GROUPED_MM: _transformers_grouped_mm()},
    ),
)


# -- the epilogue's arguments, the same for every backend's kernels -----------------------------


def epilogue_args(
    intermediate: int,
    limit: float = 0.0,
    alpha: float = 1.0,
    up_offset: float = 0.0,
    interleaved: bool = False,
    clamped: bool = False,
) -> dict:
    """The keyword arguments every backend's gate-up and SwiGLU-backward kernels take for the
    activation: gate column ``j`` of the gate-up output is ``j * pair_step``, its up column
    ``j * pair_step + up_shift``; ``CLAMPED`` (a constexpr) picks this op's activation over
    `fused_moe`'s ``silu(gate) * up`` (the defaults), ``limit``, ``alpha`` and ``up_offset`` its
    constants."""
    return dict(
        pair_step=2 if interleaved else 1,
        up_shift=1 if interleaved else intermediate,
        limit=float(limit),
        alpha=float(alpha),
        up_offset=float(up_offset),
        CLAMPED=clamped,
    )
