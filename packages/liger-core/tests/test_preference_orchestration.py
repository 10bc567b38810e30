"""core's chunked preference orchestration over plain-torch kernels: the Functions
`_preference_functions.autograd_functions` builds give the reference's gradients, scale them by the incoming
gradient, hand them to autograd once, and check the targets' range before any kernel reads them."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance.check import make_args
from liger_core.ops import fused_linear_dpo as dpo
from liger_core.ops import fused_linear_kto as kto
from liger_core.ops._preference_functions import autograd_functions


class TorchTokenLogps:
    """`_preference.TokenLogpKernels` in plain torch (what a vendor's cross-entropy kernels do)."""

    def forward(self, logits, target, ignore_index):
        lse = torch.logsumexp(logits.float(), dim=-1)
        valid = target != ignore_index
        picked = logits.float().gather(1, torch.where(valid, target, 0)[:, None])[:, 0]
        return torch.where(valid, picked - lse, 0.0), lse

    def backward(self, logits, target, lse, coef, ignore_index):
        valid = target != ignore_index
        grad = -torch.exp(logits.float() - lse[:, None])
        grad.scatter_add_(1, torch.where(valid, target, 0)[:, None], torch.ones_like(grad[:, :1]))
        logits.copy_(grad * torch.where(valid, coef, 0.0)[:, None])


class TorchTokenLogpsScaling(TorchTokenLogps):
    """With the optional device-side scaling hook (`function_grads` then skips its host check)."""

    calls = 0

    def scale_in_place(self, grad, upstream):
        TorchTokenLogpsScaling.calls += 1
        grad.mul_(upstream.to(grad.dtype))


def _dpo(kernels):  # one pair a chunk: three chunks
    return autograd_functions(kernels, lambda: 2 * 5 * 40, __name__)["fused_linear_dpo"]


DPO = _dpo(TorchTokenLogps())
DPO_SCALING = _dpo(TorchTokenLogpsScaling())


def _args():
    args = make_args("fused_linear_dpo", "cpu", shape=(3, 5, 8, 40), dtype=torch.float32, seed=7)
    args["bias"] = None
    args["input"].requires_grad_(True)
    args["weight"].requires_grad_(True)
    return args


NAMES = ("input", "weight", "target", "bias", "ref_input", "ref_weight", "ref_bias")
OPTIONS = (-100, 0.1, False, True, False, "sigmoid", 0.0, 0.05, 1.0)  # the contract's defaults, in order


def _call(args, function=DPO):
    return function.apply(*(args.get(n) for n in NAMES), *OPTIONS)


@pytest.mark.parametrize("function", [DPO, DPO_SCALING], ids=["host-check", "device-scaling"])
def test_gradients_match_the_reference_and_scale_with_the_incoming_one(function):
    calls = TorchTokenLogpsScaling.calls
    args = _args()
    loss = _call(args, function)[0]
    (2.5 * loss).backward()
    ref_args = {k: (v.detach().clone().requires_grad_(v.requires_grad) if torch.is_tensor(v) else v)
                for k, v in args.items()}  # fmt: skip
    ref_loss = dpo.math(*(ref_args.get(n) for n in NAMES), *OPTIONS)[
        0
    ]  # (float32 both: the orchestration, not the precision, is under test)
    (2.5 * ref_loss).backward()
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(args["input"].grad, ref_args["input"].grad)
    torch.testing.assert_close(args["weight"].grad, ref_args["weight"].grad)
    assert TorchTokenLogpsScaling.calls - calls == (2 if function is DPO_SCALING else 0)  # input and weight


def test_a_second_backward_through_the_graph_raises():
    args = _args()
    loss = _call(args)[0]
    loss.backward(retain_graph=True)
    first = args["weight"].grad.clone()
    with pytest.raises(RuntimeError, match="handed them to autograd already"):
        loss.backward()
    torch.testing.assert_close(args["weight"].grad, first)  # nothing added twice


def test_a_target_out_of_range_raises_before_the_loss_is_used():
    args = _args()
    args["target"][1, 2] = 40
    with pytest.raises(ValueError, match=r"fused_linear_dpo: every target must be in \[0, 40\).*first: 40"):
        _call(args)


# KTO runs the same chunk step over runs of whole sequences: one sequence a chunk, five chunks.
KTO = autograd_functions(TorchTokenLogps(), lambda: 5 * 40, __name__)["fused_linear_kto"]
KTO_NAMES = ("input", "weight", "target", "preference_labels", "bias", "ref_input", "ref_weight", "ref_bias", "kl")
KTO_OPTIONS = (-100, 0.5, True, False, 1.3, 0.7)  # ignore_index ... undesirable_weight, in order


def _kto_args():
    args = make_args("fused_linear_kto", "cpu", shape=(5, 5, 8, 40), dtype=torch.float32, seed=7, bias=True)
    for name in ("input", "weight", "bias"):
        args[name].requires_grad_(True)
    return args


def test_kto_gradients_over_several_chunks_match_the_reference():
    args = _kto_args()
    loss = KTO.apply(*(args.get(n) for n in KTO_NAMES), *KTO_OPTIONS)[0]
    (0.5 * loss).backward()
    ref_args = {k: (v.detach().clone().requires_grad_(v.requires_grad) if torch.is_tensor(v) else v)
                for k, v in args.items()}  # fmt: skip
    ref_loss = kto.math(*(ref_args.get(n) for n in KTO_NAMES), *KTO_OPTIONS)[0]
    (0.5 * ref_loss).backward()
    torch.testing.assert_close(loss, ref_loss)
    for name in ("input", "weight", "bias"):
        torch.testing.assert_close(args[name].grad, ref_args[name].grad)


def test_kto_target_out_of_range_raises():
    args = _kto_args()
    args["target"][3, 4] = -1
    with pytest.raises(ValueError, match=r"fused_linear_kto: every target must be in \[0, 40\).*first: -1"):
        KTO.apply(*(args.get(n) for n in KTO_NAMES), *KTO_OPTIONS)
