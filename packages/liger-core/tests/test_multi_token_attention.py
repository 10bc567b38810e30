"""multi_token_attention's reference against liger-kernel's own formulation: the future filled
with -1e9 (not excluded), activated, convolved, zeroed (its ops/multi_token_attention.py and the
PyTorch baseline of its benchmark), and its nn module's parameters."""

import pytest
import torch
import torch.nn.functional as F
from formula_checks import assert_reference_matches

from liger_core.nn import LigerMultiTokenAttention
from liger_core.ops import multi_token_attention as mta
from liger_core.ops.sparsemax import math as sparsemax_math


def _liger_kernel_formula(scores, weight, bias, stride, padding, dilation, groups, sparse):
    seq = scores.shape[-1]
    keep = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    filled = scores.masked_fill(~keep, -1e9)
    probs = sparsemax_math(filled, -1) if sparse else torch.softmax(filled, -1)
    out = F.conv2d(probs, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
    out_keep = torch.tril(torch.ones(out.shape[-2:], dtype=torch.bool))
    return out.masked_fill(~out_keep, 0.0)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize(
    "options", [dict(padding=1), dict(padding=1, stride=2, shape=(2, 4, 9, 9)), dict(dilation=2, shape=(2, 4, 10, 10))]
)
def test_reference_matches_liger_kernel_formula(sparse, options):
    assert_reference_matches(
        mta, mta.args("cpu", **options, sparse=sparse), _liger_kernel_formula, ("scores", "weight", "bias")
    )


def test_module_parameters_and_call():
    module = LigerMultiTokenAttention(4, 6, 3, padding=1, groups=2, dtype=torch.float32)
    assert module.weight.shape == (6, 2, 3, 3) and module.bias.shape == (6,)
    assert torch.count_nonzero(module.bias) == 0
    scores = torch.randn(2, 4, 5, 5, dtype=torch.float32)
    want = mta.math(scores, module.weight, module.bias, 1, 1, 1, 2, False)
    torch.testing.assert_close(module(scores), want)
    assert LigerMultiTokenAttention(4, 4, 3, bias=False).bias is None
