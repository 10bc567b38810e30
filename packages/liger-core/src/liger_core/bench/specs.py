"""One bench spec per op: inputs for a model shape, bytes moved / FLOPs, and how each peer computes it.

A spec builds the op's arguments as keyword arguments named as in the op's contract, so the
same dict feeds this project's op (dispatched, or one backend's), the PyTorch formula, its
``torch.compile`` and every peer adapter. A peer that needs its inputs in another layout
(torch_npu's fused SwiGLU wants ``cat([a, b], -1)``) gets a ``prepare`` step, run outside
the timed region. Random inputs come from a generator of their own seeded by op and shape
(``input_generator``): the same tensors for every provider and every run, and the global RNG
(which a failed CUDA-graph capture can leave unusable on CUDA) is never read.

Bytes moved are the ideal traffic of a fused kernel (each input read once, each output
written once; the same for every provider of a row), so GB/s compare providers on one scale.
FLOPs are given for the ops that contain a matmul (the fused linear losses).

Specs are registered for every op of interface 1.0-1.3; `specs()` returns those whose op is
in the catalogue, so the harness works while ops are still being added.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from liger_core.bench.configs import ModelShape
from liger_core.interface import CATALOGUE

Kwargs = dict[str, Any]
MODES = ("forward", "backward", "full")


@dataclass(frozen=True)
class Peer:
    """A provider outside this project for one op.

    ``load()`` imports the peer and returns a callable taking the spec's keyword arguments
    (after ``prepare``); ImportError means the peer is not installed.
    """

    load: Callable[[], Callable[..., Any]]
    prepare: Callable[[Kwargs], Kwargs] | None = None
    note: str = ""


@dataclass(frozen=True)
class BenchSpec:
    op: str
    # ModelShape fields the input shapes depend on (the axes a sweep can vary for this op).
    axes: tuple[str, ...]
    # (shape, dtype, device, generator) -> the op's keyword arguments; every random input is drawn
    # from the generator (``input_generator(op, shape, device)``), never the global RNG.
    build: Callable[[ModelShape, torch.dtype, torch.device, torch.Generator], Kwargs]
    torch_fn: Callable[..., Any]
    # Ideal bytes moved for (forward, backward) at a shape and element size.
    traffic: Callable[[ModelShape, int], tuple[int, int]]
    describe: Callable[[ModelShape], str]
    # FLOPs for (forward, backward), for ops containing a matmul.
    flops: Callable[[ModelShape], tuple[int, int]] | None = None
    peers: dict[str, Peer] = field(default_factory=dict)

    def inputs(self, shape: ModelShape, dtype: torch.dtype, device: torch.device | str) -> Kwargs:
        """The op's arguments at ``shape``: the same tensors on every call (see ``input_generator``)."""
        return self.build(shape, dtype, torch.device(device), input_generator(self.op, shape, device))

    def bytes_moved(self, shape: ModelShape, dtype: torch.dtype, mode: str) -> int:
        fwd, bwd = self.traffic(shape, torch.empty((), dtype=dtype).element_size())
        return {"forward": fwd, "backward": bwd, "full": fwd + bwd}[mode]

    def flop_count(self, shape: ModelShape, mode: str) -> int | None:
        if self.flops is None:
            return None
        fwd, bwd = self.flops(shape)
        return {"forward": fwd, "backward": bwd, "full": fwd + bwd}[mode]


# -- input helpers -----------------------------------------------------------------------------


def seeded_generator(seed: int, device: torch.device | str) -> torch.Generator:
    """A generator of its own on ``device`` (the CPU's where the device has none), seeded ``seed``."""
    try:
        gen = torch.Generator(device=device)
    except RuntimeError:  # a device plugin without generators: draw on the CPU, then copy over
        gen = torch.Generator()
    return gen.manual_seed(seed)


def input_generator(op: str, shape: ModelShape, device: torch.device | str) -> torch.Generator:
    """The generator every random input of ``op`` at ``shape`` is drawn from.

    Seeded from the op and the shape's sizes, so each provider (this project, torch, every peer)
    and the reference output get the same inputs, run after run. Never PyTorch's default
    generator: a CUDA-graph capture that fails (a peer syncing with the host inside the timed
    call) leaves the default CUDA generator unusable for eager random ops, and a benchmark must
    not consume or depend on the caller's global RNG either.
    """
    sizes = ",".join(f"{k}={v}" for k, v in shape.as_dict().items() if k != "name")
    return seeded_generator(zlib.crc32(f"{op}:{sizes}".encode()), device)


