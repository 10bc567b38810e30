"""Conformance cases for `cross_entropy`."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance import DTYPES, assert_close, require_op
from liger_core.conformance.cross_entropy_check import check_cross_entropy, make_inputs
from liger_core.ops import cross_entropy as contract

# One class, odd vocabularies, many short rows, rows wider than any vendor's single block.
SHAPES = [(1, 1), (4, 7), (9, 33), (33, 130), (3, 40000)]
# weighted, label_smoothing, lse_square_scale, softcap
OPTIONS = {
    "plain": (False, 0.0, 0.0, None),
    "weight": (True, 0.0, 0.0, None),
    "smoothing": (False, 0.1, 0.0, None),
    "zloss": (False, 0.0, 1e-2, None),
    "softcap": (False, 0.0, 0.0, 4.0),
    "everything": (True, 0.2, 1e-3, 5.0),
}
REDUCTIONS = ("mean", "sum", "none")
_ids = lambda d: str(d).removeprefix("torch.")  # noqa: E731


@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_cross_entropy_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "cross_entropy")
    logits, target, _ = make_inputs(*shape, dtype, conformance_device)
    check_cross_entropy(conformance_backend, logits, target)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_ids)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("option", list(OPTIONS))
def test_cross_entropy_options(conformance_backend, conformance_device, option, reduction, dtype):
    require_op(conformance_backend, "cross_entropy")
    weighted, smoothing, zscale, softcap = OPTIONS[option]
    logits, target, weight = make_inputs(37, 300, dtype, conformance_device, weighted=weighted, seed=3)
    check_cross_entropy(
        conformance_backend,
        logits,
        target,
        weight,
        lse_square_scale=zscale,
        label_smoothing=smoothing,
        reduction=reduction,
        softcap=softcap,
        return_z_loss=zscale > 0,
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_z_loss_output_and_scaled_gradient(conformance_backend, conformance_device, reduction):
    require_op(conformance_backend, "cross_entropy")
    logits, target, weight = make_inputs(20, 77, torch.float32, conformance_device, weighted=True, seed=5)
    check_cross_entropy(
        conformance_backend,
        logits,
        target,
        weight,
        lse_square_scale=0.05,
        reduction=reduction,
        return_z_loss=True,
        grad_scalar=-2.5,
    )


@pytest.mark.parametrize("weighted", (False, True), ids=("unweighted", "weighted"))
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_all_ignored(conformance_backend, conformance_device, reduction, weighted):
    """Every target ignored: loss 0 and zero gradients, not NaN."""
    require_op(conformance_backend, "cross_entropy")
    logits, target, weight = make_inputs(6, 50, torch.float32, conformance_device, ignored="all", weighted=weighted)
    loss, grad = check_cross_entropy(
        conformance_backend, logits, target, weight, lse_square_scale=0.1, label_smoothing=0.1, reduction=reduction
    )
    assert not loss.detach().abs().any() and not grad.abs().any()


def test_cross_entropy_empty_batch(conformance_backend, conformance_device):
    require_op(conformance_backend, "cross_entropy")
    logits, target, _ = make_inputs(0, 10, torch.float32, conformance_device)
    for reduction in REDUCTIONS:
        check_cross_entropy(conformance_backend, logits, target, reduction=reduction)


@pytest.mark.parametrize("ignore_index", (0, 5, -1))
def test_cross_entropy_ignore_index_values(conformance_backend, conformance_device, ignore_index):
    """An ignore_index that is also a class id (0, 5) or another negative value."""
    require_op(conformance_backend, "cross_entropy")
    logits, target, _ = make_inputs(25, 40, torch.float32, conformance_device, ignore_index=ignore_index, seed=9)
    check_cross_entropy(conformance_backend, logits, target, ignore_index=ignore_index, label_smoothing=0.1)


def test_cross_entropy_strided_logits_and_int32_target(conformance_backend, conformance_device):
    require_op(conformance_backend, "cross_entropy")
    wide, target, _ = make_inputs(15, 301, torch.float32, conformance_device, seed=11)
    logits = wide[:, 1:200]  # rows 301 elements apart
    target = torch.where(target >= 0, target % 199, target).to(torch.int32)
    check_cross_entropy(conformance_backend, logits, target, reduction="none")
    check_cross_entropy(conformance_backend, wide.t().contiguous().t()[:, :64], target % 64)


def test_cross_entropy_large_logits(conformance_backend, conformance_device):
    """Logits of +-1e4: the online softmax must not overflow."""
    require_op(conformance_backend, "cross_entropy")
    logits, target, _ = make_inputs(8, 1000, torch.float32, conformance_device, scale=1e4, seed=13)
    check_cross_entropy(conformance_backend, logits, target, reduction="sum")


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_ids)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("option", ("plain", "everything"))
def test_cross_entropy_in_place(conformance_backend, conformance_device, option, reduction, dtype):
    """in_place=True: the same loss and gradient (upstream -2.5, or random per row for "none");
    target and weight untouched."""
    require_op(conformance_backend, "cross_entropy")
    weighted, smoothing, zscale, softcap = OPTIONS[option]
    logits, target, weight = make_inputs(37, 300, dtype, conformance_device, weighted=weighted, seed=17)
    check_cross_entropy(
        conformance_backend,
        logits,
        target,
        weight,
        lse_square_scale=zscale,
        label_smoothing=smoothing,
        reduction=reduction,
        softcap=softcap,
        return_z_loss=zscale > 0,
        grad_scalar=-2.5,
        in_place=True,
    )


def test_cross_entropy_in_place_wide_strided_and_small(conformance_backend, conformance_device):
    """in_place=True on rows wider than one block, on strided logits (a backend may fall back
    to a separate buffer there) and on a single class."""
    require_op(conformance_backend, "cross_entropy")
    logits, target, weight = make_inputs(3, 5000, torch.float32, conformance_device, weighted=True, seed=19)
    check_cross_entropy(conformance_backend, logits, target, weight, label_smoothing=0.1, in_place=True)
    wide, target, _ = make_inputs(15, 301, torch.float32, conformance_device, seed=21)
    target = torch.where(target >= 0, target % 199, target)
    check_cross_entropy(conformance_backend, wide[:, 1:200], target, reduction="none", in_place=True)
    logits, target, _ = make_inputs(4, 1, torch.float32, conformance_device, seed=23)
    check_cross_entropy(conformance_backend, logits, target, reduction="sum", in_place=True)


def test_cross_entropy_in_place_through_a_graph_and_without_grad(conformance_backend, conformance_device):
    """in_place=True on logits computed from a leaf (the gradient, possibly in the logits'
    memory, must reach the leaf through the op before it), and on logits without grad
    (forward only: same loss)."""
    fn = require_op(conformance_backend, "cross_entropy")
    logits, target, weight = make_inputs(11, 257, torch.float32, conformance_device, weighted=True, seed=29)
    base = logits.clone().requires_grad_()
    loss = fn(base * 2.0, target, weight, lse_square_scale=1e-2, reduction="none", in_place=True)
    dy = torch.randn(loss.shape, generator=torch.Generator().manual_seed(31), dtype=torch.float64)
    loss.backward(dy.to(loss.device, loss.dtype))

    b64 = logits.detach().cpu().double().requires_grad_()
    want, _ = contract.math(b64 * 2.0, target.cpu(), weight.cpu().double(), -100, 1e-2, 0.0, "none", None)
    want.backward(dy)
    tol = torch.float32
    assert_close(loss, want, tol, "cross_entropy in_place loss (non-leaf logits)")
    assert_close(base.grad, b64.grad, tol, "cross_entropy in_place grad through a graph")

    x = logits.clone()
    got = fn(x, target, weight, reduction="sum", in_place=True)
    assert_close(got, contract.math(logits.cpu().double(), target.cpu(), weight.cpu().double(), reduction="sum")[0],
                 tol, "cross_entropy in_place loss (no grad)")  # fmt: skip


def _other_device(device: str) -> str:
    return "meta" if device == "cpu" else "cpu"


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        (
            "target_range",
            ValueError,
            r"target must be in \[0, 20\) or equal ignore_index=-100; 1 are not \(first: 20\)",
        ),
        ("negative_target", ValueError, r"target must be in \[0, 20\).*first: -3"),
        ("target_shape", ValueError, r"target must have shape \(tokens,\) = \(4,\); got \(3,\)"),
        ("target_float", TypeError, r"target must have an integer dtype.*got float32"),
        ("logits_1d", ValueError, r"logits must be 2-D \(tokens, vocab\); got shape \(20,\)"),
        ("logits_int", TypeError, r"logits must have dtype float32, bfloat16, float16; got int64"),
        ("weight_shape", ValueError, r"weight must have shape \(vocab,\) = \(20,\); got \(19,\)"),
        ("weight_device", ValueError, r"one device.*weight is on"),
        ("reduction", ValueError, r"reduction must be one of \('mean', 'sum', 'none'\); got 'avg'"),
        ("smoothing", ValueError, r"label_smoothing must be a number in \[0, 1\]; got 1.5"),
        ("softcap", ValueError, r"softcap must be None or a number > 0; got 0"),
        ("zscale", ValueError, r"lse_square_scale must be a number >= 0; got -1"),
        ("zloss_flag", TypeError, r"return_z_loss must be True or False; got 1"),
        ("in_place_flag", TypeError, r"in_place must be True or False; got 1"),
    ],
)
def test_cross_entropy_bad_input(conformance_backend, conformance_device, case, error, pattern):
    fn = require_op(conformance_backend, "cross_entropy")
    logits, target, weight = make_inputs(4, 20, torch.float32, conformance_device, weighted=True, ignored=0.0)
    kw = dict(weight=weight)
    if case == "target_range":
        target[2] = 20
    elif case == "negative_target":
        target[0] = -3
    elif case == "target_shape":
        target = target[:3]
    elif case == "target_float":
        target = target.float()
    elif case == "logits_1d":
        logits = logits[0]
    elif case == "logits_int":
        logits = logits.long()
    elif case == "weight_shape":
        kw["weight"] = weight[:19]
    elif case == "weight_device":
        kw["weight"] = weight.to(_other_device(conformance_device))
    elif case == "reduction":
        kw["reduction"] = "avg"
    elif case == "smoothing":
        kw["label_smoothing"] = 1.5
    elif case == "softcap":
        kw["softcap"] = 0
    elif case == "zscale":
        kw["lse_square_scale"] = -1
    elif case == "zloss_flag":
        kw["return_z_loss"] = 1
    elif case == "in_place_flag":
        kw["in_place"] = 1
    with pytest.raises(error, match=pattern):
        fn(logits, target, **kw)
