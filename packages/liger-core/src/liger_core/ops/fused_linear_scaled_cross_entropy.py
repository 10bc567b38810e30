"""The `fused_linear_scaled_cross_entropy` op: the lm_head projection, temperature-scaled
per-token negative log-likelihood and entropy, without materialising the logits (liger-kernel
0.8.5's ``LigerFusedLinearScaledCrossEntropyFunction``, the policy-gradient trainers' log-prob
and entropy pass), declared once.

Differences from liger-kernel's Function, on purpose: the contract always returns
``(nll, entropy)`` (liger-kernel returns ``nll`` alone unless ``return_entropy``; the output
positions then depend on a flag, which a declared output list cannot express, and an unused
entropy costs one vocabulary pass of a chunk already in cache); ``selected_token_ids`` (extra
log-probabilities of fixed vocabulary ids) is not part of this op; ``m_tiles_per_cluster`` is a
tuning knob of liger-kernel's Hopper CuTe kernel and has no meaning here.
"""

from __future__ import annotations

import math as _math

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, on_other_device, sample, set_item
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops import fused_linear_cross_entropy as _flce
from liger_core.ops._checks import check_same_device

OP_NAME = "fused_linear_scaled_cross_entropy"


def fused_linear_scaled_cross_entropy(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    temperature: float = 1.0,
    ignore_index: int = -100,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token negative log-likelihood and entropy of ``softmax(input @ weight.T / temperature)``.

    ``logits = input @ weight.T`` (in ``input.dtype``, as the lm_head computes them), then in
    float32 ``z = logits / temperature``, ``lse = logsumexp(z)``, ``p = softmax(z)``:
    ``nll = lse - z[target]`` and ``entropy = lse - sum_v p_v z_v``. Rows whose target is
    ``ignore_index`` give 0 for both and no gradient (every row ignored: all zeros, where
    ``F.cross_entropy(reduction="none")`` gives 0 too). Nothing is reduced: the caller owns
    masking, weighting and normalisation. Mixed dtypes: a ``weight`` of another float dtype than
    ``input`` is cast to ``input.dtype`` for the matmul, its gradient in its own dtype
    (`liger_core.op`, "Dtypes"). Backends compute the logits a chunk of tokens at a
    time, so peak memory stays far below ``tokens x vocab``.

    Args:
        input: ``(tokens, hidden)``, float32, bfloat16 or float16 (never modified).
        weight: ``(vocab, hidden)``; another float dtype is cast to ``input.dtype`` for the
            matmul, as autocast would.
        target: ``(tokens,)`` integer class indices in ``[0, vocab)`` or ``ignore_index``.
        temperature: a finite number > 0 dividing the logits.
        ignore_index: the target of rows to skip.

    Returns:
        ``(nll, entropy)``, both ``(tokens,)``: ``nll`` in float32, ``entropy`` in ``input.dtype``
        (computed in float32). Backward gives ``grad_input`` and ``grad_weight`` (their tensors'
        dtypes) through ``d/dz = grad_nll (p - onehot(target)) - grad_entropy p (z - lse + entropy)``
        and ``d/dlogits = d/dz / temperature``.
    """
    check_args(input, weight, target, temperature, ignore_index)
    L.label_stats(OP_NAME, target, ignore_index, weight.shape[0])
    nll, entropy = math(input, weight, target, temperature, ignore_index)
    return nll.float(), entropy.to(input.dtype)


def temperature_ok(temperature: float) -> bool:
    return type(temperature) in (int, float) and _math.isfinite(temperature) and temperature > 0


def check_args(
    input: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, temperature: float, ignore_index: int
) -> None:
    """Raise a clear error for arguments outside the contract (target values: `_losses.label_stats`)."""
    try:
        dev = input.device
        if (
            L.is_float(input)
            and L.is_float(weight)
            and input.ndim == 2
            and weight.ndim == 2
            and weight.shape[0] > 0
            and weight.shape[1] == input.shape[1]
            and weight.device == dev
            and isinstance(target, torch.Tensor)
            and target.dtype in L.INDEX_DTYPES
            and target.shape == input.shape[:1]
            and target.device == dev
            and temperature_ok(temperature)
            and type(ignore_index) is int
        ):
            return
    except (AttributeError, TypeError):
        pass
    L.check_matrix(OP_NAME, "input", input, "(tokens, hidden)")
    L.check_matrix(OP_NAME, "weight", weight, "(vocab, hidden)")
    check_same_device(OP_NAME, input=input, weight=weight)
    L.check_vocab(OP_NAME, "weight", weight.shape[0])
    if weight.shape[1] != input.shape[1]:
        raise ValueError(
            f"{OP_NAME}: weight must have shape (vocab, hidden) with hidden = input.shape[1] = {input.shape[1]}; "
            f"got weight.shape={tuple(weight.shape)}"
        )
    L.check_labels(OP_NAME, "target", target, input.shape[0], input.device)
    if not temperature_ok(temperature):
        raise ValueError(f"{OP_NAME}: temperature must be a finite number > 0; got {temperature!r}")
    if type(ignore_index) is not int:
        raise TypeError(f"{OP_NAME}: ignore_index must be an int; got {ignore_index!r}")


def math(
    input: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, temperature: float, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(nll, entropy)`` by the formula, differentiable in ``input`` and ``weight`` (float64
    inputs give the oracle; others compute the logits in ``input.dtype`` and the rest in float32)."""
    compute = torch.float64 if input.dtype == torch.float64 else torch.float32
    logits = input @ weight.to(input.dtype).t()
    z = logits.to(compute) / temperature
    lse = torch.logsumexp(z, dim=-1)
    p = torch.exp(z - lse[:, None])
    valid = target != ignore_index
    safe = torch.where(valid, target, torch.zeros((), dtype=target.dtype, device=target.device)).long()
    nll = lse - z.gather(1, safe[:, None]).squeeze(1)
    entropy = lse - (p * z).sum(-1)
    zero = torch.zeros((), dtype=compute, device=z.device)
    return torch.where(valid, nll, zero), torch.where(valid, entropy, zero)


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 8, 20), dtype=torch.float32, seed=0, ignored=0.25, weight_dtype=None, **options):
    """input (tokens, hidden), an lm_head weight (vocab, hidden) giving O(3) logits, targets with
    some rows ignored."""
    n, hidden, vocab = shape
    g = S.gen(seed)
    x = S.to(device, dtype, S.normal((n, hidden), g))
    w = S.to(device, weight_dtype or dtype, S.normal((vocab, hidden), g, 3.0 / max(hidden, 1) ** 0.5))
    target = S.labels(n, vocab, seed, options.get("ignore_index", -100), ignored).to(device)
    return dict(input=x, weight=w, target=target, **options)