def randn(shape, gen: torch.Generator, device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal float32 draws from ``gen`` (on its device), as ``dtype`` on ``device``."""
    return torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32).to(device=device, dtype=dtype)


def _randn(shape, dtype, device, gen, grad=True, scale=1.0, shift=0.0) -> torch.Tensor:
    t = randn(shape, gen, device) * scale + shift
    return t.to(dtype).requires_grad_(grad)


def _log_probs(rows, cols, dtype, device, gen, grad) -> torch.Tensor:
    return randn((rows, cols), gen, device).log_softmax(-1).to(dtype).requires_grad_(grad)


def _probs(rows, cols, dtype, device, gen, grad) -> torch.Tensor:
    return randn((rows, cols), gen, device).softmax(-1).to(dtype).requires_grad_(grad)


def _targets(rows, vocab, device, gen) -> torch.Tensor:
    return torch.randint(0, vocab, (rows,), generator=gen, device=gen.device).to(device)


def _dims(*pairs: tuple[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in pairs)


def _mrope_section(head_dim: int) -> list[int]:
    # Qwen2-VL's split of head_dim/2 rotary frequencies into (temporal, height, width):
    # [16, 24, 24] at head_dim 128, scaled for other head sizes.
    half = head_dim // 2
    t = max(1, half // 4)
    h = (half - t) // 2
    return [t, h, half - t - h]


def _group_norm_dims(s: ModelShape) -> tuple[int, int, int, int]:
    """(batch, channels, groups, spatial): the (tokens, hidden) elements as a conv-style tensor
    with GroupNorm(32, 128) as in diffusion U-Nets (4 channels a group). ``--batch 32 --tokens
    8192`` at hidden 4096 gives the issue's 32 x 128 x 8192, 32 groups."""
    channels = min(128, s.hidden)
    groups = max(1, min(32, channels // 4))
    batch = s.batch
    spatial = max(1, s.tokens * s.hidden // (batch * channels))
    return batch, channels, groups, spatial


def _rotary(lead: tuple[int, ...], s: ModelShape, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of real rotary angles, (*lead, seq, head_dim) (a rotation keeps q and k's scale,
    so peers that rotate in place do not drift to inf over thousands of timed calls)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, s.head_dim, 2, device=device, dtype=torch.float32) / s.head_dim))
    pos = torch.arange(s.seq, device=device, dtype=torch.float32)
    angles = torch.outer(pos, inv_freq).repeat(1, 2)  # (seq, head_dim), the halves duplicated
    angles = angles.expand(*lead, s.seq, s.head_dim).contiguous()
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rope_qk(s: ModelShape, dtype, device, gen):
    q = _randn((s.batch, s.heads, s.seq, s.head_dim), dtype, device, gen)
    k = _randn((s.batch, s.kv_heads, s.seq, s.head_dim), dtype, device, gen)
    return q, k


# -- PyTorch formulas (what a model runs without fused kernels) ---------------------------------


def _torch_rms_norm(x, weight=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
    # transformers' LlamaRMSNorm (casting_mode "llama").
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (offset + weight) * h.to(x.dtype)


def _torch_fused_add_rms_norm(x, residual, weight=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
    s = x + residual
    return _torch_rms_norm(s, weight, eps, offset), s


def _torch_layer_norm(x, weight=None, bias=None, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _torch_group_norm(x, weight, bias, num_channels, num_groups, eps=1e-5):
    return F.group_norm(x, num_groups, weight, bias, eps)


def _torch_poly_norm(x, weight, bias, eps=1e-6):
    def n(u):
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)

    return weight[0] * n(x**3) + weight[1] * n(x**2) + weight[2] * n(x) + bias


def _torch_dyt(x, alpha, gamma, beta):
    y = gamma * torch.tanh(alpha * x)
    return y if beta is None else y + beta


def _torch_swiglu(a, b, in_place=False):
    return F.silu(a) * b


def _torch_geglu(a, b, in_place=False):
    return F.gelu(a, approximate="tanh") * b


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _torch_rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    # transformers' apply_rotary_pos_emb.
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _torch_qwen2vl_mrope(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    # transformers' apply_multimodal_rotary_pos_emb (Qwen2-VL).
    sections = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sections, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sections, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _torch_softmax(x):
    return torch.softmax(x, dim=-1)


def _torch_sparsemax(x, dim=-1):
    z = x.transpose(dim, -1).float()
    z_sorted, _ = torch.sort(z, dim=-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)
    cumsum = z_sorted.cumsum(-1)
    support = (1 + k * z_sorted) > cumsum
    k_z = support.sum(-1, keepdim=True)
    tau = (cumsum.gather(-1, k_z - 1) - 1) / k_z
    return torch.clamp(z - tau, min=0).to(x.dtype).transpose(dim, -1)


def _torch_cross_entropy(
    logits,
    target,
    weight=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    return_z_loss=False,
    in_place=False,
):
    # transformers' causal-LM loss: logits upcast to float32, then F.cross_entropy (in_place: ignored).
    return F.cross_entropy(
        logits.float(),
        target,
        weight=weight,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        reduction=reduction,
    )


def _torch_fused_linear_cross_entropy(
    input,
    weight,
    target,
    bias=None,
    ce_weight=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    return_z_loss=False,
    accum_dtype=None,
):
    logits = F.linear(input, weight, bias)
    return _torch_cross_entropy(logits, target, ce_weight, ignore_index, 0.0, label_smoothing, reduction)


def _torch_kl_div(y_pred, y_true, reduction="batchmean", log_target=False, eps=1e-10):
    return F.kl_div(y_pred, y_true, reduction=reduction, log_target=log_target)


def _torch_jsd(student_logp, teacher_logp, shift_labels=None, beta=0.5, ignore_index=-100):
    # Generalised JSD: beta * KL(P || M) + (1 - beta) * KL(Q || M), M = beta * P + (1 - beta) * Q,
    # P the teacher, Q the student; summed over the vocabulary, mean over the tokens.
    q, p = student_logp.float(), teacher_logp.float()
    log_m = torch.logsumexp(torch.stack([p + math.log(beta), q + math.log(1 - beta)]), dim=0)
    per_token = beta * (p.exp() * (p - log_m)).sum(-1) + (1 - beta) * (q.exp() * (q - log_m)).sum(-1)
    return per_token.sum() / per_token.shape[0]


def _torch_tvd(p, q, shift_labels=None, reduction="batchmean", ignore_index=-100):
    return 0.5 * (p.float() - q.float()).abs().sum() / p.shape[0]


def _torch_fused_linear_jsd(
    student_input,
    student_weight,
    teacher_input,
    teacher_weight,
    shift_labels=None,
    jsd_beta=0.5,
    ignore_index=-100,
    temperature=1.0,
):
    student = (F.linear(student_input, student_weight) / temperature).float().log_softmax(-1)
    teacher = (F.linear(teacher_input, teacher_weight) / temperature).float().log_softmax(-1)
    return _torch_jsd(student, teacher, shift_labels, jsd_beta, ignore_index)


# -- peers --------------------------------------------------------------------------------------


def _lk(name: str) -> Callable[[], Callable[..., Any]]:
    """liger-kernel 0.8.5's functional entry point ``name``, imported when first used."""

    def load():
        from liger_kernel.transformers import functional as lkf

        return getattr(lkf, name)

    return load


def _lk_adapter(name: str, call: Callable[..., Any]) -> Peer:
    def load():
        fn = _lk(name)()
        return lambda **kw: call(fn, **kw)

    return Peer(load)


def _lk_args(name: str, positional: tuple[str, ...], keywords: tuple[str, ...] = ()) -> Peer:
    """liger-kernel's ``name`` called with the spec's arguments: ``positional`` in order, then
    ``keywords`` by name."""

    def load():
        fn = _lk(name)()
        return lambda **kw: fn(*(kw[k] for k in positional), **{k: kw[k] for k in keywords})

    return Peer(load)


def _npu(call: Callable[..., Any], prepare: Callable[[Kwargs], Kwargs] | None = None) -> Peer:
    def load():
        import torch_npu

        return lambda **kw: call(torch_npu, **kw)

    return Peer(load, prepare, note="torch_npu's fused op (written from its documented API; untested without an NPU)")


def _cat_ab(kw: Kwargs) -> Kwargs:
    # torch_npu's fused gated activations take the two halves as one tensor.
    ab = torch.cat([kw["a"].detach(), kw["b"].detach()], dim=-1).requires_grad_()
    return {"ab": ab}


def _cce_load():
    from cut_cross_entropy import linear_cross_entropy

    def call(input, weight, target, bias=None, ignore_index=-100, reduction="mean", softcap=None, **_):
        if bias is not None:
            raise ValueError("cut-cross-entropy takes no bias")
        return linear_cross_entropy(
            input, weight, target, ignore_index=ignore_index, softcap=softcap, reduction=reduction
        )

    return call


LIGER_KERNEL = "liger-kernel"
CUT_CROSS_ENTROPY = "cut-cross-entropy"
TORCH_NPU = "torch_npu"


# -- the specs ----------------------------------------------------------------------------------


def _norm_rows(s: ModelShape) -> str:
    return _dims(("tokens", s.tokens), ("hidden", s.hidden))


def _rope_text(s: ModelShape) -> str:
    return _dims(
        ("batch", s.batch), ("seq", s.seq), ("heads", s.heads), ("kv_heads", s.kv_heads), ("head_dim", s.head_dim)
    )


def _vocab_rows(s: ModelShape) -> str:
    return _dims(("tokens", s.tokens), ("vocab", s.vocab))


def _linear_rows(s: ModelShape) -> str:
    return _dims(("tokens", s.tokens), ("hidden", s.hidden), ("vocab", s.vocab))


def _all_specs() -> dict[str, BenchSpec]:
    specs = [
        BenchSpec(
            "rms_norm",
            ("tokens", "hidden"),
            lambda s, dt, dev, gen: dict(
                x=_randn((s.tokens, s.hidden), dt, dev, gen),
                weight=_randn((s.hidden,), dt, dev, gen, scale=0.1, shift=1.0),
                eps=1e-6,
                offset=0.0,
                casting_mode="llama",
                in_place=False,
            ),
            _torch_rms_norm,
            lambda s, e: (
                2 * s.tokens * s.hidden * e + s.hidden * e + 4 * s.tokens,
                3 * s.tokens * s.hidden * e + 2 * s.hidden * e + 4 * s.tokens,
            ),
            _norm_rows,
            peers={
                # liger-kernel's LigerRMSNorm defaults: in_place=True.
                LIGER_KERNEL: _lk_adapter(
                    "liger_rms_norm",
                    lambda f, x, weight, eps, offset, casting_mode, in_place: f(
                        x, weight, eps, offset, casting_mode, True
                    ),
                ),
                TORCH_NPU: _npu(lambda m, x, weight, eps, **_: m.npu_rms_norm(x, weight, epsilon=eps)[0]),
            },
        ),
        BenchSpec(
            "fused_add_rms_norm",
            ("tokens", "hidden"),
            lambda s, dt, dev, gen: dict(
                x=_randn((s.tokens, s.hidden), dt, dev, gen),
                residual=_randn((s.tokens, s.hidden), dt, dev, gen),
                weight=_randn((s.hidden,), dt, dev, gen, scale=0.1, shift=1.0),
                eps=1e-6,
                offset=0.0,
                casting_mode="llama",
                in_place=False,
            ),
            _torch_fused_add_rms_norm,
            # forward: read x, residual, weight; write y, x + residual, rstd. backward: read the two
            # incoming gradients, the sum, weight, rstd; write one gradient (x's and residual's are equal).
            lambda s, e: (
                4 * s.tokens * s.hidden * e + s.hidden * e + 4 * s.tokens,
                4 * s.tokens * s.hidden * e + 2 * s.hidden * e + 4 * s.tokens,
            ),
            _norm_rows,
            peers={
                LIGER_KERNEL: _lk_adapter(
                    "liger_fused_add_rms_norm",
                    lambda f, x, residual, weight, eps, offset, casting_mode, in_place: f(
                        x, residual, weight, eps, offset, casting_mode, False
                    ),
                ),
                TORCH_NPU: _npu(
                    lambda m, x, residual, weight, eps, **_: (lambda out: (out[0], out[2]))(
                        m.npu_add_rms_norm(x, residual, weight, epsilon=eps)
                    )
                ),
            },
        ),
        BenchSpec(
            "layer_norm",
            ("tokens", "hidden"),
            lambda s, dt, dev, gen: dict(
                x=_randn((s.tokens, s.hidden), dt, dev, gen),
                weight=_randn((s.hidden,), dt, dev, gen, scale=0.1, shift=1.0),
                bias=_randn((s.hidden,), dt, dev, gen, scale=0.1),
                eps=1e-5,
            ),
            _torch_layer_norm,
            lambda s, e: (
                2 * s.tokens * s.hidden * e + 2 * s.hidden * e + 8 * s.tokens,
                3 * s.tokens * s.hidden * e + 4 * s.hidden * e + 8 * s.tokens,
            ),
            _norm_rows,
            peers={
                LIGER_KERNEL: _lk_adapter("liger_layer_norm", lambda f, x, weight, bias, eps: f(x, weight, bias, eps))
            },
        ),
        BenchSpec(
            "group_norm",
            ("tokens", "hidden", "batch"),
            lambda s, dt, dev, gen: (
                lambda b, c, g, n: dict(
                    x=_randn((b, c, n), dt, dev, gen),
                    weight=_randn((c,), dt, dev, gen, scale=0.1, shift=1.0),
                    bias=_randn((c,), dt, dev, gen, scale=0.1),
                    num_channels=c,
                    num_groups=g,
                    eps=1e-5,
                )
            )(*_group_norm_dims(s)),
            _torch_group_norm,
            lambda s, e: (
                lambda b, c, g, n: (
                    2 * b * c * n * e + 2 * c * e + 8 * b * g,
                    3 * b * c * n * e + 4 * c * e + 8 * b * g,
                )
            )(*_group_norm_dims(s)),
            lambda s: (lambda b, c, g, n: _dims(("batch", b), ("channels", c), ("groups", g), ("spatial", n)))(
                *_group_norm_dims(s)
            ),
            peers={
                LIGER_KERNEL: _lk_adapter(
                    "liger_group_norm",
                    lambda f, x, weight, bias, num_channels, num_groups, eps: f(
                        x, weight, bias, num_channels, num_groups, eps
                    ),
                )
            },
        ),
        BenchSpec(
            "poly_norm",
            ("tokens", "hidden"),
            lambda s, dt, dev, gen: dict(
                x=_randn((s.tokens, s.hidden), dt, dev, gen),
                weight=torch.tensor([0.3, 0.4, 0.5], device=dev, dtype=dt).requires_grad_(),
                bias=torch.tensor([0.1], device=dev, dtype=dt).requires_grad_(),
                eps=1e-6,
            ),
            _torch_poly_norm,
            lambda s, e: (2 * s.tokens * s.hidden * e + 12 * s.tokens, 3 * s.tokens * s.hidden * e + 12 * s.tokens),
            _norm_rows,
            peers={
                # liger-kernel's LigerPolyNorm defaults: in_place=True; its bias is 0-d (a (1,)
                # bias gets a 0-d gradient back, which autograd rejects), so it gets a 0-d view.
                LIGER_KERNEL: _lk_adapter(
                    "liger_poly_norm", lambda f, x, weight, bias, eps: f(x, weight, bias.view(()), eps, True)
                )
            },
        ),
        BenchSpec(
            "dyt",
            ("tokens", "hidden"),
            lambda s, dt, dev, gen: dict(
                x=_randn((s.tokens, s.hidden), dt, dev, gen),
                alpha=torch.tensor([0.5], device=dev, dtype=dt).requires_grad_(),
                gamma=_randn((s.hidden,), dt, dev, gen, scale=0.1, shift=1.0),
                beta=_randn((s.hidden,), dt, dev, gen, scale=0.1),
            ),
            _torch_dyt,
            lambda s, e: (
                2 * s.tokens * s.hidden * e + 2 * s.hidden * e,
                3 * s.tokens * s.hidden * e + 4 * s.hidden * e,
            ),
            _norm_rows,
            peers={LIGER_KERNEL: _lk_adapter("liger_dyt", lambda f, x, alpha, gamma, beta: f(x, alpha, gamma, beta))},
        ),
        BenchSpec(
            "swiglu",
            ("tokens", "intermediate"),
            lambda s, dt, dev, gen: dict(
                a=_randn((s.tokens, s.intermediate), dt, dev, gen),
                b=_randn((s.tokens, s.intermediate), dt, dev, gen),
                in_place=False,
            ),
            _torch_swiglu,
            lambda s, e: (3 * s.tokens * s.intermediate * e, 5 * s.tokens * s.intermediate * e),
            lambda s: _dims(("tokens", s.tokens), ("intermediate", s.intermediate)),
            peers={
                LIGER_KERNEL: _lk_adapter("liger_swiglu", lambda f, a, b, in_place: f(a, b)),
                TORCH_NPU: _npu(lambda m, ab: m.npu_swiglu(ab, dim=-1), _cat_ab),
            },
        ),
        BenchSpec(
            "geglu",
            ("tokens", "intermediate"),
            lambda s, dt, dev, gen: dict(
                a=_randn((s.tokens, s.intermediate), dt, dev, gen),
                b=_randn((s.tokens, s.intermediate), dt, dev, gen),
                in_place=False,
            ),
            _torch_geglu,
            lambda s, e: (3 * s.tokens * s.intermediate * e, 5 * s.tokens * s.intermediate * e),
            lambda s: _dims(("tokens", s.tokens), ("intermediate", s.intermediate)),
            peers={
                LIGER_KERNEL: _lk_adapter("liger_geglu", lambda f, a, b, in_place: f(a, b)),
                # approximate=1: tanh GELU; activate_left: the GELU applies to the first half (a).
                TORCH_NPU: _npu(lambda m, ab: m.npu_geglu(ab, dim=-1, approximate=1, activate_left=True)[0], _cat_ab),
            },
        ),
        BenchSpec(
            "rope",
            ("tokens", "batch", "heads", "kv_heads", "head_dim"),
            lambda s, dt, dev, gen: (
                lambda qk, cs: dict(q=qk[0], k=qk[1], cos=cs[0], sin=cs[1], position_ids=None, unsqueeze_dim=1)
            )(_rope_qk(s, dt, dev, gen), _rotary((1,), s, dt, dev)),
            _torch_rope,
            lambda s, e: (
                2 * s.batch * s.seq * s.head_dim * (s.heads + s.kv_heads) * e + 2 * s.seq * s.head_dim * e,
                2 * s.batch * s.seq * s.head_dim * (s.heads + s.kv_heads) * e + 2 * s.seq * s.head_dim * e,
            ),
            _rope_text,
            peers={
                LIGER_KERNEL: _lk_adapter(
                    "liger_rope",
                    lambda f, q, k, cos, sin, position_ids, unsqueeze_dim: f(
                        q, k, cos, sin, position_ids, unsqueeze_dim
                    ),
                ),
                TORCH_NPU: _npu(
                    lambda m, q, k, cos, sin, unsqueeze_dim, **_: (
                        m.npu_rotary_mul(q, cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)),
                        m.npu_rotary_mul(k, cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)),
                    )
                ),
            },
        ),
        BenchSpec(
            "qwen2vl_mrope",
            ("tokens", "batch", "heads", "kv_heads", "head_dim"),
            lambda s, dt, dev, gen: (
                lambda qk, cs: dict(
                    q=qk[0],
                    k=qk[1],
                    cos=cs[0],
                    sin=cs[1],
                    mrope_section=_mrope_section(s.head_dim),
                    unsqueeze_dim=1,
                )
            )(_rope_qk(s, dt, dev, gen), _rotary((3, s.batch), s, dt, dev)),
            _torch_qwen2vl_mrope,
            lambda s, e: (
                2 * s.batch * s.seq * s.head_dim * (s.heads + s.kv_heads + 3) * e,
                2 * s.batch * s.seq * s.head_dim * (s.heads + s.kv_heads + 3) * e,
            ),
            _rope_text,
            peers={
                LIGER_KERNEL: _lk_adapter(
                    "liger_qwen2vl_mrope",
                    lambda f, q, k, cos, sin, mrope_section, unsqueeze_dim: f(
                        q, k, cos, sin, mrope_section, unsqueeze_dim
                    ),
                )
            },
        ),
        BenchSpec(
            "softmax",
            ("tokens", "hidden"),
            lambda s, dt, dev, gen: dict(x=_randn((s.tokens, s.hidden), dt, dev, gen)),
            _torch_softmax,
            lambda s, e: (2 * s.tokens * s.hidden * e, 3 * s.tokens * s.hidden * e),
            _norm_rows,
            peers={LIGER_KERNEL: _lk_adapter("liger_softmax", lambda f, x: f(x))},
        ),
        BenchSpec(
            "sparsemax",
            ("tokens", "hidden"),
            lambda s, dt, dev, gen: dict(x=_randn((s.tokens, s.hidden), dt, dev, gen), dim=-1),
            _torch_sparsemax,
            lambda s, e: (2 * s.tokens * s.hidden * e, 3 * s.tokens * s.hidden * e),
            _norm_rows,
            peers={LIGER_KERNEL: _lk_adapter("liger_sparsemax", lambda f, x, dim: f(x, dim))},
        ),
        BenchSpec(
            "cross_entropy",
            ("tokens", "vocab"),
            lambda s, dt, dev, gen: dict(
                logits=_randn((s.tokens, s.vocab), dt, dev, gen),
                target=_targets(s.tokens, s.vocab, dev, gen),
                weight=None,
                ignore_index=-100,
                lse_square_scale=0.0,
                label_smoothing=0.0,
                reduction="mean",
                softcap=None,
                return_z_loss=False,
                # liger-kernel's cross-entropy always writes the gradient into the logits; our op
                # does so only when asked, so ask: both then save the same logits-sized buffer.
                in_place=True,
            ),
            _torch_cross_entropy,
            # forward reads the logits; backward reads them again and writes their gradient.
            lambda s, e: (s.tokens * s.vocab * e + 8 * s.tokens, 2 * s.tokens * s.vocab * e + 8 * s.tokens),
            _vocab_rows,
            peers={
                LIGER_KERNEL: _lk_args(
                    "liger_cross_entropy",
                    ("logits", "target", "weight"),
                    ("ignore_index", "reduction", "label_smoothing", "lse_square_scale", "softcap", "return_z_loss"),
                ),
                TORCH_NPU: _npu(
                    lambda m, logits, target, ignore_index, reduction, label_smoothing, **_: m.npu_cross_entropy_loss(
                        logits, target, reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing
                    )[0]
                ),
            },
        ),
        BenchSpec(
            "fused_linear_cross_entropy",
            ("tokens", "hidden", "vocab"),
            lambda s, dt, dev, gen: dict(
                input=_randn((s.tokens, s.hidden), dt, dev, gen),
                weight=_randn((s.vocab, s.hidden), dt, dev, gen, scale=1 / math.sqrt(s.hidden)),
                target=_targets(s.tokens, s.vocab, dev, gen),
                bias=None,
                ce_weight=None,
                ignore_index=-100,
                lse_square_scale=0.0,
                label_smoothing=0.0,
                reduction="mean",
                softcap=None,
                return_z_loss=False,
                accum_dtype=None,
            ),
            _torch_fused_linear_cross_entropy,
            lambda s, e: (
                (s.tokens + s.vocab) * s.hidden * e + 8 * s.tokens,
                3 * (s.tokens + s.vocab) * s.hidden * e + 8 * s.tokens,
            ),
            _linear_rows,
            # forward: the logits matmul; backward: the input and weight gradients.
            flops=lambda s: (2 * s.tokens * s.hidden * s.vocab, 4 * s.tokens * s.hidden * s.vocab),
            peers={
                LIGER_KERNEL: _lk_args(
                    "liger_fused_linear_cross_entropy",
                    (
                        "input",
                        "weight",
                        "target",
                        "bias",
                        "ce_weight",
                        "ignore_index",
                        "lse_square_scale",
                        "label_smoothing",
                        "reduction",
                        "softcap",
                        "return_z_loss",
                        "accum_dtype",
                    ),
                ),
                CUT_CROSS_ENTROPY: Peer(_cce_load),
            },
        ),
        BenchSpec(
            "kl_div",
            ("tokens", "vocab"),
            lambda s, dt, dev, gen: dict(
                y_pred=_log_probs(s.tokens, s.vocab, dt, dev, gen, True),
                y_true=_probs(s.tokens, s.vocab, dt, dev, gen, False),
                reduction="batchmean",
                log_target=False,
                eps=1e-10,
            ),
            _torch_kl_div,
            lambda s, e: (2 * s.tokens * s.vocab * e, 2 * s.tokens * s.vocab * e),
            _vocab_rows,
            peers={
                LIGER_KERNEL: _lk_adapter(
                    "liger_kl_div",
                    lambda f, y_pred, y_true, reduction, log_target, eps: f(
                        y_pred, y_true, reduction=reduction, log_target=log_target, eps=eps
                    ),
                )
            },
        ),
        BenchSpec(
            "jsd",
            ("tokens", "vocab"),
            lambda s, dt, dev, gen: dict(
                student_logp=_log_probs(s.tokens, s.vocab, dt, dev, gen, True),
                teacher_logp=_log_probs(s.tokens, s.vocab, dt, dev, gen, False),
                shift_labels=None,
                beta=0.5,
                ignore_index=-100,
            ),
            _torch_jsd,
            lambda s, e: (2 * s.tokens * s.vocab * e, 3 * s.tokens * s.vocab * e),
            _vocab_rows,
            peers={
                LIGER_KERNEL: _lk_adapter(
                    "liger_jsd",
                    lambda f, student_logp, teacher_logp, shift_labels, beta, ignore_index: f(
                        student_logp, teacher_logp, shift_labels, beta, ignore_index
                    ),
                )
            },
        ),
        BenchSpec(
            "tvd",
            ("tokens", "vocab"),
            lambda s, dt, dev, gen: dict(
                p=_probs(s.tokens, s.vocab, dt, dev, gen, True),
                q=_probs(s.tokens, s.vocab, dt, dev, gen, False),
                shift_labels=None,
                reduction="batchmean",
                ignore_index=-100,
            ),
            _torch_tvd,
            lambda s, e: (2 * s.tokens * s.vocab * e, 3 * s.tokens * s.vocab * e),
            _vocab_rows,
            peers={
                LIGER_KERNEL: _lk_adapter(
                    "liger_tvd",
                    lambda f, p, q, shift_labels, reduction, ignore_index: f(
                        p, q, shift_labels, reduction, ignore_index
                    ),
                )
            },
        ),
        BenchSpec(
            "fused_linear_jsd",
            ("tokens", "hidden", "vocab"),
            lambda s, dt, dev, gen: dict(
                student_input=_randn((s.tokens, s.hidden), dt, dev, gen),
                student_weight=_randn((s.vocab, s.hidden), dt, dev, gen, scale=1 / math.sqrt(s.hidden)),
                teacher_input=_randn((s.tokens, s.hidden), dt, dev, gen, grad=False),
                teacher_weight=_randn((s.vocab, s.hidden), dt, dev, gen, grad=False, scale=1 / math.sqrt(s.hidden)),
                shift_labels=None,
                jsd_beta=0.5,
                ignore_index=-100,
                temperature=1.0,
            ),
            _torch_fused_linear_jsd,
            lambda s, e: (
                2 * (s.tokens + s.vocab) * s.hidden * e,
                3 * (s.tokens + s.vocab) * s.hidden * e + 2 * (s.tokens + s.vocab) * s.hidden * e,
            ),
            _linear_rows,
            # forward: student and teacher logits; backward: the student's input and weight gradients.
            flops=lambda s: (4 * s.tokens * s.hidden * s.vocab, 4 * s.tokens * s.hidden * s.vocab),
            peers={
                LIGER_KERNEL: _lk_args(
                    "liger_fused_linear_jsd",
                    (
                        "student_input",
                        "student_weight",
                        "teacher_input",
                        "teacher_weight",
                        "shift_labels",
                        "jsd_beta",
                        "ignore_index",
                        "temperature",
                    ),
                )
            },
        ),
    ]
    return {s.op: s for s in specs}


ALL_SPECS: dict[str, BenchSpec] = _all_specs()


# Named groups for --ops (interface 1.1, 1.2, 1.3 and rms_norm with the norms).
GROUPS: dict[str, tuple[str, ...]] = {
    "norms": ("rms_norm", "fused_add_rms_norm", "layer_norm", "group_norm", "poly_norm", "dyt"),
    "activations": ("swiglu", "geglu", "rope", "qwen2vl_mrope", "softmax", "sparsemax"),
    "losses": ("cross_entropy", "fused_linear_cross_entropy", "kl_div", "jsd", "fused_linear_jsd", "tvd"),
}


def specs() -> dict[str, BenchSpec]:
    """The specs of the ops in the catalogue now, in catalogue order."""
    return {op: ALL_SPECS[op] for op in CATALOGUE if op in ALL_SPECS}


def missing_specs() -> list[str]:
    """Catalogue ops without a bench spec (they cannot be benchmarked until one is added here)."""
    return [op for op in CATALOGUE if op not in ALL_SPECS]
