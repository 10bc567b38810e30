"""What the paired preference losses (fused_linear_dpo, ...) share: the batch layout and its
checks, the per-pair loss formulas, the float64-capable reference, and the chunked orchestration
every backend runs over its own per-token log-probability kernels.

Layout (TRL's and liger-kernel's): ``input`` is ``(2B, T, hidden)``, the B chosen sequences then
the B rejected ones, ``target`` ``(2B, T)`` holds the next-token ids with ``ignore_index`` on the
prompt and padding (TRL's ``completion_mask == 0``). A sequence's log-probability is the sum (or,
with ``average_log_prob``, the mean) of ``log softmax(input_t @ weight.T + bias)[target_t]`` over
its counted tokens.

Orchestration (`fused_linear_pairs`): each loss is a sum over pairs of a function of that pair
alone (divided by the number of pairs, known up front), plus an optional NLL term whose
normaliser (the chosen tokens of the whole batch) is also known up front. So one pass over
chunks of whole pairs gives the loss and every gradient: per chunk the logits by one matmul, the
backend's forward kernel gives per-token log-probabilities (and lse); the sequences' sums feed
the pair formula (a few scalars per pair, by autograd in torch); its derivative w.r.t. each
sequence becomes a per-token coefficient ``c_t``, and the backend's gradient kernel overwrites
the logits chunk in place with ``c_t * (onehot(target_t) - softmax_t)``; two matmuls give the
chunk's input gradient and add its weight gradient. The matmul is never recomputed and at most one
chunk of logits (in the input's dtype) lives at a time. Nothing here needs torch.compile. The
unpaired losses (`fused_linear_unpaired`, KTO) run the same chunk step (`ChunkStep`) over runs of
whole sequences.

`liger_core.ops._preference_functions.autograd_functions` builds the ops' autograd Functions over
one backend's kernels (argument checks, `fused_linear_pairs`, the gradients' two ends); the
backend registers them. It lives apart because it calls each op module's ``check_args``, and the
op modules import this one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from liger_core.op import Checks, bad, set_item
from liger_core.ops import _losses as L

Tensor = torch.Tensor


# -- argument checks ------------------------------------------------------------------------------


def _shape(t) -> tuple:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else ()


def layout_ok(input, weight, target, bias, paired: bool = True) -> bool:
    """The fast-path test of `check_layout`."""
    return (
        L.is_float(input)
        and L.is_float(weight)
        and input.ndim == 3
        and weight.ndim == 2
        and weight.shape[0] > 0
        and weight.shape[1] == input.shape[2]
        and weight.device == input.device
        and (not paired or input.shape[0] % 2 == 0)
        and isinstance(target, torch.Tensor)
        and target.dtype in L.INDEX_DTYPES
        and target.shape == input.shape[:2]
        and target.device == input.device
        and (bias is None or (L.is_float(bias) and bias.shape == weight.shape[:1] and bias.device == input.device))
    )


def check_layout(op: str, input, weight, target, bias, paired: bool = True, prefix: str = "") -> None:
    """Clear errors for the policy's (or, with ``prefix="ref_"``, the reference model's) tensors."""
    x_name, w_name, b_name = f"{prefix}input", f"{prefix}weight", f"{prefix}bias"
    if not L.is_float(input):
        raise TypeError(f"{op}: {x_name} must be a float32, bfloat16 or float16 tensor; got {_what(input)}")
    if input.ndim != 3:
        raise ValueError(f"{op}: {x_name} must be 3-D (batch, seq, hidden); got shape {tuple(input.shape)}")
    if not L.is_float(weight):
        raise TypeError(f"{op}: {w_name} must be a float32, bfloat16 or float16 tensor; got {_what(weight)}")
    if weight.ndim != 2 or weight.shape[1] != input.shape[2]:
        raise ValueError(
            f"{op}: {w_name} must have shape (vocab, hidden) with hidden = {x_name}.shape[2] = {input.shape[2]}; "
            f"got {w_name}.shape={tuple(weight.shape)}"
        )
    L.check_vocab(op, w_name, weight.shape[0])
    L.check_same_device(op, **{x_name: input, w_name: weight})
    if paired and input.shape[0] % 2:
        raise ValueError(
            f"{op}: {x_name} must hold the chosen then the rejected sequences, an even batch (2 x pairs); "
            f"got batch {input.shape[0]}"
        )
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{op}: target must be a torch.Tensor of token ids; got {type(target).__name__}")
    if target.dtype not in L.INDEX_DTYPES:
        raise TypeError(f"{op}: target must have an integer dtype (int64); got {_what(target)}")
    if target.shape != input.shape[:2]:
        raise ValueError(
            f"{op}: target must have shape (batch, seq) = {tuple(input.shape[:2])} ({x_name}.shape[:2]); "
            f"got {tuple(target.shape)}"
        )
    L.check_same_device(op, **{x_name: input, "target": target})
    L.check_class_weight(op, b_name, bias, weight.shape[0], input.device)


def _what(t) -> str:
    return str(t.dtype).removeprefix("torch.") if isinstance(t, torch.Tensor) else type(t).__name__


def check_reference(
    op: str, input, weight, target, ref_input, ref_weight, ref_bias, use_ref_model, paired: bool = True
) -> None:
    """The reference model's tensors: required with ``use_ref_model``, shaped as the policy's
    (``paired``: an even batch)."""
    if type(use_ref_model) is not bool:
        raise TypeError(f"{op}: use_ref_model must be True or False; got {use_ref_model!r}")
    if not use_ref_model:
        return
    for name, t in (("ref_input", ref_input), ("ref_weight", ref_weight)):
        if t is None:
            raise ValueError(f"{op}: use_ref_model=True needs {name}; got None")
    if not isinstance(ref_input, torch.Tensor) or not isinstance(ref_weight, torch.Tensor):
        check_layout(op, ref_input, ref_weight, target, ref_bias, paired, prefix="ref_")
    if ref_input.shape[:2] != input.shape[:2] or ref_weight.shape[:1] != weight.shape[:1]:
        raise ValueError(
            f"{op}: ref_input must have shape (batch, seq, hidden_ref) with (batch, seq) = {tuple(input.shape[:2])} "
            f"and ref_weight {weight.shape[0]} rows (the vocabulary); got ref_input {tuple(ref_input.shape)}, "
            f"ref_weight {tuple(ref_weight.shape)}"
        )
    check_layout(op, ref_input, ref_weight, target, ref_bias, paired, prefix="ref_")
    L.check_same_device(op, input=input, ref_input=ref_input)


def reference_ok(input, weight, ref_input, ref_weight, ref_bias, use_ref_model) -> bool:
    """The fast-path test of `check_reference`."""
    if type(use_ref_model) is not bool:
        return False
    return not use_ref_model or _ref_layout_ok(input, weight, ref_input, ref_weight, ref_bias)


def _ref_layout_ok(input, weight, ref_input, ref_weight, ref_bias) -> bool:
    return (
        L.is_float(ref_input)
        and L.is_float(ref_weight)
        and ref_input.ndim == 3
        and ref_weight.ndim == 2
        and ref_input.shape[:2] == input.shape[:2]
        and ref_weight.shape == (weight.shape[0], ref_input.shape[2])
        and ref_input.device == input.device
        and ref_weight.device == input.device
        and (ref_bias is None or (L.is_float(ref_bias) and ref_bias.shape == weight.shape[:1]))
        and (ref_bias is None or ref_bias.device == input.device)
    )


def check_number(
    op: str, name: str, value, low: float | None = None, high: float | None = None, open_low=False, open_high=False
) -> None:
    """A float option: a finite real number between ``low`` and ``high`` (``open_*``: excluded)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < float("inf")
    if ok and low is not None:
        ok = value > low if open_low else value >= low
    if ok and high is not None:
        ok = value < high if open_high else value <= high
    if not ok:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        left = "(" if open_low or low is None else "["
        right = ")" if open_high or high is None else "]"
        raise ValueError(f"{op}: {name} must be a number in {left}{lo}, {hi}{right}; got {value!r}")