def samples():
    # (tokens, hidden, vocab): one token, odd sizes, vocab wider than any vendor's block, more
    # tokens than one chunk of logits.
    shapes = ((1, 8, 5), (7, 16, 33), (40, 24, 300), (5, 32, 9000), (130, 16, 40))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield from S.grid(args, dict(dtype=S.OPTION_DTYPES, temperature=(0.7, 2.0)), shape=(37, 24, 130), seed=3)
    yield sample(args, shape=(12, 16, 50), seed=4, weight_dtype=torch.float32, dtype=torch.bfloat16)
    yield sample(args, shape=(6, 8, 40), ignored="all", temperature=1.5)
    yield sample(args, shape=(12, 8, 30), seed=5, ignore_index=3)
    # One output unused downstream (its gradient is None, not zeros).
    yield sample(args, shape=(10, 16, 70), seed=6, temperature=0.5, unused_outputs=("entropy",))
    yield sample(args, shape=(10, 16, 70), seed=7, temperature=0.5, unused_outputs=("nll",))
    # input without requires_grad (a frozen trunk): only the lm_head gets gradients.
    yield sample(args, frozen=("input",), shape=(9, 8, 30), seed=8)
    yield sample(args, shape=(0, 8, 20))


def _scales(a, upstream):
    # grad_input and grad_weight are products with the logits' gradient g: their terms cancel.
    x, w = a["input"], a["weight"]
    logits = (x @ w.to(x.dtype).t()).requires_grad_()
    z = logits.double() / a["temperature"]
    lse = torch.logsumexp(z, -1)
    p = torch.exp(z - lse[:, None])
    valid = a["target"] != a["ignore_index"]
    safe = torch.where(valid, a["target"], 0).long()
    nll = torch.where(valid, lse - z.gather(1, safe[:, None]).squeeze(1), 0.0)
    ent = torch.where(valid, lse - (p * z).sum(-1), 0.0)
    scales = {"entropy": S.peak(ent.detach())}
    ups = [(o, upstream[k]) for o, k in ((nll, "nll"), (ent, "entropy")) if upstream.get(k) is not None]
    if not ups or not logits.numel():
        return scales
    (g,) = torch.autograd.grad([o for o, _ in ups], logits, [u.to(o.dtype) for o, u in ups])
    scales["grad_input"] = L.grad_scale_through(g, w)
    scales["grad_weight"] = L.grad_scale_through(g.t(), x)
    return scales


