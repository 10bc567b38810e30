"""The `fused_add_rms_norm` op: the residual add and RMSNorm of a pre-norm block, declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, Sharding, bad, sample
from liger_core.ops import _samples as S
from liger_core.ops import rms_norm as _rms_norm
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_rows, check_same_device

CASTING_MODES = _rms_norm.CASTING_MODES


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add followed by RMSNorm over the last dimension, as in a pre-norm block.

    ``new_residual = (x + residual)`` in ``x.dtype`` (the sum is formed in float32 and
    rounded once), then ``y = rms_norm(new_residual, weight, eps, offset, casting_mode)``
    with the semantics of `liger_core.ops.rms_norm.rms_norm`.

    Args:
        x: ``(..., hidden)``, float32, bfloat16 or float16 (the block's output).
        residual: same shape as ``x``, any of those dtypes (the running residual stream).
        weight: ``(hidden,)`` scale, or None for no scale. Its dtype may differ from ``x``'s.
        eps: ``>= 0``, added to the mean square.
        offset: added to ``weight`` (Gemma: 1.0).
        casting_mode: ``"llama"``, ``"gemma"`` or ``"none"``, as for ``rms_norm``.
        in_place: allow the backward pass to write ``grad_x`` into the memory of the
            incoming gradient of ``y``. The caller opts in; inputs are never modified.

    Returns:
        ``(y, new_residual)``, both with ``x``'s shape and dtype. Gradients flow through
        both outputs: ``grad_x = grad_residual = d(new_residual)`` where that total is the
        incoming gradient of ``new_residual`` plus the RMSNorm backward of ``y``'s
        gradient; ``grad_x`` has ``x.dtype``, ``grad_residual`` ``residual.dtype``,
        ``grad_weight`` ``weight.dtype``.
    """
    check_args(x, residual, weight, eps, offset, casting_mode, in_place)
    return math(x, residual, weight, eps, offset, casting_mode, in_place)


def check_args(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    in_place: bool,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            x.dtype in FLOAT_DTYPES
            and x.ndim > 0
            and residual.dtype in FLOAT_DTYPES
            and residual.shape == x.shape
            and residual.device == x.device
            and _rms_norm.norm_options_ok(x, weight, eps, offset, casting_mode)
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = "fused_add_rms_norm"
    check_floating("fused_add_rms_norm", "x", x)
    check_floating("fused_add_rms_norm", "residual", residual)
    check_rows(op, x)
    check_same_device(op, x=x, residual=residual, weight=weight)
    if residual.shape != x.shape:
        raise ValueError(
            f"{op}: residual must have x's shape {tuple(x.shape)}; got residual.shape={tuple(residual.shape)}"
        )
    _rms_norm.check_norm_options(op, x, weight, eps, offset, casting_mode)


def math(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    in_place: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    if x.dtype == torch.float64:
        s = x + residual.to(x.dtype)
    else:
        s = (x.float() + residual.float()).to(x.dtype)
    return _rms_norm.math(s, weight, eps, offset, casting_mode, in_place), s


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 16), dtype=torch.float32, weight=True, weight_dtype=None, residual_dtype=None, **options):
    """x around 0.3, the residual around -0.2 and wider (``residual_dtype`` or x's), weight around 1."""
    g = S.gen(0)
    x = S.to(device, dtype, S.normal(shape, g, 2, 0.3))
    residual = S.to(device, residual_dtype or dtype, S.normal(shape, g, 3, -0.2))
    w = S.to(device, weight_dtype or dtype, S.normal(shape[-1], g, 0.5, 1)) if weight else None
    return dict(x=x, residual=residual, weight=w, **options)


def strided_args(device):
    """x a (33, 40) column view, the residual every other column of a wider matrix, transposed."""
    g = S.gen(0)
    x = S.strided((33, 40), g, device, torch.float32, 2, 0.3)
    r = S.to(device, torch.float32, S.normal((40, 66), g, 3, -0.2))[:, ::2][:, :33].t()
    return dict(x=x, residual=r, weight=S.to(device, torch.float32, S.normal(40, g, 0.5, 1)))


