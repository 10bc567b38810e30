"""The `grpo_loss` op: the GRPO-family losses from a model's logits (liger-kernel 0.8.5's
``triton_grpo_loss``), per token or reduced, declared once. The per-token terms, normalisers and
metrics are `fused_linear_grpo`'s (TRL's formulas); only where the log-probabilities come from
differs."""

from __future__ import annotations

import inspect

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops import fused_linear_grpo as G
from liger_core.ops._checks import check_floating

OP_NAME = "grpo_loss"


def grpo_loss(
    logits: torch.Tensor,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    completion_ids: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor | None = None,
    temperature: float = 0.9,
    beta: float = 0.04,
    eps_low: float = 0.2,
    eps_high: float = 0.4,
    in_place: bool = False,
    loss_type: str = "dapo",
    max_completion_length: int | None = None,
    importance_sampling_level: str = "token",
    reduce: bool = False,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    vllm_is_ratio: torch.Tensor | None = None,
    delta: float | None = None,
    use_bias_correction_kl: bool = False,
    num_items_in_batch: float | None = None,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The GRPO loss from the policy's logits, liger-kernel 0.8.5's ``triton_grpo_loss``
    (arguments by its names; ``in_place`` is its ``inplace``, off by default here)::

        logp[b, t] = log_softmax(logits[b, t] / temperature)[completion_ids[b, t]]   (t < L)

    (the last position's logits, ``logits[:, L]``, are not used), then the per-token terms of
    `liger_core.ops.fused_linear_grpo.fused_linear_grpo` (TRL's ``GRPOTrainer`` formulas; there
    ``epsilon_low``/``epsilon_high`` are ``eps_low``/``eps_high``, ``old_per_token_logps`` is
    ``old_logp``, ``ref_per_token_logps`` is ``ref_logp``) with ``m = completion_mask`` (all
    ones when None).

    ``reduce=False``: ``(per_token_loss * m, kl * m, is_clipped * m)``, each float32 ``(B, L)``:
    the per-token loss (a sequence-level value broadcast over its tokens), the KL term (zeros
    when ``beta == 0``) and TRL's ``clip_ratio/region`` indicator (cispo: its clip indicator;
    zeros for sapo and vespo). ``reduce=True``: ``(loss, kl_mean, clip_ratio)``, float32
    scalars: the loss normalised per ``loss_type`` as in ``fused_linear_grpo`` (dr_grpo's
    ``max_completion_length`` defaults to ``L``), and that op's ``kl`` and ``clip_ratio_region``
    metrics.

    Args:
        logits: ``(B, L + 1, V)``, float32, bfloat16 or float16; computed in float32. Never
            modified unless ``in_place``.
        old_logp, ref_logp: ``(B, L)`` floating or None (``ref_logp`` required when
            ``beta != 0``).
        completion_ids: ``(B, L)`` integer ids in ``[0, V)``.
        advantages: ``(B,)`` floating.
        completion_mask: ``(B, L)`` bool, integer or float 0/1, or None.
        in_place: the backend may write the gradient w.r.t. ``logits`` into ``logits``' memory;
            the caller must not read ``logits`` after the forward.
        The other options: as ``fused_linear_grpo``'s.

    Returns:
        The three outputs above; only the first carries a gradient. Backward gives
        ``grad_logits`` in ``logits.dtype`` (zero at the last position).
    """
    args = (logits, old_logp, ref_logp, completion_ids, advantages, completion_mask, temperature, beta, eps_low)
    options = (
        eps_high, in_place, loss_type, max_completion_length, importance_sampling_level, reduce, sapo_temperature_pos,
        sapo_temperature_neg, vllm_is_ratio, delta, use_bias_correction_kl, num_items_in_batch, vespo_k_pos,
        vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
    )  # fmt: skip
    check_args(*args, *options)
    G.check_token_ids(completion_ids, logits.shape[-1], OP_NAME, "completion_ids")
    return tuple(t.float() for t in math(*args, *options))


def check_args(
    logits: torch.Tensor,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    completion_ids: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor | None,
    temperature: float,
    beta: float,
    eps_low: float,
    eps_high: float,
    in_place: bool,
    loss_type: str,
    max_completion_length: int | None,
    importance_sampling_level: str,
    reduce: bool,
    sapo_temperature_pos: float,
    sapo_temperature_neg: float,
    vllm_is_ratio: torch.Tensor | None,
    delta: float | None,
    use_bias_correction_kl: bool,
    num_items_in_batch: float | None,
    vespo_k_pos: float,
    vespo_lambda_pos: float,
    vespo_k_neg: float,
    vespo_lambda_neg: float,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first; the
    ids' range is `fused_linear_grpo.check_token_ids`)."""
    try:
        dev = logits.device
        b, n = logits.shape[0], logits.shape[1] - 1
        if (
            L.is_float(logits)
            and logits.ndim == 3
            and n >= 0
            and logits.shape[2] > 0
            and completion_ids.dtype in L.INDEX_DTYPES
            and completion_ids.shape == (b, n)
            and completion_ids.device == dev
            and (
                completion_mask is None
                or (
                    completion_mask.dtype in G.MASK_DTYPES
                    and completion_mask.shape == (b, n)
                    and completion_mask.device == dev
                )
            )
            and L.is_float(advantages)
            and advantages.shape == (b,)
            and advantages.device == dev
            and G._pair_ok(ref_logp, b, n, dev)
            and G._pair_ok(old_logp, b, n, dev)
            and (vllm_is_ratio is None or G._vllm_ok(vllm_is_ratio, b, n, dev))
            and (ref_logp is not None or beta == 0)
            and loss_type in G.LOSS_TYPES
            and importance_sampling_level in G.IMPORTANCE_SAMPLING_LEVELS
            and (max_completion_length is None or (type(max_completion_length) is int and max_completion_length > 0))
            and temperature > 0
            and sapo_temperature_pos > 0
            and sapo_temperature_neg > 0
            and (delta is None or delta > 0)
            and type(use_bias_correction_kl) is bool
            and type(in_place) is bool
            and type(reduce) is bool
            and (num_items_in_batch is None or num_items_in_batch >= 0)
            and all(type(v) in (int, float) for v in (beta, eps_low, eps_high))
            and all(type(v) in (int, float) for v in (vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg))
        ):
            return
    except (AttributeError, TypeError, IndexError):
        pass
    op = OP_NAME
    check_floating("grpo_loss", "logits", logits)
    if logits.ndim != 3 or logits.shape[1] < 1:
        raise ValueError(f"{op}: logits must be 3-D (batch, completion + 1, vocab); got shape {tuple(logits.shape)}")
    L.check_vocab(op, "logits", logits.shape[2])
    b, n = logits.shape[0], logits.shape[1] - 1
    shape, dev, what = (b, n), logits.device, "logits (batch, completion)"
    G._check_index(op, "completion_ids", completion_ids, shape, dev, what)
    if completion_mask is not None:
        G._check_mask(op, completion_mask, shape, dev, what, name="completion_mask")
    G._check_float(op, "advantages", advantages, (b,), dev, what)
    for name, t in (("ref_logp", ref_logp), ("old_logp", old_logp)):
        if t is not None:
            G._check_float(op, name, t, shape, dev, what)
    for name, value in (("in_place", in_place), ("reduce", reduce)):
        if type(value) is not bool:
            raise TypeError(f"{op}: {name} must be True or False; got {value!r}")
    if max_completion_length is not None and (type(max_completion_length) is not int or max_completion_length <= 0):
        raise ValueError(f"{op}: max_completion_length must be None or an int > 0; got {max_completion_length!r}")
    # The options shared with fused_linear_grpo: its checks, under this op's name.
    G.check_options(
        op, b, n, dev, ref_logp, vllm_is_ratio, num_items_in_batch, beta, eps_low, eps_high, loss_type,
        importance_sampling_level, sapo_temperature_pos, sapo_temperature_neg, temperature, delta,
        use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
        names=("ref_logp", "eps_low", "eps_high"),
    )  # fmt: skip


def per_token_logps(logits: torch.Tensor, completion_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """The completion tokens' log-probabilities (B, L) by the formula (float64 in, float64 out;
    else float32), differentiable in ``logits``."""
    compute = torch.float64 if logits.dtype == torch.float64 else torch.float32
    x = logits[:, :-1].to(compute) / temperature
    return torch.log_softmax(x, -1).gather(-1, completion_ids.long().unsqueeze(-1)).squeeze(-1)


def outputs_from_logps(
    logp, old_logp, ref_logp, advantages, completion_mask, eps_low, eps_high, beta, loss_type, max_completion_length,
    importance_sampling_level, reduce, sapo_temperature_pos, sapo_temperature_neg, vllm_is_ratio, delta,
    use_bias_correction_kl, num_items_in_batch, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """The three outputs from the per-token log-probabilities (B, L), differentiable in ``logp``
    (the first output only); shared by the reference and the backends."""
    mask = torch.ones_like(logp) if completion_mask is None else completion_mask
    opts = G.options(
        beta, eps_low, eps_high, loss_type, importance_sampling_level, sapo_temperature_pos, sapo_temperature_neg,
        delta, use_bias_correction_kl, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
    )  # fmt: skip
    terms = G.grpo_terms(logp, mask, advantages, ref_logp, old_logp, vllm_is_ratio, opts)
    m = mask.to(logp.dtype)
    if not reduce:
        with torch.no_grad():
            kl = torch.zeros_like(m) if terms.kl is None else terms.kl.detach() * m
            flags = G.clip_flags(terms.coef_1.detach(), advantages, opts)
            clipped = torch.zeros_like(m) if flags is None else flags[2].to(m.dtype).expand_as(m) * m
        return terms.per_token * m, kl, clipped
    length = logp.shape[1] if max_completion_length is None else max_completion_length
    w, tw, sw = G.token_weights(mask, loss_type, length, num_items_in_batch, logp.dtype)
    loss = (terms.per_token * w).sum()
    with torch.no_grad():
        metrics = G.metric_sums(terms, advantages, tw, sw, opts)
    return loss, metrics[0], metrics[3]


def math(
    logits, old_logp, ref_logp, completion_ids, advantages, completion_mask, temperature, beta, eps_low, eps_high,
    in_place, loss_type, max_completion_length, importance_sampling_level, reduce, sapo_temperature_pos,
    sapo_temperature_neg, vllm_is_ratio, delta, use_bias_correction_kl, num_items_in_batch, vespo_k_pos,
    vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """The formula, differentiable in ``logits`` (float64 for the oracle, else float32)."""
    logp = per_token_logps(logits, completion_ids, temperature)
    return outputs_from_logps(
        logp, old_logp, ref_logp, advantages, completion_mask, eps_low, eps_high, beta, loss_type,
        max_completion_length, importance_sampling_level, reduce, sapo_temperature_pos, sapo_temperature_neg,
        vllm_is_ratio, delta, use_bias_correction_kl, num_items_in_batch, vespo_k_pos, vespo_lambda_pos,
        vespo_k_neg, vespo_lambda_neg,
    )  # fmt: skip


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(3, 7, 33), dtype=torch.float32, seed=0, mask=True, layout="rows", **options):
    """(batch, completion length, vocab): logits ``(B, L + 1, V)`` and the rest of the batch from
    `fused_linear_grpo.args` (the same masks, advantages and old/ref log-probabilities ``spread``
    around the policy's). ``layout="sliced"``: the logits a slice of wider rows (unit column
    stride, row stride > V), as a model's lm_head output narrowed to the vocabulary."""
    b, n, vocab = shape
    builder = {k: options.pop(k) for k in ("ref", "old", "vllm", "spread") if k in options}
    rest = G.args("cpu", shape=(b, n, 8, vocab), seed=seed, **builder)
    g = S.gen(seed + 1)
    if layout == "sliced":
        logits = S.to(device, dtype, S.normal((b, n + 1, vocab + 37), g, 2.0))[..., 3 : vocab + 3]
    else:
        logits = S.to(device, dtype, S.normal((b, n + 1, vocab), g, 2.0))
    temperature = options.get("temperature", 0.9)
    logp = per_token_logps(logits.double().cpu(), rest["selected_token_ids"], temperature)
    spread = builder.get("spread", 0.25)
    gen = S.gen(seed + 2)

    def near(t):
        return None if t is None else (logp + S.normal((b, n), gen, spread).double()).float().to(device)

    ref, old = near(rest["ref_per_token_logps"]), near(rest["old_per_token_logps"])
    if ref is None:
        options.setdefault("beta", 0.0)
    return dict(
        logits=logits,
        old_logp=old,
        ref_logp=ref,
        completion_ids=rest["selected_token_ids"].to(device),
        advantages=rest["advantages"].to(device),
        completion_mask=rest["attention_mask"].to(device) if mask else None,
        vllm_is_ratio=None if rest["vllm_is_ratio"] is None else rest["vllm_is_ratio"].to(device),
        **options,
    )


def samples():
    # (batch, completion, vocab): one token; odd sizes; rows wider than any vendor's single block.
    for reduce in (False, True):
        shapes = ((1, 1, 5), (3, 7, 33), (2, 5, 9000), (9, 13, 40))
        yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes), reduce=reduce)
    for opts in G._loss_options():
        opts = {{"epsilon_low": "eps_low", "epsilon_high": "eps_high"}.get(k, k): v for k, v in opts.items()}
        for reduce in (False, True):
            yield sample(args, shape=(4, 11, 130), seed=3, reduce=reduce, dtype=torch.float32, **opts)
        yield sample(args, shape=(4, 11, 130), seed=4, reduce=True, dtype=torch.bfloat16, **opts)
    yield sample(args, shape=(4, 9, 70), mask=False, temperature=1.0, reduce=True, seed=5)
    yield sample(args, shape=(4, 9, 70), layout="sliced", temperature=1.3, seed=6)
    yield from S.grid(args, dict(reduce=(False, True), temperature=(1.0, 0.7)), shape=(3, 8, 50), seed=7, in_place=True)
    yield sample(args, shape=(0, 5, 20), reduce=True)


def _scales(a, upstream):
    """The gradient is ``dlogp * (onehot - softmax) / T`` per row: bound it by its terms."""
    logits = a["logits"]
    if logits.shape[0] == 0:
        return {}
    with torch.enable_grad():
        lp = per_token_logps(logits, a["completion_ids"], a["temperature"]).detach().requires_grad_()
        outs = outputs_from_logps(lp, *(a[k] for k in _FROM_LOGPS))
        up = upstream.get("loss")
        (d,) = torch.autograd.grad(outs[0], lp, grad_outputs=None if up is None else up.expand_as(outs[0]))
    p = torch.softmax(logits[:, :-1] / a["temperature"], -1)
    g = d.abs()[..., None] * (1 + p) / a["temperature"]
    terms = outs[0].detach().abs()
    return {
        "grad_logits": float(g.max()) if g.numel() else 1.0,
        "loss": max(float(terms.max()) if terms.numel() else 1.0, 1e-3),
    }


_FROM_LOGPS = (
    "old_logp", "ref_logp", "advantages", "completion_mask", "eps_low", "eps_high", "beta", "loss_type",
    "max_completion_length", "importance_sampling_level", "reduce", "sapo_temperature_pos", "sapo_temperature_neg",
    "vllm_is_ratio", "delta", "use_bias_correction_kl", "num_items_in_batch", "vespo_k_pos", "vespo_lambda_pos",
    "vespo_k_neg", "vespo_lambda_neg",
)  # fmt: skip


def _torch_grpo_loss(logits, old_logp, ref_logp, completion_ids, advantages, completion_mask=None, **kw):
    """The models' way: a float32 log-softmax of the whole logits, then the loss."""
    temperature = kw.get("temperature", 0.9)
    logp = torch.log_softmax(logits[:, :-1].float() / temperature, -1)
    logp = logp.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    a = {**_DEFAULTS, **kw, "old_logp": old_logp, "ref_logp": ref_logp, "advantages": advantages}
    a["completion_mask"] = completion_mask
    return outputs_from_logps(logp, *(a[k] for k in _FROM_LOGPS))[0]


_DEFAULTS = {name: p.default for name, p in inspect.signature(grpo_loss).parameters.items() if p.default is not p.empty}


def _bench_args(s, dt, dev, gen):
    # Completions of up to 1024 tokens, s.tokens // 1024 of them (at least 1); in place, as liger-kernel's default.
    n = min(s.tokens, 1024)
    b = max(1, s.tokens // n)
    return dict(
        logits=B.normal((b, n + 1, s.vocab), dt, dev, gen),
        old_logp=-torch.rand((b, n), device=dev, generator=gen) * 5,
        ref_logp=-torch.rand((b, n), device=dev, generator=gen) * 5,
        completion_ids=torch.randint(0, s.vocab, (b, n), device=dev, generator=gen),
        advantages=torch.randn((b,), device=dev, generator=gen),
        completion_mask=torch.ones((b, n), dtype=torch.int64, device=dev),
        reduce=True,
        in_place=True,
    )


def _liger_kernel_grpo_loss() -> B.Peer:
    def load():
        from liger_kernel.transformers.grpo_loss import triton_grpo_loss

        def call(logits, old_logp, ref_logp, completion_ids, advantages, completion_mask=None, **kw):
            return triton_grpo_loss(
                logits, old_logp, ref_logp, completion_ids, advantages, completion_mask, reduce=True,
                inplace=kw.get("in_place", False),
            )[0]  # fmt: skip

        return call

    return B.Peer(load)


OP = Op(
    grpo_loss,
    since=(1, 6),
    math=math,
    grads=("logits",),
    outputs=("loss", "kl", "is_clipped"),
    no_grad_outputs=("kl", "is_clipped"),
    samples=samples,
    smoke=(sample(args, shape=(2, 3, 5)), sample(args, shape=(3, 20, 700), reduce=True)),
    error_sample=sample(args),
    errors=(
        bad("loss_type", ValueError, r"loss_type must be one of \('grpo', .*\); got 'ppo'", loss_type="ppo"),
        bad(
            "mask_shape",
            ValueError,
            r"completion_mask must have shape \(3, 7\) to match logits \(batch, completion\); got \(3, 8\)",
            completion_mask=lambda m: torch.cat([m, m[:, :1]], 1),
        ),
        bad(
            "ids_range",
            ValueError,
            r"completion_ids must be in \[0, 33\); 1 are not \(first: -2\)",
            completion_ids=lambda t: torch.where(torch.arange(t.numel(), device=t.device).view(t.shape) == 3, -2, t),
        ),
        bad(
            "logits_2d",
            ValueError,
            r"logits must be 3-D \(batch, completion \+ 1, vocab\); got shape \(8, 33\)",
            logits=lambda x: x[0],
        ),
        bad("ref_missing", ValueError, r"ref_logp is required when beta != 0", ref_logp=None),
        bad("reduce_flag", TypeError, r"reduce must be True or False; got 1", reduce=1),
        bad("eps_high", TypeError, r"eps_high must be a number; got None", eps_high=None),
        bad("temperature", ValueError, r"temperature must be a number > 0; got -1", temperature=-1),
    ),
    checks=Checks(
        out_dtypes=lambda a: (torch.float32,) * 3,
        atol_scales=_scales,
        tolerance_from={name: ("logits",) for name in ("loss", "kl", "is_clipped", "grad_logits")},
        overwritable=lambda a: ("logits",) if a["in_place"] else (),
    ),
    bench=B.BenchSpec(
        group="losses",
        axes=("tokens", "vocab"),
        layouts={"rows": _bench_args},
        torch_fn=_torch_grpo_loss,
        # forward reads the logits; backward reads them again and writes their gradient.
        traffic=lambda s, e: (s.tokens * s.vocab * e, 2 * s.tokens * s.vocab * e),
        describe=B.vocab_text,
        peers={B.LIGER_KERNEL: _liger_kernel_grpo_loss()},
    ),
)