def _torch_fused_linear_scaled_cross_entropy(input, weight, target, temperature=1.0, ignore_index=-100):
    """The two terms as an RL trainer writes them in PyTorch (full logits)."""
    logits = F.linear(input, weight).float() / temperature
    logp = torch.log_softmax(logits, -1)
    valid = target != ignore_index
    nll = -logp.gather(1, torch.where(valid, target, 0)[:, None]).squeeze(1) * valid
    entropy = -(logp.exp() * logp).sum(-1) * valid
    return nll, entropy.to(input.dtype)


def _liger_kernel_fused_linear_scaled_cross_entropy():
    # Not in liger-kernel's functional module: its dispatching Function (Hopper: CuTe kernels;
    # elsewhere a 512-token chunked torch fallback), asked for the entropy too.
    from liger_kernel.ops.fused_linear_scaled_cross_entropy import LigerFusedLinearScaledCrossEntropyFunction

    def call(input, weight, target, temperature=1.0, ignore_index=-100):
        return LigerFusedLinearScaledCrossEntropyFunction.apply(
            input, weight, target, temperature, ignore_index, 1, True
        )

    return call


OP = Op(
    fused_linear_scaled_cross_entropy,
    since=(1, 7),
    math=math,
    grads=("input", "weight"),
    outputs=("nll", "entropy"),
    samples=samples,
    smoke=(sample(args, shape=(3, 8, 5)), sample(args, shape=(20, 16, 700), temperature=0.8)),
    error_sample=sample(args, ignored=0.0),
    errors=(
        bad("target_range", ValueError, r"target must be in \[0, 20\).*first: 21", target=set_item(1, 21)),
        bad(
            "hidden_mismatch",
            ValueError,
            r"weight must have shape \(vocab, hidden\) with hidden = input.shape\[1\] = 8",
            weight=lambda w: w[:, :7],
        ),
        bad(
            "input_3d",
            ValueError,
            r"input must be 2-D \(tokens, hidden\); got shape \(1, 4, 8\)",
            input=lambda x: x.reshape(1, 4, 8),
        ),
        bad("target_shape", ValueError, r"target must have shape \(tokens,\) = \(4,\)", target=lambda t: t[:2]),
        bad("target_float", TypeError, r"target must have an integer dtype", target=lambda t: t.float()),
        bad("weight_device", ValueError, r"one device.*weight is on", weight=on_other_device),
        bad("temperature", ValueError, r"temperature must be a finite number > 0; got 0", temperature=0),
        bad("temperature_inf", ValueError, r"temperature must be a finite number > 0; got inf", temperature=_math.inf),
        bad("ignore_index", TypeError, r"ignore_index must be an int; got 1.5", ignore_index=1.5),
    ),
    checks=Checks(
        out_dtypes=lambda a: (torch.float32, a["input"].dtype),
        atol_scales=_scales,
        tolerance_from={name: ("input", "weight") for name in ("nll", "entropy", "grad_input", "grad_weight")},
    ),
    # liger-kernel's benchmark runs hidden 4096, vocab 131072, 4096 tokens in bf16:
    # `liger bench --ops fused_linear_scaled_cross_entropy --tokens 4096 --hidden 4096 --vocab 131072`;
    # by default the model configs' shapes.
    bench=B.BenchSpec(
        group="losses",
        axes=("tokens", "hidden", "vocab"),
        layouts=_flce.OP.bench.layouts,
        torch_fn=_torch_fused_linear_scaled_cross_entropy,
        traffic=lambda s, e: (
            (s.tokens + s.vocab) * s.hidden * e + 8 * s.tokens,
            3 * (s.tokens + s.vocab) * s.hidden * e + 16 * s.tokens,
        ),
        describe=B.linear_text,
        # forward: the logits matmul; backward: the logits again, then the input and weight gradients.
        flops=lambda s: (2 * s.tokens * s.hidden * s.vocab, 6 * s.tokens * s.hidden * s.vocab),
        peers={B.LIGER_KERNEL: B.Peer(_liger_kernel_fused_linear_scaled_cross_entropy)},
    ),
)