def check_flag(op: str, name: str, value) -> None:
    if type(value) is not bool:
        raise TypeError(f"{op}: {name} must be True or False; got {value!r}")


def check_choice(op: str, name: str, value, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{op}: {name} must be one of {', '.join(allowed)}; got {value!r}")


# -- the formula ----------------------------------------------------------------------------------


PairLoss = Callable[[Tensor, Tensor, Tensor | None, Tensor | None], tuple[Tensor, Tensor, Tensor]]
"""``(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps) -> (per-pair loss,
chosen_rewards, rejected_rewards)``, each ``(pairs,)``; the reference log-probs are None without
a reference model. The op's loss is the per-pair loss summed over all pairs, divided by their
number."""


def token_counts(target: Tensor, ignore_index: int) -> Tensor:
    """Counted tokens per sequence (int64)."""
    return (target != ignore_index).sum(-1)


def sequence_logps(token_logps: Tensor, counts: Tensor, average_log_prob: bool) -> Tensor:
    """Per sequence: the sum of its ``(seq, T)`` token log-probs (0 where ignored), or their mean
    over the counted tokens (a sequence without any: 0, not NaN)."""
    total = token_logps.sum(-1)
    return total / counts.clamp(min=1).to(total.dtype) if average_log_prob else total


def reference_token_logits(input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``input @ weight.T (+ bias)`` in ``input.dtype``, as the lm_head computes them."""
    logits = input @ weight.to(input.dtype).t()
    return logits if bias is None else logits + bias.to(logits.dtype)


def reference_token_logps(input, weight, bias, target, ignore_index) -> tuple[Tensor, Tensor]:
    """Per token ``(log p(target), mean logit)`` by the formula, 0 on ignored tokens: logits in
    ``input.dtype`` (float64 for the oracle), the softmax in float32 or float64."""
    logits = reference_token_logits(input, weight, bias)
    compute = torch.float64 if logits.dtype == torch.float64 else torch.float32
    logits = logits.to(compute)
    valid = target != ignore_index
    safe = torch.where(valid, target, torch.zeros((), dtype=target.dtype, device=target.device)).long()
    logp = logits.log_softmax(-1).gather(-1, safe[..., None]).squeeze(-1)
    zero = torch.zeros((), dtype=compute, device=logits.device)
    return torch.where(valid, logp, zero), torch.where(valid, logits.mean(-1), zero)


@dataclass(frozen=True)
class PairedResult:
    """The outputs every paired loss returns, in its contract's order."""

    loss: Tensor
    chosen_logps: Tensor
    rejected_logps: Tensor
    chosen_logits_mean: Tensor
    rejected_logits_mean: Tensor
    nll_loss: Tensor
    chosen_rewards: Tensor
    rejected_rewards: Tensor

    def astuple(self) -> tuple[Tensor, ...]:
        return (
            self.loss,
            self.chosen_logps,
            self.rejected_logps,
            self.chosen_logits_mean,
            self.rejected_logits_mean,
            self.nll_loss,
            self.chosen_rewards,
            self.rejected_rewards,
        )


OUTPUTS = (
    "loss",
    "chosen_logps",
    "rejected_logps",
    "chosen_logits_mean",
    "rejected_logits_mean",
    "nll_loss",
    "chosen_rewards",
    "rejected_rewards",
)


def checks(scales, outputs: tuple[str, ...] = OUTPUTS) -> Checks:
    """The conformance checks of a preference op with ``outputs``: every output in float32, and
    the outputs' and gradients' tolerances drawn from ``input`` and ``weight``."""
    return Checks(
        out_dtypes=lambda a: (torch.float32,) * len(outputs),
        atol_scales=scales,
        tolerance_from={name: ("input", "weight") for name in (*outputs, "grad_input", "grad_weight", "grad_bias")},
    )


def pair_layout_errors() -> tuple:
    """The layout errors of the reference-free paired ops (ORPO's, CPO's, SimPO's), on their
    error sample: 2 pairs of 7 tokens, vocab 40, with a bias."""
    return (
        bad("target_range", ValueError, r"target must be in \[0, 40\).*first: 41", target=set_item((0, 6), 41)),
        bad(
            "odd_batch",
            ValueError,
            r"input must hold the chosen then the rejected sequences, an even batch \(2 x pairs\); got batch 3",
            input=lambda x: x[:3],
            target=lambda t: t[:3],
        ),
        bad(
            "target_shape",
            ValueError,
            r"target must have shape \(batch, seq\) = \(4, 7\) \(input.shape\[:2\]\); got \(4, 6\)",
            target=lambda t: t[:, :-1],
        ),
        bad("bias_shape", ValueError, r"bias must have shape \(vocab,\) = \(40,\); got \(3,\)", bias=lambda b: b[:3]),
    )


def _masked_mean(total: Tensor, count: Tensor) -> Tensor:
    return total / count.clamp(min=1).to(total.dtype)


def paired_math(
    input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index, pair_loss: PairLoss,
    average_log_prob: bool, nll_weight: float, use_ref_model: bool,
) -> tuple[Tensor, ...]:  # fmt: skip
    """The whole loss and its metrics by the formula, differentiable by autograd (the reference
    and the float64 oracle). ``nll_weight``: the NLL term's factor (0: none)."""
    n_pairs = input.shape[0] // 2
    counts = token_counts(target, ignore_index)
    token_logps, token_mean_logits = reference_token_logps(input, weight, bias, target, ignore_index)
    logps = sequence_logps(token_logps, counts, average_log_prob)
    ref_c = ref_r = None
    if use_ref_model:
        with torch.no_grad():
            ref_tokens, _ = reference_token_logps(ref_input, ref_weight, ref_bias, target, ignore_index)
            ref_logps = sequence_logps(ref_tokens, counts, average_log_prob).to(logps.dtype)
        ref_c, ref_r = ref_logps[:n_pairs], ref_logps[n_pairs:]
    per_pair, chosen_rewards, rejected_rewards = pair_loss(logps[:n_pairs], logps[n_pairs:], ref_c, ref_r)
    chosen_tokens = counts[:n_pairs].sum()
    nll = _masked_mean(-token_logps[:n_pairs].sum(), chosen_tokens)
    loss = per_pair.sum() / max(n_pairs, 1)
    if nll_weight:
        loss = loss + nll_weight * nll
    mean_logits = token_mean_logits.detach()
    return (
        loss,
        logps[:n_pairs].detach(),
        logps[n_pairs:].detach(),
        _masked_mean(mean_logits[:n_pairs].sum(), chosen_tokens),
        _masked_mean(mean_logits[n_pairs:].sum(), counts[n_pairs:].sum()),
        nll.detach(),
        chosen_rewards.detach(),
        rejected_rewards.detach(),
    )


# -- the orchestration backends run ---------------------------------------------------------------


class TokenLogpKernels(Protocol):
    """A backend's two per-token kernels over a ``(rows, vocab)`` logits chunk (unit column
    stride, the backend's own buffer)."""

    def forward(self, logits: Tensor, target: Tensor, ignore_index: int) -> tuple[Tensor, Tensor]:
        """Per row ``(log softmax(logits)[target], logsumexp(logits))`` in float32; the log-prob
        is 0 on rows whose target is ``ignore_index``."""
        ...

    def backward(self, logits: Tensor, target: Tensor, lse: Tensor, coef: Tensor, ignore_index: int) -> None:
        """Overwrite ``logits`` with ``coef_r * (onehot(target_r) - softmax(logits_r))`` (float32
        ``coef`` per row; 0 on ignored rows), i.e. the gradient of ``sum_r coef_r logp_r``."""
        ...

    # Optional: ``scale_in_place(grad, upstream)``, ``grad *= upstream[0]`` on the device, nothing
    # done when it is 1 (see `function_grads`).


def pairs_per_chunk(n_pairs: int, seq: int, vocab: int, budget: int) -> int:
    """Whole pairs per chunk: as many as keep ``2 x pairs x seq x vocab`` logits within
    ``budget`` elements, at least one."""
    per_pair = max(1, 2 * seq * vocab)
    return max(1, min(n_pairs, budget // per_pair))


def _project(x: Tensor, w: Tensor, b: Tensor | None, out: Tensor) -> None:
    if b is None:
        torch.mm(x, w.t(), out=out)
    else:
        torch.addmm(b.to(out.dtype), x, w.t(), out=out)


def _chunk_rows(x: Tensor, rows: list[slice]) -> Tensor:
    """The chunk's sequences (``rows``: runs of whole sequences, e.g. a pair chunk's chosen then its
    rejected ones) as one ``(tokens, hidden)`` matrix: one copy of the hidden states (small beside the
    logits) buys one large GEMM per product instead of one per run; a single run is a view."""
    if len(rows) == 1:
        return x[rows[0]].reshape(-1, x.shape[2])
    return torch.cat([x[r].reshape(-1, x.shape[2]) for r in rows])


def _chunk_logits(x_chunk: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    logits = torch.empty((x_chunk.shape[0], w.shape[0]), dtype=x_chunk.dtype, device=x_chunk.device)
    _project(x_chunk, w, b, logits)
    return logits


ChunkLoss = Callable[[Tensor, Tensor | None], tuple[Tensor, Tensor]]
"""``(logps, ref_logps) -> (loss part, rewards)`` for one chunk's sequences, in the chunk's row
order: ``logps`` (float32, a leaf that may require grad) and ``ref_logps`` (None without a
reference model) theirs; the part is the chunk's float32 share of the op's loss."""


@dataclass
class ChunkResult:
    """What `ChunkStep.run` gives back per chunk, per sequence in the chunk's row order."""

    loss: Tensor  # the chunk's share of the loss (a detached float32 scalar)
    token_logps: Tensor  # (tokens,) float32, 0 on ignored tokens
    logps: Tensor  # (sequences,) float32
    rewards: Tensor  # (sequences,) float32
    logit_sums: Tensor  # (sequences,) float32: logits summed over the vocabulary and the counted tokens


class ChunkStep:
    """One chunk of whole sequences, the step both loops (`fused_linear_pairs`,
    `fused_linear_unpaired`) run: the chunk's logits by one GEMM, per-token log-probs through the
    backend's forward kernel, the chunk's loss and its per-sequence coefficients by autograd, the
    backend's gradient kernel over the logits, then the GEMMs grad_input and grad_weight (the first
    chunk writes grad_weight, the others add: no zero fill) and grad_bias. Construct it before any
    other set-up: it queues the targets' range check (`_losses.PendingLabelStats`) and then the first
    chunk's first GEMM, so the device works while the host prepares; `finish` hands the gradients
    over."""

    def __init__(
        self,
        kernels: TokenLogpKernels,
        input: Tensor,
        weight: Tensor,
        target: Tensor,
        bias: Tensor | None,
        ref_input: Tensor | None,
        ref_weight: Tensor | None,
        ref_bias: Tensor | None,
        ignore_index: int,
        average_log_prob: bool,
        use_ref_model: bool,
        need_input: bool,
        need_weight: bool,
        need_bias: bool,
        op: str,
        first_rows: list[slice] | None,
    ) -> None:
        """``first_rows``: the first chunk's runs of sequences (None: no chunk will run)."""
        self.kernels, self.bias, self.ref_bias = kernels, bias, ref_bias
        self.ignore_index, self.average_log_prob, self.use_ref_model = ignore_index, average_log_prob, use_ref_model
        self.seq, self.hidden = input.shape[1], input.shape[2]
        dev = input.device
        self.x = input.contiguous()
        self.w = weight.to(self.x.dtype).contiguous()
        if use_ref_model:
            self.rx = ref_input.contiguous()
            self.rw = ref_weight.to(self.rx.dtype).contiguous()
        # The targets' range check: three figures copied to the host behind an event, queued first so
        # they are there when the first kernel that indexes by target needs them (no host wait then).
        self.labels = L.PendingLabelStats(op, target, ignore_index, weight.shape[0])
        # The first chunk's first GEMM goes in the queue before the small set-up kernels that follow
        # (the caller's too), so the device has milliseconds of work while the host prepares (an
        # empty queue otherwise idles it). With a reference model its GEMM comes first.
        self._prefetched = self._prefetched_x = None
        if first_rows is not None:
            if use_ref_model:
                with torch.no_grad():
                    self._prefetched = _chunk_logits(_chunk_rows(self.rx, first_rows), self.rw, ref_bias)
            else:
                self._prefetched_x = _chunk_rows(self.x, first_rows)  # kept for the chunk's grad_weight
                self._prefetched = _chunk_logits(self._prefetched_x, self.w, bias)
        self.any_grad = need_input or need_weight or need_bias
        self.grad_x = torch.empty_like(self.x) if need_input else None
        self.grad_w = None
        if need_weight:
            self.grad_w = (torch.empty if first_rows is not None else torch.zeros)(
                weight.shape, dtype=weight.dtype, device=dev
            )
        self.grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=dev) if need_bias else None
        self._first = True

    def _take_prefetched(self) -> Tensor | None:
        logits, self._prefetched = self._prefetched, None
        return logits

    def run(
        self,
        rows: list[slice],
        target: Tensor,
        counts: Tensor,
        chunk_loss: ChunkLoss,
        lead_coef: tuple[int, Tensor] | None = None,
    ) -> ChunkResult:
        """The chunk of the sequences ``rows`` (runs of whole sequences, in this order), ``target``
        and ``counts`` theirs (flat ``(tokens,)``; ``(sequences,)``). ``lead_coef`` = ``(n, c)``: a
        float32 ``c`` added to the first ``n`` tokens' gradient coefficients (a term linear in their
        log-probs, e.g. the paired losses' NLL on the chosen rows)."""
        k, seq, ignore_index = self.kernels, self.seq, self.ignore_index
        ref_logps = None
        if self.use_ref_model:
            with torch.no_grad():
                ref_logits = self._take_prefetched()
                if ref_logits is None:
                    ref_logits = _chunk_logits(_chunk_rows(self.rx, rows), self.rw, self.ref_bias)
                self.labels.result()  # raises naming the first bad target, before a kernel indexes by one
                ref_tok, _ = k.forward(ref_logits, target, ignore_index)
                del ref_logits
            ref_logps = sequence_logps(ref_tok.view(-1, seq), counts, self.average_log_prob)
        x_chunk, self._prefetched_x = self._prefetched_x, None
        logits = self._take_prefetched()
        if logits is None:
            x_chunk = _chunk_rows(self.x, rows)
            logits = _chunk_logits(x_chunk, self.w, self.bias)
        self.labels.result()
        tok, lse = k.forward(logits, target, ignore_index)
        valid = target != ignore_index
        sums = torch.where(valid, logits.sum(-1, dtype=torch.float32), 0.0).view(-1, seq).sum(-1)
        logps = sequence_logps(tok.view(-1, seq), counts, self.average_log_prob)
        with torch.enable_grad():
            lp = logps.detach().requires_grad_(self.any_grad)
            part, rewards = chunk_loss(lp, ref_logps)
            coef = None
            if self.any_grad and part.requires_grad:
                (coef,) = torch.autograd.grad(part, lp, allow_unused=True)
        if self.any_grad:
            coef = torch.zeros_like(lp) if coef is None else coef
            if self.average_log_prob:
                coef = coef / counts.clamp(min=1).float()
            coef = coef.float().repeat_interleave(seq)
            if lead_coef is not None:
                coef[: lead_coef[0]] += lead_coef[1]
            k.backward(logits, target, lse, coef.contiguous(), ignore_index)
            self._add_grads(logits, rows, x_chunk)
        del logits
        return ChunkResult(part.detach(), tok, logps, rewards.detach().float(), sums)

    def _add_grads(self, grad_logits: Tensor, rows: list[slice], x_chunk: Tensor | None) -> None:
        """The chunk's logits gradient carried to the linear layer's operands."""
        if self.grad_x is not None:
            start = 0
            for r in rows:
                n = (r.stop - r.start) * self.seq
                torch.mm(grad_logits[start : start + n], self.w, out=self.grad_x[r].view(-1, self.hidden))
                start += n
        if self.grad_w is not None:
            g, xc = grad_logits.t().to(self.grad_w.dtype), x_chunk.to(self.grad_w.dtype)
            if self._first:
                torch.mm(g, xc, out=self.grad_w)
            else:
                self.grad_w.addmm_(g, xc)
        if self.grad_b is not None:
            self.grad_b += grad_logits.sum(0, dtype=torch.float32)
        self._first = False

    def finish(self) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        """``(grad_input, grad_weight, grad_bias)`` (those asked for, in their tensors' dtypes),
        after the targets' range check (an empty batch, where no chunk ran, has its targets checked
        too)."""
        self.labels.result()
        grad_b = None if self.grad_b is None else self.grad_b.to(self.bias.dtype)
        return self.grad_x, self.grad_w, grad_b


def fused_linear_pairs(
    kernels: TokenLogpKernels,
    input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Tensor | None,
    ref_input: Tensor | None,
    ref_weight: Tensor | None,
    ref_bias: Tensor | None,
    ignore_index: int,
    pair_loss: PairLoss,
    average_log_prob: bool,
    nll_weight: float,
    use_ref_model: bool,
    budget: int,
    need_input: bool,
    need_weight: bool,
    need_bias: bool,
    op: str,
) -> tuple[PairedResult, Tensor | None, Tensor | None, Tensor | None]:
    """The loss, its metrics and the gradients of the loss w.r.t. input, weight and bias (those
    asked for; float32 loss, gradients in their tensors' dtypes), one chunk of whole pairs at a
    time (see the module docstring; each chunk a `ChunkStep` over its chosen then its rejected
    sequences). ``budget``: logits elements per chunk (the backend's)."""
    n_seq, seq, _ = input.shape
    n_pairs = n_seq // 2
    vocab = weight.shape[0]
    dev = input.device
    per_chunk = pairs_per_chunk(n_pairs, seq, vocab, budget)

    def chunk_rows(p0: int) -> list[slice]:
        p1 = min(p0 + per_chunk, n_pairs)
        return [slice(p0, p1), slice(n_pairs + p0, n_pairs + p1)]

    step = ChunkStep(
        kernels, input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index, average_log_prob,
        use_ref_model, need_input, need_weight, need_bias, op, chunk_rows(0) if n_pairs else None,
    )  # fmt: skip
    tgt = target.contiguous()
    counts = token_counts(tgt, ignore_index)
    chosen_tokens = counts[:n_pairs].sum()
    logps = torch.zeros(n_seq, dtype=torch.float32, device=dev)
    rewards = torch.zeros(n_seq, dtype=torch.float32, device=dev)
    logit_sums = torch.zeros(n_seq, dtype=torch.float32, device=dev)
    loss = torch.zeros((), dtype=torch.float32, device=dev)
    nll_sum = torch.zeros((), dtype=torch.float32, device=dev)
    nll_coef = -nll_weight / chosen_tokens.clamp(min=1).float()

    for p0 in range(0, n_pairs, per_chunk):
        n = min(p0 + per_chunk, n_pairs) - p0
        rows = chunk_rows(p0)

        def chunk_loss(lp: Tensor, ref: Tensor | None) -> tuple[Tensor, Tensor]:
            ref_c, ref_r = (None, None) if ref is None else (ref[:n], ref[n:])
            per_pair, c_rewards, r_rewards = pair_loss(lp[:n], lp[n:], ref_c, ref_r)
            return per_pair.float().sum() / n_pairs, torch.cat([c_rewards, r_rewards])

        out = step.run(
            rows,
            torch.cat([tgt[r] for r in rows]).reshape(-1),
            torch.cat([counts[r] for r in rows]),
            chunk_loss,
            (n * seq, nll_coef) if nll_weight else None,
        )
        loss += out.loss
        nll_sum -= out.token_logps[: n * seq].sum()
        for dst, src in ((logps, out.logps), (rewards, out.rewards), (logit_sums, out.logit_sums)):
            dst[rows[0]] = src[:n]
            dst[rows[1]] = src[n:]

    grad_x, grad_w, grad_b = step.finish()
    nll = nll_sum / chosen_tokens.clamp(min=1).float()
    if nll_weight:
        loss = loss + nll_weight * nll
    result = PairedResult(
        loss,
        logps[:n_pairs],
        logps[n_pairs:],
        logit_sums[:n_pairs].sum() / vocab / chosen_tokens.clamp(min=1).float(),
        logit_sums[n_pairs:].sum() / vocab / counts[n_pairs:].sum().clamp(min=1).float(),
        nll,
        rewards[:n_pairs],
        rewards[n_pairs:],
    )
    return result, grad_x, grad_w, grad_b


# -- the autograd Function's two ends (every backend's) ------------------------------------------


def needs_grads(ctx, bias: Tensor | None) -> tuple[bool, bool, bool]:
    """(input, weight, bias) gradients wanted: autograd's flags for argument slots 0, 1, 3."""
    need = ctx.needs_input_grad
    return need[0], need[1], bias is not None and need[3]


def function_outputs(ctx, result: PairedResult, grads: tuple[Tensor | None, ...]) -> tuple[Tensor, ...]:
    """Keep the gradients computed in the forward for `function_grads` and return the outputs,
    every one but the loss marked non-differentiable (logged values)."""
    ctx.fused_grads = grads  # not saved tensors: see `_losses.take_fused_grads`
    ctx.set_materialize_grads(False)
    outs = result.astuple()
    ctx.mark_non_differentiable(*outs[1:])
    return outs


def function_grads(
    ctx, grad_loss: Tensor | None, kernels: TokenLogpKernels | None = None
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """(grad_input, grad_weight, grad_bias): the forward's gradients times the incoming one, handed
    over once (a second backward through the same graph raises). A backend whose kernels have
    ``scale_in_place(grad, upstream)`` scales on the device, skipping the pass when the incoming
    gradient is 1, without the host read (and drained queue) the check costs otherwise."""
    grads = L.take_fused_grads(ctx)
    if grad_loss is None:
        return None, None, None
    scale_in_place = getattr(kernels, "scale_in_place", None)
    if scale_in_place is not None:
        upstream = grad_loss.float().reshape(1)
        for g in grads:
            if g is not None:
                scale_in_place(g, upstream)
        return grads
    if not bool((grad_loss == 1).all()):  # the usual loss.backward() needs no pass over grad_weight
        scale = grad_loss.float()
        grads = tuple(None if g is None else g.mul_(scale) for g in grads)
    return grads


# -- unpaired losses (fused_linear_kto): one sequence at a time -----------------------------------

SequenceLoss = Callable[[Tensor, Tensor | None, slice], tuple[Tensor, Tensor]]
"""``(logps, ref_logps, rows) -> (per-sequence loss, rewards)`` for the sequences ``rows`` of the
batch (``logps`` and ``ref_logps`` theirs, ``ref_logps`` None without a reference model). The op's
loss is the per-sequence loss summed over the batch, divided by the number of sequences."""


def sequences_per_chunk(n_seq: int, seq: int, vocab: int, budget: int) -> int:
    """Whole sequences per chunk: as many as keep ``sequences x seq x vocab`` logits within
    ``budget`` elements, at least one."""
    return max(1, min(n_seq, budget // max(1, seq * vocab)))


def fused_linear_unpaired(
    kernels: TokenLogpKernels,
    input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Tensor | None,
    ref_input: Tensor | None,
    ref_weight: Tensor | None,
    ref_bias: Tensor | None,
    ignore_index: int,
    sequence_loss: SequenceLoss,
    average_log_prob: bool,
    use_ref_model: bool,
    budget: int,
    need_input: bool,
    need_weight: bool,
    need_bias: bool,
    op: str,
) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor], Tensor | None, Tensor | None, Tensor | None]:
    """The unpaired sibling of `fused_linear_pairs`: each sequence's loss depends on that sequence
    alone (its label and batch-wide constants the caller closes over), so chunks are runs of whole
    sequences, each a `ChunkStep`. Returns ``((loss, logps, rewards, logit_sums), grad_input,
    grad_weight, grad_bias)``: the float32 scalar loss, per sequence its log-prob, reward and the
    sum of its logits over the vocabulary and its counted tokens, and the gradients asked for (in
    their tensors' dtypes)."""
    n_seq, seq, _ = input.shape
    dev = input.device
    per_chunk = sequences_per_chunk(n_seq, seq, weight.shape[0], budget)
    step = ChunkStep(
        kernels, input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index, average_log_prob,
        use_ref_model, need_input, need_weight, need_bias, op, [slice(0, per_chunk)] if n_seq else None,
    )  # fmt: skip
    tgt = target.contiguous()
    counts = token_counts(tgt, ignore_index)
    logps = torch.zeros(n_seq, dtype=torch.float32, device=dev)
    rewards = torch.zeros(n_seq, dtype=torch.float32, device=dev)
    logit_sums = torch.zeros(n_seq, dtype=torch.float32, device=dev)
    loss = torch.zeros((), dtype=torch.float32, device=dev)

    for s0 in range(0, n_seq, per_chunk):
        rows = slice(s0, min(s0 + per_chunk, n_seq))

        def chunk_loss(lp: Tensor, ref: Tensor | None, rows: slice = rows) -> tuple[Tensor, Tensor]:
            per_seq, chunk_rewards = sequence_loss(lp, ref, rows)
            return per_seq.float().sum() / n_seq, chunk_rewards

        out = step.run([rows], tgt[rows].reshape(-1), counts[rows], chunk_loss)
        loss += out.loss
        logps[rows] = out.logps
        rewards[rows] = out.rewards
        logit_sums[rows] = out.logit_sums

    return (loss, logps, rewards, logit_sums), *step.finish()


def unpaired_needs_grads(ctx, bias: Tensor | None) -> tuple[bool, bool, bool]:
    """(input, weight, bias) gradients wanted when, as in liger-kernel's unpaired losses, the
    labels come before the bias: autograd's flags for argument slots 0, 1, 4."""
    need = ctx.needs_input_grad
    return need[0], need[1], bias is not None and need[4]


def unpaired_function_outputs(ctx, outs: tuple[Tensor, ...], grads: tuple[Tensor | None, ...]) -> tuple[Tensor, ...]:
    """As `function_outputs`, for a tuple of outputs: the loss first, the rest logged values."""
    ctx.fused_grads = grads  # not saved tensors: see `_losses.take_fused_grads`
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(*outs[1:])
    return outs
