"""The `rms_norm` op: root-mean-square normalisation (LLaMA, Mistral, Qwen, Gemma), declared once.

Every backend's `rms_norm` takes exactly the parameters of `rms_norm` below and has the
semantics of its docstring; the function itself is the PyTorch reference (the fallback where
no vendor backend serves a device), `math` the float64 oracle of the conformance suite.
"""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, Sharding, bad, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_eps, check_param, check_rows, param_ok

CASTING_MODES = ("llama", "gemma", "none")


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    """Root-mean-square normalisation over the last dimension.

    ``y = x / sqrt(mean(x**2, -1) + eps) * (offset + weight)``

    Args:
        x: ``(..., hidden)``, float32, bfloat16 or float16. Any layout; rows are read
            as a contiguous ``(-1, hidden)`` view (a copy is made if needed).
        weight: ``(hidden,)`` scale, or None for no scale (``offset`` is then unused).
            Its dtype may differ from ``x``'s (e.g. float32 weights with bf16 input).
        eps: added to the mean square before the reciprocal square root; ``>= 0``.
        offset: added to ``weight`` (Gemma stores ``weight - 1`` and uses 1.0).
        casting_mode: where the computation leaves ``x``'s dtype, as the models do:

            - ``"llama"``: ``x`` is normalised in float32, the result cast back to
              ``x.dtype`` and then multiplied by ``offset + weight`` (LLaMA, Mistral, Qwen).
            - ``"gemma"``: everything in float32, cast to ``x.dtype`` at the end (Gemma).
            - ``"none"``: normalisation and scale in ``x.dtype``.
        in_place: allow the backward pass to write ``grad_x`` into the memory of the
            incoming gradient of the output (saves one activation-sized buffer). The
            caller opts in; ``x`` and ``weight`` are never modified.

    Returns:
        ``y`` with ``x``'s shape and dtype. Backward gives ``grad_x`` (``x.dtype``) and
        ``grad_weight`` (``weight.dtype``).
    """
    check_args(x, weight, eps, offset, casting_mode, in_place)
    return math(x, weight, eps, offset, casting_mode, in_place)


