"""Shared check for vendor backends: the fused losses that compute their gradients in the forward
(fused_linear_cross_entropy with a "mean" or "sum" reduction, fused_linear_kl_div and
fused_linear_jsd) hand them to autograd once (`liger_core.ops._losses.take_fused_grads`). The
incoming gradient scales them, and a second backward through the same graph raises rather than
adding them again or scaling them twice.

This is how the vendor Functions behave, not part of the ops' contract. The reference backend is
plain autograd and replays a retained graph, so core's own suite does not run this check. A vendor
package runs it from its tests:

    # tests/test_fused_grads.py
    from liger_core.conformance.fused_grads import *  # noqa: F403

`check_handed_over_once` checks one call, for a vendor's own further cases.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from liger_core.conformance.check import declaration, make_args, op_callable

__all__ = ["test_gradients_are_handed_over_once"]

# Per op: the sample builder's parameters, and the inputs whose gradients the forward computes.
DISTILLED = ("student_input", "student_weight")
CASES = {
    "fused_linear_cross_entropy": ({"shape": (7, 8, 30), "bias": True}, ("input", "weight", "bias")),
    "fused_linear_jsd": ({"shape": (7, 8, 12, 30)}, DISTILLED),
    "fused_linear_kl_div": ({"shape": (7, 8, 30)}, DISTILLED),
}


def _call(backend, op, args):
    params = inspect.signature(declaration(op).reference).parameters
    return op_callable(backend, op)(*(args.get(name, params[name].default) for name in params))


def check_handed_over_once(backend, op: str, args: dict, names: tuple[str, ...]) -> None:
    """``op``'s gradients in the inputs ``names`` (which the caller set requiring grad) are handed
    to autograd once: a second backward through the graph raises and adds nothing, and the
    incoming gradient scales them (a backward with 0.5, then a fresh one with 1)."""
    loss = _call(backend, op, args)
    (0.5 * loss).backward(retain_graph=True)
    grads = [args[name].grad.clone() for name in names]
    with pytest.raises(RuntimeError, match="handed them to autograd already"):
        loss.backward()
    for name, first in zip(names, grads):
        torch.testing.assert_close(args[name].grad, first, rtol=0, atol=0)  # nothing added twice
    # The incoming gradient scales them: a fresh forward, backward with 1, gives twice the first.
    for name in names:
        args[name].grad = None
    _call(backend, op, args).backward()
    for name, first in zip(names, grads):
        torch.testing.assert_close(args[name].grad, 2 * first)


@pytest.mark.parametrize("op", sorted(CASES))
def test_gradients_are_handed_over_once(conformance_backend, conformance_device, op):
    params, inputs = CASES[op]
    args = make_args(op, conformance_device, seed=5, **params)
    for name in inputs:
        args[name].requires_grad_(True)
    check_handed_over_once(conformance_backend, op, args, inputs)
