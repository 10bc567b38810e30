"""core's chunked distillation loop over plain-torch kernels: the Functions
`_distillation.autograd_functions` builds give the reference's losses and gradients over several
ragged chunks, scale the gradients by the incoming gradient, and hand them to autograd once."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance.check import make_args
from liger_core.ops import _distillation as D
from liger_core.ops import _losses as L
from liger_core.ops import fused_linear_cosine_similarity as cosine
from liger_core.ops import fused_linear_jsd_loss as jsd_loss
from liger_core.ops import jsd


class TorchDistillationKernels(D.DistillationKernels):
    """`_distillation.DistillationKernels` in plain torch (what a vendor's kernels do)."""

    def chunk_rows(self, n_rows, hidden, vocab):
        return 3  # 10 tokens: four chunks, the last one row

    def hard_cross_entropy(self, ignore_index, upstream, device):
        def rows(logits, labels):
            valid = labels != ignore_index
            safe = torch.where(valid, labels, 0)[:, None]
            loss = torch.where(valid, logits.logsumexp(-1) - logits.gather(1, safe)[:, 0], 0.0)
            if upstream is not None:
                grad = torch.softmax(logits, -1).scatter_add_(1, safe, -torch.ones_like(logits[:, :1]))
                logits.copy_(grad * torch.where(valid, upstream, 0.0)[:, None])
            return loss

        return rows

    def jsd_rows(self, x, y, labels, beta, ignore_index, coef):
        with torch.enable_grad():
            x_leaf = x.detach().clone().requires_grad_(True)
            total = L.drop_ignored_rows(jsd.elementwise(x_leaf, y, beta), labels, ignore_index)[0].sum()
            grad = None if coef is None else torch.autograd.grad(total, x_leaf)[0] * coef
        return total.detach(), grad


FUNCTIONS = D.autograd_functions(TorchDistillationKernels(), __name__)
DECLARATIONS = {"fused_linear_cosine_similarity": cosine, "fused_linear_jsd_loss": jsd_loss}
STUDENT = ("student_input", "student_weight", "student_bias")
NAMES = ("student_input", "student_weight", "teacher_input", "teacher_weight", "true_labels", "student_bias")
OPTIONS = (0.4, 0.6, 0.3, -100, 1.5)  # weight_hard_loss, weight_soft_loss, beta, ignore_index, temperature


def _args(op):
    args = make_args(op, "cpu", shape=(10, 8, 12, 40), dtype=torch.float32, seed=5, bias=True)
    for name in STUDENT:
        args[name].requires_grad_(True)
    return args


def _call(fn, args):
    return fn(*(args[n] for n in NAMES), args["teacher_bias"], *OPTIONS)


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_losses_and_gradients_match_the_reference_and_scale_with_the_incoming_one(op):
    args = _args(op)
    loss, soft, hard = _call(FUNCTIONS[op].apply, args)
    (2.5 * loss).backward()
    ref_args = {k: (v.detach().clone().requires_grad_(v.requires_grad) if torch.is_tensor(v) else v)
                for k, v in args.items()}  # fmt: skip
    ref_loss, ref_soft, ref_hard = _call(DECLARATIONS[op].math, ref_args)  # float32 both: the loop is under test
    (2.5 * ref_loss).backward()
    assert float(hard) > 0 and float(soft) > 0  # both terms present
    torch.testing.assert_close((loss, soft, hard), (ref_loss, ref_soft, ref_hard))
    for name in STUDENT:
        torch.testing.assert_close(args[name].grad, ref_args[name].grad, msg=name)


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_a_second_backward_through_the_graph_raises(op):
    args = _args(op)
    loss = _call(FUNCTIONS[op].apply, args)[0]
    loss.backward(retain_graph=True)
    first = args["student_weight"].grad.clone()
    with pytest.raises(RuntimeError, match="handed them to autograd already"):
        loss.backward()
    torch.testing.assert_close(args["student_weight"].grad, first)  # nothing added twice


def test_the_functions_carry_the_public_names_and_the_registering_module():
    names = {op: (fn.__name__, fn.__module__) for op, fn in FUNCTIONS.items()}
    assert names == {
        "fused_linear_cosine_similarity": ("LigerFusedLinearCosineSimilarityFunction", __name__),
        "fused_linear_jsd_loss": ("LigerFusedLinearJSDLossFunction", __name__),
    }