def samples():
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=S.ROW_SHAPES))
    yield from _rms_norm.option_samples(args)
    # new_residual feeds nothing: no gradient of its own, grad_x is RMSNorm's alone.
    for in_place in (False, True):
        yield sample(args, unused_outputs=("new_residual",), shape=(9, 70), in_place=in_place)
    # float32 weight and residual stream with bf16 activations.
    yield from _rms_norm.float32_weight_samples(args, residual_dtype=torch.float32)
    yield sample(strided_args)


def _scales(a, upstream):
    # The RMSNorm part cancels (see rms_norm), plus the residual's own incoming gradient.
    s = a["x"] + a["residual"]
    terms = _rms_norm.rms_grad_scale(s, a["weight"], a["eps"], a["offset"], upstream["y"])
    if upstream["new_residual"] is not None:
        terms = terms + upstream["new_residual"].abs()
    return {"grad_x": S.peak(terms), "grad_residual": S.peak(terms)}


def _torch_fused_add_rms_norm(x, residual, weight=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
    s = x + residual
    return _rms_norm.OP.bench.torch_fn(s, weight, eps, offset), s


OP = Op(
    fused_add_rms_norm,
    since=(1, 1),
    math=math,
    grads=("x", "residual", "weight"),
    outputs=("y", "new_residual"),
    sharding=Sharding(
        inputs=("x", "residual"), across=lambda a: (-1,), outputs=("x", "x"), aligned=True, replicated=("weight",)
    ),
    samples=samples,
    smoke=S.row_smoke(args),
    error_sample=sample(args, shape=(4, 16)),
    errors=(
        S.elsewhere("weight"),
        S.elsewhere("residual", "residual_device"),
        bad(
            "residual_shape",
            ValueError,
            r"residual must have x's shape \(4, 16\); got residual.shape=\(4, 15\)",
            residual=lambda r: r[:, :15],
        ),
        S.too_short("weight", r"\(hidden,\) = \(16,\)"),
        S.X_INT,
        bad("residual_dtype", TypeError, r"residual must have dtype .*got float64", residual=lambda r: r.double()),
        bad("casting_mode", ValueError, r"casting_mode must be one of .*'llama'.*got 'bogus'", casting_mode="bogus"),
        S.NEGATIVE_EPS,
        bad("scalar", ValueError, r"at least 1 dimension", x=lambda x: x[0, 0], residual=lambda r: r[0, 0]),
    ),
    checks=Checks(
        out_dtypes=lambda a: (a["x"].dtype, a["x"].dtype),
        atol_scales=_scales,
        tolerance_from={"new_residual": ("x", "residual")},
        overwritable=lambda a: ("grad_y",) if a["in_place"] else (),
    ),
    bench=B.norm(
        dict(residual=B.hidden_states, weight=B.norm_weight),
        _torch_fused_add_rms_norm,
        # forward: read x, residual, weight; write y, x + residual, rstd. backward: read the two
        # incoming gradients, the sum, weight, rstd; write one gradient (x's and residual's are equal).,
        lambda s, e: (
            4 * s.tokens * s.hidden * e + s.hidden * e + 4 * s.tokens,
            4 * s.tokens * s.hidden * e + 2 * s.hidden * e + 4 * s.tokens,
        ),
        {
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_fused_add_rms_norm", "x", "residual", "weight", "eps", "offset", "casting_mode", B.const(False)
            ),
            B.TORCH_NPU: B.torch_npu(
                lambda m, x, residual, weight, eps, **_: (lambda out: (out[0], out[2]))(
                    m.npu_add_rms_norm(x, residual, weight, epsilon=eps)
                )
            ),
        },
    ),
)
