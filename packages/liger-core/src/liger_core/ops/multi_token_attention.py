"""The `multi_token_attention` op: a convolution over causal attention probabilities (Multi-Token
Attention, Golovneva et al. 2025, arXiv:2504.00927), declared once."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Op, bad, on_other_device, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_flag, check_floating, check_same_device, check_same_dtype
from liger_core.ops.sparsemax import _torch_sparsemax
from liger_core.ops.sparsemax import math as sparsemax_math

OP_NAME = "multi_token_attention"


def multi_token_attention(
    scores: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
    sparse: bool = False,
) -> torch.Tensor:
    """Multi-token attention's key-query convolution (liger-kernel's
    ``LigerMultiTokenAttentionFunction``):
    ``out = mask_0(conv2d(act(mask_-inf(scores)), weight, bias, stride, padding, dilation, groups))``.

    ``mask_-inf`` excludes the future of every query row: in each ``(seq, seq)`` matrix, entry
    ``[i, j]`` with ``j > i`` takes no part (liger-kernel fills it with -1e9, which neither
    activation can tell apart from excluded). ``act`` is softmax over the last dimension, or
    sparsemax over it when ``sparse``; excluded entries get probability 0. The convolution runs
    over the (query, key) plane of the probabilities with ``weight`` and ``bias``; ``mask_0``
    then zeroes every output entry ``[i, j]`` with ``j > i`` (on the output's own grid).

    The probabilities are computed in float32 and rounded to ``scores.dtype`` (they are what the
    convolution reads); the convolution accumulates in float32; the output is ``scores.dtype``.

    Args:
        scores: ``(batch, in_channels, seq, seq)`` attention logits, float32, bfloat16 or float16,
            any layout.
        weight: ``(out_channels, in_channels // groups, kernel_h, kernel_w)``, scores' dtype and
            device.
        bias: ``(out_channels,)`` in scores' dtype, or None.
        stride, padding, dilation: ints for both spatial dims (``>= 1``, ``>= 0``, ``>= 1``); the
            dilated kernel must fit the padded ``(seq, seq)`` plane.
        groups: ``>= 1``, dividing ``in_channels`` and ``out_channels``.
        sparse: sparsemax instead of softmax.

    Returns:
        ``(batch, out_channels, out_h, out_w)`` in scores' dtype (``out_h = out_w = seq`` for
        stride 1 and ``padding = dilation * (kernel - 1) // 2`` with an odd square kernel).
        Backward gives ``grad_scores`` (0 at the masked entries), ``grad_weight`` and
        ``grad_bias``, each in its input's dtype; no input is modified.
    """
    check_args(scores, weight, bias, stride, padding, dilation, groups, sparse)
    return math(scores, weight, bias, stride, padding, dilation, groups, sparse)


def _int_at_least(value: object, low: int) -> bool:
    return type(value) is int and value >= low


def _conv_fits(scores: torch.Tensor, weight: torch.Tensor, padding: int, dilation: int) -> bool:
    padded = scores.shape[-1] + 2 * padding
    return all(dilation * (k - 1) + 1 <= padded for k in weight.shape[-2:])


def check_args(
    scores: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int,
    padding: int,
    dilation: int,
    groups: int,
    sparse: bool,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            scores.dtype in FLOAT_DTYPES
            and scores.ndim == 4
            and scores.shape[-1] == scores.shape[-2]
            and weight.ndim == 4
            and weight.dtype == scores.dtype
            and weight.device == scores.device
            and _int_at_least(stride, 1)
            and _int_at_least(padding, 0)
            and _int_at_least(dilation, 1)
            and _int_at_least(groups, 1)
            and weight.shape[1] * groups == scores.shape[1]
            and weight.shape[0] % groups == 0
            and (
                bias is None
                or (bias.dtype == scores.dtype and bias.shape == weight.shape[:1] and bias.device == scores.device)
            )
            and type(sparse) is bool
            and _conv_fits(scores, weight, padding, dilation)
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = OP_NAME
    check_floating("multi_token_attention", "scores", scores)
    if scores.dim() != 4 or scores.shape[-1] != scores.shape[-2]:
        raise ValueError(
            f"{op}: scores must be (batch, in_channels, seq, seq), square in its last two dims; "
            f"got shape {tuple(scores.shape)}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None and name == "bias":
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor; got {type(t).__name__}")
        check_same_dtype(op, name, t, "scores", scores)
        check_same_device(op, scores=scores, **{name: t})
    for name, value, low in (
        ("stride", stride, 1),
        ("padding", padding, 0),
        ("dilation", dilation, 1),
        ("groups", groups, 1),
    ):
        if type(value) is not int:
            raise TypeError(f"{op}: {name} must be an int; got {type(value).__name__}")
        if value < low:
            raise ValueError(f"{op}: {name} must be >= {low}; got {value}")
    if weight.dim() != 4:
        raise ValueError(
            f"{op}: weight must be (out_channels, in_channels // groups, kernel_h, kernel_w), 4-D; got {weight.dim()}-D"
        )
    if weight.shape[1] * groups != scores.shape[1] or weight.shape[0] % groups:
        raise ValueError(
            f"{op}: weight.shape[1] * groups must equal in_channels = scores.shape[1] = {scores.shape[1]} and groups "
            f"must divide out_channels = weight.shape[0]; got weight.shape={tuple(weight.shape)}, groups={groups}"
        )
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(
            f"{op}: bias must have shape (out_channels,) = ({weight.shape[0]},); got bias.shape={tuple(bias.shape)}"
        )
    check_flag(op, "sparse", sparse)
    if not _conv_fits(scores, weight, padding, dilation):
        raise ValueError(
            f"{op}: the dilated kernel of weight {tuple(weight.shape[-2:])} (dilation={dilation}) must fit the padded "
            f"scores plane {scores.shape[-1] + 2 * padding}; got a larger kernel"
        )


def future(rows: int, cols: int, device: torch.device | str) -> torch.Tensor:
    """The ``(rows, cols)`` mask of entries ``[i, j]`` with ``j > i``: each query row's future."""
    return torch.ones(rows, cols, dtype=torch.bool, device=device).triu(1)


def math(
    scores: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int,
    padding: int,
    dilation: int,
    groups: int,
    sparse: bool,
) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = torch.float64 if scores.dtype == torch.float64 else torch.float32
    seq = scores.shape[-1]
    masked = scores.to(compute).masked_fill(future(seq, seq, scores.device), float("-inf"))
    probs = sparsemax_math(masked, -1) if sparse else torch.softmax(masked, -1)
    # The convolution reads the probabilities in scores' dtype (a no-op for the oracle).
    probs = probs.to(scores.dtype).to(compute)
    out = F.conv2d(
        probs,
        weight.to(compute),
        None if bias is None else bias.to(compute),
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
    )
    return out.masked_fill(future(*out.shape[-2:], out.device), 0.0).to(scores.dtype)


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(2, 4, 7, 7),
    out_channels=4,
    kernel=(3, 3),
    dtype=torch.float32,
    bias=True,
    strided=False,
    **options,
):
    """Scores of ``shape`` (batch, in_channels, seq, seq), logits of spread 2 (softmax rows
    neither flat nor one-hot; sparsemax supports of one to several entries), a conv weight of
    unit-scale taps per input channel and a small bias."""
    g = S.gen(0)
    batch, c_in, seq, _ = shape
    groups = options.get("groups", 1)
    stored = (batch, c_in, seq, seq + 3) if strided else shape
    scores = S.to(device, dtype, S.normal(stored, g, 2.0))
    if strided:  # a view into wider rows (a padded key dimension)
        scores = scores[..., :seq]
    fan_in = c_in // groups * kernel[0] * kernel[1]
    weight = S.to(device, dtype, S.normal((out_channels, c_in // groups, *kernel), g, fan_in**-0.5))
    b = S.to(device, dtype, S.normal(out_channels, g, 0.1)) if bias else None
    return dict(scores=scores, weight=weight, bias=b, **options)


def samples():
    # Odd seq with the 'same' padding the models use, every dtype, both activations.
    yield from S.grid(args, dict(dtype=S.DTYPES, sparse=(False, True)), padding=1)
    # One token; more channels out than in, grouped; a rectangular kernel (an output wider than
    # tall: its mask is not square); stride 2; dilation 2 with no padding (a smaller output).
    yield sample(args, shape=(2, 4, 1, 1), padding=1)
    yield sample(args, shape=(2, 4, 9, 9), out_channels=6, groups=2, padding=1, sparse=True)
    yield sample(args, shape=(2, 4, 6, 6), kernel=(3, 1), padding=1)
    yield sample(args, shape=(2, 4, 11, 11), padding=1, stride=2, sparse=True)
    yield sample(args, shape=(2, 2, 10, 10), out_channels=3, dilation=2)
    yield from S.grid(
        args, dict(sparse=(False, True)), shape=(1, 3, 5, 5), out_channels=2, kernel=(5, 5), bias=False, padding=2
    )
    # Several programs' worth of rows, rows longer than a short tile.
    yield sample(args, shape=(3, 4, 70, 70), padding=1)
    yield sample(args, shape=(1, 4, 70, 70), padding=1, sparse=True, dtype=torch.bfloat16)
    yield sample(args, strided=True, padding=1)
    yield sample(args, shape=(0, 4, 7, 7), padding=1)


def _mixed_devices(t: torch.Tensor) -> torch.Tensor:
    return on_other_device(t)


# liger-kernel's own benchmark (benchmark_multi_token_attention.py): batch 2, 4 channels in and
# out, a 3 x 3 kernel with 'same' padding, groups 1, a bias, bfloat16, seq swept 32..512
# (``liger bench --op multi_token_attention --sweep tokens=32,64,128,256,512``); here seq is the
# model shape's sequence (tokens / batch).
BENCH_BATCH, BENCH_CHANNELS, BENCH_KERNEL = 2, 4, 3


def _bench_args(s, dt, dev, gen):
    b, c, k, seq = BENCH_BATCH, BENCH_CHANNELS, BENCH_KERNEL, s.seq
    return dict(
        scores=B.normal((b, c, seq, seq), dt, dev, gen),
        weight=B.normal((c, c, k, k), dt, dev, gen, scale=(c * k * k) ** -0.5),
        bias=B.normal((c,), dt, dev, gen, scale=0.1),
        padding=k // 2,
    )


def _torch_multi_token_attention(scores, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, sparse=False):
    """As liger-kernel's benchmark writes it in PyTorch: fill the future with -1e9, activate,
    convolve, zero the future."""
    seq = scores.shape[-1]
    keep = torch.tril(torch.ones(seq, seq, dtype=torch.bool, device=scores.device))
    filled = scores.masked_fill(~keep, -1e9)
    probs = _torch_sparsemax(filled, -1) if sparse else torch.softmax(filled, -1)
    out = F.conv2d(probs, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
    return out.masked_fill(future(*out.shape[-2:], out.device), 0.0)


def _bench_planes(s):
    """(input planes, output planes) of seq x seq elements."""
    return BENCH_BATCH * BENCH_CHANNELS, BENCH_BATCH * BENCH_CHANNELS


def _traffic(s, e):
    planes_in, planes_out = _bench_planes(s)
    plane = s.seq * s.seq * e
    # forward reads scores, writes out; backward reads the upstream gradient and the saved
    # probabilities and writes grad_scores (the weight and bias are negligible).
    return (planes_in + planes_out) * plane, (planes_out + 2 * planes_in) * plane


def _flops(s):
    taps = BENCH_CHANNELS * BENCH_KERNEL * BENCH_KERNEL
    conv = 2 * BENCH_BATCH * BENCH_CHANNELS * s.seq * s.seq * taps
    return conv, 2 * conv  # backward: grad of the input and of the weight


def _describe(s):
    return B.dims(("batch", BENCH_BATCH), ("channels", BENCH_CHANNELS), ("kernel", BENCH_KERNEL), ("seq", s.seq))


OP = Op(
    multi_token_attention,
    since=(1, 7),
    math=math,
    grads=("scores", "weight", "bias"),
    samples=samples,
    smoke=(sample(args, shape=(2, 4, 7, 7), padding=1), sample(args, shape=(2, 4, 40, 40), padding=1, sparse=True)),
    error_sample=sample(args, padding=1),
    errors=(
        bad(
            "scores_dtype",
            TypeError,
            r"scores must have dtype float32, bfloat16, float16; got int64",
            scores=lambda s: s.long(),
        ),
        bad(
            "scores_3d",
            ValueError,
            r"scores must be \(batch, in_channels, seq, seq\).*got shape \(4, 7, 7\)",
            scores=lambda s: s[0],
        ),
        bad(
            "scores_not_square",
            ValueError,
            r"square in its last two dims; got shape \(2, 4, 7, 6\)",
            scores=lambda s: s[..., :6],
        ),
        bad(
            "weight_dtype", TypeError, r"weight must have scores' dtype float32; got float16", weight=lambda w: w.half()
        ),
        bad(
            "bias_dtype", TypeError, r"bias must have scores' dtype float32; got bfloat16", bias=lambda b: b.bfloat16()
        ),
        bad("weight_device", ValueError, r"one device.*scores is on .*weight is on", weight=_mixed_devices),
        bad("weight_3d", ValueError, r"weight must be \(out_channels, .*4-D; got 3-D", weight=lambda w: w[0]),
        bad(
            "weight_channels",
            ValueError,
            r"in_channels = scores.shape\[1\] = 4.*weight.shape=\(4, 3, 3, 3\), groups=1",
            weight=lambda w: w[:, :3],
        ),
        bad(
            "groups_divide",
            ValueError,
            r"groups must divide out_channels.*weight.shape=\(4, 4, 3, 3\), groups=3",
            groups=3,
        ),
        bad(
            "bias_shape",
            ValueError,
            r"bias must have shape \(out_channels,\) = \(4,\); got bias.shape=\(3,\)",
            bias=lambda b: b[:3],
        ),
        bad("stride_zero", ValueError, r"stride must be >= 1; got 0", stride=0),
        bad("stride_type", TypeError, r"stride must be an int; got tuple", stride=(1, 1)),
        bad("padding_negative", ValueError, r"padding must be >= 0; got -1", padding=-1),
        bad("dilation_zero", ValueError, r"dilation must be >= 1; got 0", dilation=0),
        bad("groups_zero", ValueError, r"groups must be >= 1; got 0", groups=0),
        bad("sparse_type", TypeError, r"sparse must be True or False; got 1", sparse=1),
        bad(
            "kernel_too_large",
            ValueError,
            r"weight \(3, 3\) \(dilation=5\) must fit the padded scores plane 9",
            dilation=5,
        ),
    ),
    bench=B.BenchSpec(
        group="attention",
        axes=("tokens", "batch"),
        layouts={"scores": _bench_args},
        torch_fn=_torch_multi_token_attention,
        traffic=_traffic,
        describe=_describe,
        flops=_flops,
        peers={
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_multi_token_attention",
                "scores",
                "weight",
                "bias",
                "stride",
                "padding",
                "dilation",
                "groups",
                "sparse",
            )  # fmt: skip
        },
    ),
)