def check_args(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float, casting_mode: str, in_place: bool
) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first.

    One cheap predicate on the hot path (this runs on every call); the slow path then
    finds and names what is wrong.
    """
    try:
        if x.dtype in FLOAT_DTYPES and x.ndim > 0 and norm_options_ok(x, weight, eps, offset, casting_mode):
            return
    except (AttributeError, TypeError):
        pass
    check_rows("rms_norm", x)
    check_norm_options("rms_norm", x, weight, eps, offset, casting_mode)
    # Nothing wrong after all (an unusual but valid type the fast path did not expect).


def check_casting_mode(op: str, casting_mode: str) -> None:
    if casting_mode not in CASTING_MODES:
        raise ValueError(f"{op}: casting_mode must be one of {CASTING_MODES}; got {casting_mode!r}")


def norm_options_ok(x: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float, casting_mode: str) -> bool:
    """The fast-path test of the RMSNorm options (see `check_norm_options`)."""
    return casting_mode in CASTING_MODES and eps >= 0 and isinstance(offset, (float, int)) and param_ok(weight, x)


def check_norm_options(
    op: str, x: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float, casting_mode: str
) -> None:
    """The slow-path checks of the RMSNorm options (``rms_norm``'s and ``fused_add_rms_norm``'s)."""
    check_param(op, "weight", weight, x)
    check_casting_mode(op, casting_mode)
    check_eps(op, eps)
    if not isinstance(offset, (int, float)):
        raise TypeError(f"{op}: offset must be a float; got {type(offset).__name__}")


def math(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float, casting_mode: str, in_place: bool
) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    dtype = x.dtype
    compute = x if casting_mode == "none" or dtype == torch.float64 else x.float()
    x_hat = compute * torch.rsqrt(compute.pow(2).mean(-1, keepdim=True) + eps)
    if weight is None:
        return x_hat.to(dtype)
    if casting_mode == "llama":
        return (x_hat.to(dtype) * (offset + weight)).to(dtype)
    if casting_mode == "gemma":
        return (x_hat * (offset + weight.to(compute.dtype))).to(dtype)
    return (x_hat * (offset + weight).to(dtype)).to(dtype)


def rms_grad_scale(x: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float, dy: torch.Tensor):
    """The size of grad_x's terms before they cancel: ``rstd * |dy * (offset + weight)|`` (its
    two terms cancel fully when hidden == 1). Float64 tensors in."""
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (rstd * dy * ((offset + weight) if weight is not None else 1.0)).abs()


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 16), dtype=torch.float32, weight=True, weight_dtype=None, strided=False, seed=0, **options):
    """x of ``shape`` (spread around 0.3), weight around 1 (``weight_dtype`` or x's; ``weight=False``:
    None), ``options`` as contract arguments. ``strided``: x a non-contiguous 2-D view."""
    g = S.gen(seed)
    x = S.rows_input(shape, g, device, dtype, 2, 0.3, transposed=strided)
    w = S.to(device, weight_dtype or dtype, S.normal(shape[-1], g, 0.5, 1)) if weight else None
    return dict(x=x, weight=w, **options)


def option_samples(args):
    """Every combination of the RMSNorm options (casting mode, offset, weight or none, in-place)
    in both option dtypes, for ``rms_norm``'s and ``fused_add_rms_norm``'s builders."""
    yield from S.grid(
        args,
        dict(
            dtype=S.OPTION_DTYPES,
            casting_mode=CASTING_MODES,
            offset=(0.0, 1.0),
            weight=(True, False),
            in_place=(False, True),
        ),
        shape=(37, 96),
        eps=1e-5,
    )


def float32_weight_samples(args, **params):
    """float32 weights (and ``params``) with bf16 activations, in every casting mode."""
    yield from S.grid(
        args,
        dict(casting_mode=CASTING_MODES),
        shape=(9, 130),
        dtype=torch.bfloat16,
        weight_dtype=torch.float32,
        **params,
        offset=1.0,
    )


def samples():
    shapes = ((1, 1), (5, 1), (3, 5), (2, 7, 33), (130, 64), (4, 1000), (3, 20000), (0, 48))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield from option_samples(args)
    yield from float32_weight_samples(args)
    yield sample(args, shape=(33, 40), strided=True)


def _scales(a, upstream):
    return {"grad_x": S.peak(rms_grad_scale(a["x"], a["weight"], a["eps"], a["offset"], upstream["output"]))}


def _torch_rms_norm(x, weight=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
    # transformers' LlamaRMSNorm (casting_mode "llama").
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (offset + weight) * h.to(x.dtype)


# Rows are independent: x may be sharded on any dim but the normalised last one (sequence
# parallelism shards dim 1); the weight is replicated.
SHARDING = Sharding(inputs=("x",), across=lambda a: (-1,), outputs=("x",), replicated=("weight",))

OP = Op(
    rms_norm,
    since=(1, 0),
    math=math,
    grads=("x", "weight"),
    sharding=SHARDING,
    samples=samples,
    smoke=S.row_smoke(args),
    error_sample=sample(args, shape=(4, 16)),
    errors=(
        S.elsewhere("weight"),
        S.too_short("weight", r"\(hidden,\) = \(16,\)"),
        S.X_INT,
        S.X_FLOAT64,
        bad("casting_mode", ValueError, r"casting_mode must be one of .*'llama'.*got 'bogus'", casting_mode="bogus"),
        S.NEGATIVE_EPS,
        S.X_SCALAR,
    ),
    checks=Checks(
        atol_scales=_scales,
        overwritable=lambda a: ("grad_output",) if a["in_place"] else (),
    ),
    bench=B.norm(
        dict(weight=B.norm_weight),
        _torch_rms_norm,
        lambda s, e: (
            2 * s.tokens * s.hidden * e + s.hidden * e + 4 * s.tokens,
            3 * s.tokens * s.hidden * e + 2 * s.hidden * e + 4 * s.tokens,
        ),
        {
            # liger-kernel's LigerRMSNorm defaults: in_place=True.
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_rms_norm", "x", "weight", "eps", "offset", "casting_mode", B.const(True)
            ),
            B.TORCH_NPU: B.torch_npu(lambda m, x, weight, eps, **_: m.npu_rms_norm(x, weight, epsilon=eps)[0]),
        },
    ),
)
