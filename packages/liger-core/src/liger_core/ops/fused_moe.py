"""The `fused_moe` op: the experts of a mixture-of-experts MLP (SwiGLU experts, weights stacked
as transformers 5.x's experts modules hold them), declared once.

The routing bookkeeping every backend shares is here (vendor-neutral torch, like
vocab_parallel_cross_entropy's collectives): `route` sorts the ``(token, k)`` selections by
expert, counts the bad expert ids and cuts each expert's rows into tiles of ``block_m`` rows,
with no host synchronisation: the tile count stays on the device (the grids launch its upper
bound, known from the shapes; the surplus programs exit at once) and the bad-id count reaches
the host behind an event, checked once the forward's kernels are queued. A backend runs its
grouped GEMM kernels over those tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Op, bad, on_other_device, sample, set_item
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device, check_same_dtype
from liger_core.ops._losses import INDEX_DTYPES, PendingBadCount

OP_NAME = "fused_moe"


def fused_moe(
    hidden_states: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
) -> torch.Tensor:
    """The routed experts of a SwiGLU mixture-of-experts MLP, as transformers 5.x's experts modules
    (``Qwen3MoeExperts``, ``MixtralExperts``, ``DeepseekV3Experts``, ...) compute them. Per token
    ``t`` (``x = hidden_states[t]``) and selection ``k`` (expert ``e = top_k_index[t, k]``)::

        gate, up = (gate_up_proj[e] @ x).chunk(2)          # rows [0, I) and [I, 2I)
        y_tk     = down_proj[e] @ (silu(gate) * up)
        out[t]   = sum_k top_k_weights[t, k] * y_tk

    The K selections are summed in float32 and rounded once (transformers' grouped-GEMM experts
    sum them the same way; its eager loop adds them one expert at a time in the output dtype).
    The projections accumulate in float32; a backend may round ``silu(gate) * up`` to
    ``hidden_states.dtype`` once (the down projection's input, as the models hold it). A token
    may name one expert twice (both selections count); an expert no token selects gets zero
    gradients.

    Args:
        hidden_states: ``(tokens, H)``, float32, bfloat16 or float16, any layout.
        gate_up_proj: ``(E, 2 * I, H)``, ``hidden_states``' dtype: each expert's gate rows, then
            its up rows (transformers' ``gate_up_proj`` parameter). Any layout; a contiguous
            tensor or the transpose of a contiguous ``(E, H, 2 * I)`` one (how Llama 4 stores its
            experts) is read in place, and its gradient comes back in that same layout.
        down_proj: ``(E, H, I)``, ``hidden_states``' dtype (transformers' ``down_proj``; likewise
            in place when contiguous or the transpose of a contiguous ``(E, I, H)``).
        top_k_index: ``(tokens, K)`` integer expert ids in ``[0, E)``; anything else is a
            ValueError (counted on the device; a backend reads the count once its kernels are
            queued, which run on clamped ids meanwhile).
        top_k_weights: ``(tokens, K)`` routing weights, float32, bfloat16 or float16 (the router's
            dtype; it need not be ``hidden_states``').

    Returns:
        ``(tokens, H)`` in ``hidden_states.dtype``. Backward gives ``grad_hidden_states``,
        ``grad_gate_up_proj``, ``grad_down_proj`` and ``grad_top_k_weights`` (each in its input's
        dtype; ``grad_top_k_weights[t, k] = <grad_out[t], y_tk>``); ``top_k_index`` gets none.
        No input is modified.
    """
    check_args(hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights)
    check_expert_ids(top_k_index, gate_up_proj.shape[0])
    return math(hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights)


def check_args(
    hidden_states: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    op: str = OP_NAME,
) -> None:
    """Raise a clear error for arguments outside the contract (the expert ids' values:
    `check_expert_ids`, or `route`); ``op`` names the op in the message."""
    try:
        if (
            hidden_states.dtype in FLOAT_DTYPES
            and hidden_states.ndim == 2
            and gate_up_proj.ndim == 3
            and gate_up_proj.dtype == hidden_states.dtype
            and down_proj.dtype == hidden_states.dtype
            and gate_up_proj.shape[1] % 2 == 0
            and gate_up_proj.shape[0] > 0
            and gate_up_proj.shape[1] > 0
            and gate_up_proj.shape[2] == hidden_states.shape[1]
            and down_proj.shape == (gate_up_proj.shape[0], hidden_states.shape[1], gate_up_proj.shape[1] // 2)
            and top_k_index.dtype in INDEX_DTYPES
            and top_k_index.ndim == 2
            and top_k_index.shape[0] == hidden_states.shape[0]
            and top_k_index.shape[1] > 0
            and top_k_weights.dtype in FLOAT_DTYPES
            and top_k_weights.shape == top_k_index.shape
            and gate_up_proj.device == hidden_states.device
            and down_proj.device == hidden_states.device
            and top_k_index.device == hidden_states.device
            and top_k_weights.device == hidden_states.device
        ):
            return
    except (AttributeError, TypeError):
        pass
    check_floating(op, "hidden_states", hidden_states)
    if hidden_states.ndim != 2:
        raise ValueError(f"{op}: hidden_states must be 2-D (tokens, hidden); got shape {tuple(hidden_states.shape)}")
    n_tokens, hidden = hidden_states.shape
    for name, w in (("gate_up_proj", gate_up_proj), ("down_proj", down_proj)):
        check_floating(op, name, w)
        check_same_dtype(op, name, w, "hidden_states", hidden_states)
    if gate_up_proj.ndim != 3 or gate_up_proj.shape[2] != hidden or gate_up_proj.shape[1] % 2:
        raise ValueError(
            f"{op}: gate_up_proj must have shape (experts, 2 * intermediate, hidden) with hidden = {hidden} "
            f"(hidden_states.shape[1]); got {tuple(gate_up_proj.shape)}"
        )
    n_experts, intermediate = gate_up_proj.shape[0], gate_up_proj.shape[1] // 2
    if n_experts == 0 or intermediate == 0:
        raise ValueError(f"{op}: gate_up_proj needs at least one expert and one row; got {tuple(gate_up_proj.shape)}")
    if down_proj.shape != (n_experts, hidden, intermediate):
        raise ValueError(
            f"{op}: down_proj must have shape (experts, hidden, intermediate) = ({n_experts}, {hidden}, "
            f"{intermediate}) to match gate_up_proj; got {tuple(down_proj.shape)}"
        )
    if not isinstance(top_k_index, torch.Tensor) or top_k_index.dtype not in INDEX_DTYPES:
        got = str(top_k_index.dtype).removeprefix("torch.") if isinstance(top_k_index, torch.Tensor) else "not a tensor"
        raise TypeError(f"{op}: top_k_index must have an integer dtype (int64 or int32); got {got}")
    if top_k_index.ndim != 2 or top_k_index.shape[0] != n_tokens or top_k_index.shape[1] == 0:
        raise ValueError(
            f"{op}: top_k_index must have shape (tokens, top_k) with tokens = {n_tokens} and top_k >= 1; "
            f"got {tuple(top_k_index.shape)}"
        )
    check_floating(op, "top_k_weights", top_k_weights)
    if top_k_weights.shape != top_k_index.shape:
        raise ValueError(
            f"{op}: top_k_weights must have top_k_index's shape {tuple(top_k_index.shape)}; "
            f"got {tuple(top_k_weights.shape)}"
        )
    check_same_device(
        op,
        hidden_states=hidden_states,
        gate_up_proj=gate_up_proj,
        down_proj=down_proj,
        top_k_index=top_k_index,
        top_k_weights=top_k_weights,
    )


def _bad_ids(top_k_index: torch.Tensor, n_experts: int) -> torch.Tensor:
    return (top_k_index < 0) | (top_k_index >= n_experts)


def _raise_bad_ids(top_k_index: torch.Tensor, n_experts: int, n_bad: int, op: str = OP_NAME) -> None:
    first = int(top_k_index[_bad_ids(top_k_index, n_experts)][0])
    raise ValueError(
        f"{op}: top_k_index must be in [0, {n_experts}) (the experts of gate_up_proj); {n_bad} are not (first: {first})"
    )


def check_expert_ids(top_k_index: torch.Tensor, n_experts: int, op: str = OP_NAME) -> None:
    """Raise ValueError for an expert id outside ``[0, n_experts)`` (one host synchronisation)."""
    n_bad = int(_bad_ids(top_k_index, n_experts).sum())
    if n_bad:
        _raise_bad_ids(top_k_index, n_experts, n_bad, op)


# -- routing: what every backend's grouped GEMMs run over ---------------------------------------


@dataclass(frozen=True)
class Routing:
    """The ``T * K`` selections sorted by expert (stable: by token within an expert), as int32
    device tensors, and the tiles of ``block_m`` rows the grouped GEMMs run over.

    - ``token_of_row``: the source token of each sorted row (``slot // K``).
    - ``slot_of_row``: the flat selection ``t * K + k`` of each sorted row (its routing weight).
    - ``row_of_slot``: the inverse: the sorted row of each selection (the gather-sum reads it).
    - ``expert_offsets``: ``(E + 1,)``, expert ``e``'s rows are ``[offsets[e], offsets[e + 1])``.
    - ``tile_expert``, ``tile_row_start``: per tile, its expert and its first sorted row; a tile
      never spans two experts (its rows past the expert's end are masked). ``max_tiles`` of
      them: the tiles past ``n_tiles`` are empty (the last expert's, starting at its end).
    - ``n_tiles``: ``(1,)``, the real tile count (a routed kernel's programs past it exit).
    - ``expert_of_row``: the expert of each sorted row (per-expert biases are read by it).
    """

    token_of_row: torch.Tensor
    slot_of_row: torch.Tensor
    row_of_slot: torch.Tensor
    expert_offsets: torch.Tensor
    tile_expert: torch.Tensor
    tile_row_start: torch.Tensor
    n_tiles: torch.Tensor
    expert_of_row: torch.Tensor

    @property
    def max_tiles(self) -> int:
        """The routed grids' tile count, known on the host: ``max_tiles(slots, experts, block_m)``."""
        return self.tile_expert.shape[0]


def backward_frees_graph() -> bool:
    """Inside a backend's ``backward``: whether autograd frees the graph after this backward (no
    ``retain_graph``), so no later backward reads what the op saved. Then a backend may write a
    gradient over a buffer of its own that it saved (fused_moe's gate-up output over its gradient,
    one (rows x 2I) buffer less at the backward's peak); under ``retain_graph`` it allocates one.
    AOTAutograd asks autograd the same to free its saved tensors early."""
    return not torch._C._autograd._get_current_graph_task_keep_graph()


def max_tiles(n_slots: int, n_experts: int, block_m: int) -> int:
    """The most tiles any routing of ``n_slots`` selections over ``n_experts`` makes: every expert
    adds at most one partial tile, and every tile holds a row."""
    return min(n_slots, -(-n_slots // block_m) + n_experts)


def pending_expert_ids(ids: torch.Tensor, n_experts: int, n_bad: torch.Tensor, op: str = OP_NAME) -> PendingBadCount:
    """The bad expert-id check, deferred (`PendingBadCount`): its ``check`` raises the contract's ValueError."""
    return PendingBadCount(n_bad, lambda count: _raise_bad_ids(ids, n_experts, count, op))


def route(
    top_k_index: torch.Tensor, n_experts: int, block_m: int, op: str = OP_NAME
) -> tuple[Routing, PendingBadCount]:
    """Sort the selections by expert and tile each expert's rows by ``block_m``, with no host
    synchronisation: every shape comes from the inputs' shapes (``max_tiles`` tiles), the real
    tile count stays on the device. Bad expert ids are clamped to expert 0 for the kernels; the
    returned `PendingBadCount` raises the contract's ValueError for them: call its ``check``
    after queuing the forward's kernels."""
    device = top_k_index.device
    n_slots = top_k_index.numel()
    top_k = top_k_index.shape[1]
    ids = top_k_index.reshape(-1).long()
    bad_ids = _bad_ids(ids, n_experts)
    pending = pending_expert_ids(ids, n_experts, bad_ids.sum(), op)
    safe = torch.where(bad_ids, torch.zeros((), dtype=ids.dtype, device=device), ids)
    # Each expert's rows from the sorted ids (bincount would read their maximum on the host).
    sorted_ids, slot_of_row = torch.sort(safe, stable=True)
    offsets = torch.searchsorted(sorted_ids, torch.arange(n_experts + 1, device=device))
    tiles_per_expert = (offsets.diff() + block_m - 1) // block_m
    tile_ends = torch.cumsum(tiles_per_expert, 0)
    row_of_slot = torch.empty_like(slot_of_row).scatter_(0, slot_of_row, torch.arange(n_slots, device=device))
    # Tile t belongs to the first expert whose cumulative tile count passes t (empty experts
    # end where their predecessor does, so none is picked); tiles past the count get the last
    # expert, clamped, and start at its end: every row masked.
    tile = torch.arange(max_tiles(n_slots, n_experts, block_m), device=device)
    tile_expert = torch.searchsorted(tile_ends, tile, right=True).clamp_(max=n_experts - 1)
    tile_in_expert = tile - (tile_ends - tiles_per_expert)[tile_expert]
    tile_row_start = torch.where(tile < tile_ends[-1], offsets[tile_expert] + tile_in_expert * block_m, offsets[-1])
    i32 = torch.int32
    routing = Routing(
        token_of_row=(slot_of_row // top_k).to(i32),
        slot_of_row=slot_of_row.to(i32),
        row_of_slot=row_of_slot.to(i32),
        expert_offsets=offsets.to(i32),
        tile_expert=tile_expert.to(i32),
        tile_row_start=tile_row_start.to(i32),
        n_tiles=tile_ends[-1:].to(i32),
        expert_of_row=sorted_ids.to(i32),
    )
    return routing, pending


def math(
    hidden_states: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
) -> torch.Tensor:
    """The formula, differentiable by autograd (float64 for the oracle, else float32): a plain
    loop over the experts, each applied to every token and weighted by the token's summed
    routing weight for it (0 where it was not selected), so no shape depends on the routing and
    the formula runs on fake tensors. E times the FLOPs of the routed computation: the reference
    is for checking, not speed."""
    compute = torch.float64 if hidden_states.dtype == torch.float64 else torch.float32
    x = hidden_states.to(compute)
    w_gate_up = gate_up_proj.to(compute)
    w_down = down_proj.to(compute)
    weights = top_k_weights.to(compute)
    n_experts, intermediate = w_gate_up.shape[0], w_gate_up.shape[1] // 2
    out = torch.zeros_like(x)
    for e in range(n_experts):
        weight_e = (weights * (top_k_index == e).to(compute)).sum(-1, keepdim=True)  # (tokens, 1)
        gate_up = x @ w_gate_up[e].t()
        act = F.silu(gate_up[:, :intermediate]) * gate_up[:, intermediate:]
        out = out + weight_e * (act @ w_down[e].t())
    return out.to(hidden_states.dtype)


# -- declaration ---------------------------------------------------------------------------------


def _routing(n_tokens: int, n_experts: int, top_k: int, g: torch.Generator, mode: str) -> torch.Tensor:
    """``(tokens, top_k)`` expert ids: ``distinct`` (a router's top-k: K different experts per
    token), ``even`` (distinct, only the even experts: the odd ones get no tokens) or ``repeat``
    (ids drawn independently: a token may name one expert twice)."""
    if mode == "repeat":
        return torch.randint(0, n_experts, (n_tokens, top_k), generator=g)
    pool = n_experts if mode == "distinct" else (n_experts + 1) // 2
    ids = torch.rand(n_tokens, pool, generator=g).argsort(-1)[:, :top_k]
    return ids if mode == "distinct" else 2 * ids


def args(
    device,
    tokens=13,
    hidden=40,
    intermediate=24,
    experts=5,
    top_k=2,
    dtype=torch.float32,
    weights_dtype=None,
    routing="distinct",
    index_dtype=torch.int64,
    strided=False,
    transposed_weights=False,
    seed=0,
    shape=None,
):
    """Unit-variance tokens, weights scaled by 1/sqrt(fan-in) (O(1) activations), normalised
    routing weights of a softmax top-k; ``strided``: hidden_states as a column view;
    ``transposed_weights``: both weights as transposes of contiguous ``(E, H, 2I)`` and ``(E, I, H)``
    tensors (Llama 4's experts); ``shape``: ``(tokens, hidden)`` at once (``liger check``'s smoke
    samples)."""
    if shape is not None:
        tokens, hidden = shape
    g = S.gen(seed)
    x = S.rows_input((tokens, hidden), g, device, dtype, transposed=strided)
    gate_up = S.to(device, dtype, S.normal((experts, 2 * intermediate, hidden), g, hidden**-0.5))
    down = S.to(device, dtype, S.normal((experts, hidden, intermediate), g, intermediate**-0.5))
    if transposed_weights:
        gate_up, down = (w.transpose(1, 2).contiguous().transpose(1, 2) for w in (gate_up, down))
    index = _routing(tokens, experts, top_k, g, routing).to(device=device, dtype=index_dtype)
    weights = torch.softmax(S.normal((tokens, top_k), g), -1)
    weights = S.to(device, weights_dtype or dtype, weights)
    return dict(hidden_states=x, gate_up_proj=gate_up, down_proj=down, top_k_index=index, top_k_weights=weights)


def samples():
    # The small shape (odd sizes, 5 experts, top-2) in every dtype.
    yield from S.grid(args, dict(dtype=S.DTYPES))
    # top-1 over 3 experts; odd experts without tokens; a token naming one expert twice; one
    # token; an empty batch.
    yield sample(args, tokens=7, hidden=33, intermediate=17, experts=3, top_k=1)
    yield from S.grid(args, dict(dtype=S.OPTION_DTYPES), tokens=11, experts=6, routing="even", seed=1)
    yield sample(args, tokens=9, experts=3, top_k=3, routing="repeat", seed=2)
    yield sample(args, tokens=1, hidden=16, intermediate=8, experts=4, top_k=2, seed=3)
    yield sample(args, tokens=0)
    # Tiles wider than one block on every axis of every vendor's plan: 70 rows per expert,
    # hidden and intermediate past 64, and expert row counts that end mid-tile.
    yield sample(args, tokens=70, hidden=130, intermediate=72, experts=2, top_k=2, seed=4)
    # The router's weights in float32 under bf16 experts; int32 ids; hidden_states as a view.
    yield sample(args, dtype=torch.bfloat16, weights_dtype=torch.float32, seed=5)
    yield sample(args, index_dtype=torch.int32, strided=True, seed=6)
    # Llama 4's layout: both weights the transposes of contiguous tensors, read in place; odd
    # sizes in every dtype, then widths past every vendor's block with 16-byte rows.
    yield from S.grid(args, dict(dtype=S.DTYPES), transposed_weights=True, seed=7)
    yield sample(args, tokens=70, hidden=144, intermediate=80, experts=3, top_k=1, transposed_weights=True, seed=8)
    yield sample(
        args, tokens=70, hidden=144, intermediate=80, experts=3, top_k=2, transposed_weights=True, seed=9,
        dtype=torch.bfloat16,
    )  # fmt: skip


def _transformers_eager(hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights):
    # transformers 5.x's eager experts loop (Qwen3MoeExperts / MixtralExperts.forward).
    out = torch.zeros_like(hidden_states)
    n_experts = gate_up_proj.shape[0]
    with torch.no_grad():
        mask = F.one_hot(top_k_index, num_classes=n_experts).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    for (e,) in hit.tolist():
        k_pos, token = torch.where(mask[e])
        gate, up = F.linear(hidden_states[token], gate_up_proj[e]).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, down_proj[e]) * top_k_weights[token, k_pos, None]
        out.index_add_(0, token, y.to(out.dtype))
    return out


def _moe_shape(s):
    # Models without experts in their config (every dense one) benchmark Mixtral's routing.
    return (s.experts or 8), (s.top_k or 2)


def _bench_args(s, dt, dev, gen):
    experts, top_k = _moe_shape(s)
    logits = B.randn((s.tokens, experts), gen, dev)
    weights, index = torch.topk(torch.softmax(logits, -1), top_k, dim=-1)
    weights = (weights / weights.sum(-1, keepdim=True)).to(dt).requires_grad_()
    return dict(
        hidden_states=B.normal((s.tokens, s.hidden), dt, dev, gen),
        gate_up_proj=B.normal((experts, 2 * s.intermediate, s.hidden), dt, dev, gen, scale=s.hidden**-0.5),
        down_proj=B.normal((experts, s.hidden, s.intermediate), dt, dev, gen, scale=s.intermediate**-0.5),
        top_k_index=index,
        top_k_weights=weights,
    )


def _traffic(s, e):
    experts, top_k = _moe_shape(s)
    weights = 3 * experts * s.hidden * s.intermediate * e
    acts = s.tokens * s.hidden * e
    # forward: x and the weights read, out written; backward: both again plus grad_out, the
    # weight gradients and grad_x written (the selections' intermediates kept in between).
    return acts * 2 + weights, 3 * acts + 2 * weights + 3 * s.tokens * top_k * s.intermediate * e


def _flops(s):
    _, top_k = _moe_shape(s)
    routed = 2 * s.tokens * top_k * 3 * s.hidden * s.intermediate  # gate, up and down GEMMs
    return routed, 2 * routed


def _liger_kernel_fused_moe() -> B.Peer:
    def load():
        from liger_kernel.ops.fused_moe import LigerFusedMoEFunction

        return lambda hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights: LigerFusedMoEFunction.apply(
            hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights
        )

    # liger-kernel routes int32 ids (converted outside the timed region).
    return B.Peer(load, prepare=lambda kw: {**kw, "top_k_index": kw["top_k_index"].int()})


def _transformers_grouped_mm() -> B.Peer:
    def load():
        from types import SimpleNamespace

        from transformers.integrations.moe import _default_apply_gate, grouped_mm_experts_forward

        def call(hidden_states, gate_up_proj, down_proj, top_k_index, top_k_weights):
            module = SimpleNamespace(
                num_experts=gate_up_proj.shape[0],
                gate_up_proj=gate_up_proj,
                down_proj=down_proj,
                act_fn=F.silu,
                has_gate=True,
                has_bias=False,
                has_post_expert_norm=False,
                is_transposed=False,
                _is_expert_parallel=False,
            )
            module._apply_gate = lambda gate_up: _default_apply_gate(module, gate_up)
            return grouped_mm_experts_forward(module, hidden_states, top_k_index, top_k_weights)

        return call

    return B.Peer(load, note="experts_implementation='grouped_mm'")


OP = Op(
    fused_moe,
    since=(1, 6),
    math=math,
    grads=("hidden_states", "gate_up_proj", "down_proj", "top_k_weights"),
    samples=samples,
    smoke=(sample(args, shape=(13, 40)), sample(args, shape=(40, 72), intermediate=40, experts=4)),
    error_sample=sample(args, tokens=4, hidden=16, intermediate=8, experts=5, top_k=2),
    errors=(
        bad(
            "index_range",
            ValueError,
            r"top_k_index must be in \[0, 5\) \(the experts of gate_up_proj\); 1 are not \(first: 5\)",
            top_k_index=set_item((2, 1), 5),
        ),
        bad("negative_index", ValueError, r"top_k_index must be in \[0, 5\).*first: -1", top_k_index=set_item(0, -1)),
        bad(
            "index_float",
            TypeError,
            r"top_k_index must have an integer dtype \(int64 or int32\); got float32",
            top_k_index=lambda t: t.float(),
        ),
        bad(
            "index_shape",
            ValueError,
            r"top_k_index must have shape \(tokens, top_k\) with tokens = 4 and top_k >= 1; got \(3, 2\)",
            top_k_index=lambda t: t[:3],
        ),
        bad(
            "weights_shape",
            ValueError,
            r"top_k_weights must have top_k_index's shape \(4, 2\); got \(4, 1\)",
            top_k_weights=lambda t: t[:, :1],
        ),
        bad(
            "weights_int",
            TypeError,
            r"top_k_weights must have dtype float32, bfloat16, float16; got int64",
            top_k_weights=lambda t: t.long(),
        ),
        bad(
            "gate_up_hidden",
            ValueError,
            r"gate_up_proj must have shape \(experts, 2 \* intermediate, hidden\) with hidden = 16 "
            r"\(hidden_states.shape\[1\]\); got \(5, 16, 15\)",
            gate_up_proj=lambda w: w[:, :, :15],
        ),
        bad(
            "gate_up_odd",
            ValueError,
            r"gate_up_proj must have shape \(experts, 2 \* intermediate, hidden\).*got \(5, 15, 16\)",
            gate_up_proj=lambda w: w[:, :15],
        ),
        bad(
            "down_shape",
            ValueError,
            r"down_proj must have shape \(experts, hidden, intermediate\) = \(5, 16, 8\) to match gate_up_proj; "
            r"got \(4, 16, 8\)",
            down_proj=lambda w: w[:4],
        ),
        bad(
            "weight_dtype",
            TypeError,
            r"gate_up_proj must have hidden_states' dtype float32; got bfloat16",
            gate_up_proj=lambda w: w.bfloat16(),
        ),
        bad(
            "hidden_3d",
            ValueError,
            r"hidden_states must be 2-D \(tokens, hidden\); got shape \(1, 4, 16\)",
            hidden_states=lambda x: x[None],
        ),
        bad(
            "hidden_int",
            TypeError,
            r"hidden_states must have dtype float32, bfloat16, float16; got int64",
            hidden_states=lambda x: x.long(),
        ),
        bad(
            "mixed_devices",
            ValueError,
            r"one device.*hidden_states is on .*down_proj is on",
            down_proj=on_other_device,
        ),
    ),
    bench=B.BenchSpec(
        group="moe",
        axes=("tokens", "hidden", "intermediate", "experts", "top_k"),
        layouts={"routed": _bench_args},
        # transformers' eager experts loop; its grouped-GEMM experts are the peer below.
        torch_fn=_transformers_eager,
        traffic=_traffic,
        describe=lambda s: B.dims(
            ("tokens", s.tokens),
            ("hidden", s.hidden),
            ("intermediate", s.intermediate),
            ("experts", _moe_shape(s)[0]),
            ("top_k", _moe_shape(s)[1]),
        ),
        flops=_flops,
        peers={
            B.LIGER_KERNEL: _liger_kernel_fused_moe(),
            B.TRANSFORMERS_GROUPED_MM: _transformers_grouped_mm(),
        },
    ),
)
