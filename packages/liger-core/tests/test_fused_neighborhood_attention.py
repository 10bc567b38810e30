"""fused_neighborhood_attention's reference against liger-kernel's formulation (its mask kernel's
window: start = max(0, i - half * dilation), end = min(seq, i + half * dilation + 1), positions
at a multiple of dilation from the query; a dense softmax over the kept scores), and its nn
modules against the projections and the op."""

import math

import pytest
import torch
from formula_checks import assert_reference_matches

from liger_core.nn import LigerFusedNeighborhoodAttention, LigerFusedNeighborhoodAttentionLayer
from liger_core.ops import fused_neighborhood_attention as nat


def _liger_kernel_formula(query, key, value, kernel_size, dilation, scale):
    """Query by query, the keys liger-kernel's mask kernel keeps (a window clipped at the ends)."""
    seq, head_dim = query.shape[-2:]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    half = kernel_size // 2
    rows = []
    for i in range(seq):
        start, end = max(0, i - half * dilation), min(seq, i + half * dilation + 1)
        keys = [j for j in range(start, end) if (j - i) % dilation == 0]
        scores = (query[..., i : i + 1, :] @ key[..., keys, :].transpose(-1, -2)) * scale
        rows.append(torch.softmax(scores, -1) @ value[..., keys, :])
    return torch.cat(rows, dim=-2)


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(kernel_size=1),
        dict(shape=(1, 2, 5, 16), kernel_size=9),
        dict(shape=(1, 2, 23, 5), kernel_size=5, dilation=2),
        dict(shape=(2, 1, 30, 8), kernel_size=7, dilation=3, scale=0.3),
    ],
)
def test_reference_matches_liger_kernel_formula(options):
    assert_reference_matches(nat, nat.args("cpu", **options), _liger_kernel_formula, ("query", "key", "value"))


def test_window_is_clipped_not_shifted():
    # kernel_size 5, dilation 2 at seq 8: the first query keeps keys 0, 2, 4 (three, not five).
    keep = nat.neighborhood(8, 5, 2, "cpu")
    assert keep[0].nonzero().flatten().tolist() == [0, 2, 4]
    assert keep[3].nonzero().flatten().tolist() == [1, 3, 5, 7]
    assert keep[7].nonzero().flatten().tolist() == [3, 5, 7]


def test_module_matches_projections_and_op():
    torch.manual_seed(0)
    module = LigerFusedNeighborhoodAttention(24, 3, kernel_size=5, dilation=2)
    assert module.head_dim == 8 and module.scale == pytest.approx(8**-0.5)
    x = torch.randn(2, 11, 24)
    b, s = x.shape[:2]

    def heads(t):
        return t.view(b, s, 3, 8).transpose(1, 2)

    attn = nat.math(heads(module.q_proj(x)), heads(module.k_proj(x)), heads(module.v_proj(x)), 5, 2, module.scale)
    want = module.out_proj(attn.transpose(1, 2).reshape(b, s, 24))
    torch.testing.assert_close(module(x), want)
    with pytest.raises(NotImplementedError, match="attention_mask"):
        module(x, torch.ones(2, 11))
    layer = LigerFusedNeighborhoodAttentionLayer(24, 3, kernel_size=5, dilation=2)
    torch.testing.assert_close(layer(x), x + layer.attention(layer.layer_norm(x)))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(hidden_size=10, num_heads=3), "divisible"),
        (dict(kernel_size=4), "odd"),
        (dict(kernel_size=0), "positive"),
        (dict(dilation=0), "positive"),
    ],
)
def test_module_rejects_bad_configuration(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LigerFusedNeighborhoodAttention(**{"hidden_size": 12, "num_heads": 3, **kwargs})
