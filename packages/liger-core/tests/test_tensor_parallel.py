"""Ops on DTensor inputs (`liger_core.distributed`): two CPU processes over gloo against one
process, forward and every gradient, with the backend this session dispatches to (the
reference in ``core``; liger-ops-cuda's kernels in the interpreter in ``hf-interpreter``, which
runs the same cases from tests/hf/test_tensor_parallel.py).

Tolerance: float32, rtol = atol = 1e-5. Each rank computes whole rows, as one process does; only
the sums over rows of the weight gradients are split between the ranks and added in another order.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed as dist
import tp_harness

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="this torch build has no torch.distributed with gloo",
)

CASES = (
    "rms_norm-seq",
    "rms_norm-batch-gemma",
    "rms_norm-replicated",
    "fused_add_rms_norm-seq",
    "layer_norm-seq",
    "swiglu-colwise",
    "geglu-colwise",
    "rope-heads",
    "rope-heads-unsqueeze2",
)
# The error each refused placement raises: (type, message pattern naming the argument).
ERRORS = {
    "rms_norm-x-last-dim": ("ValueError", r"rms_norm: x is Shard\(dim=2\) on mesh dim 0, along dim 2"),
    "rms_norm-weight-sharded": ("ValueError", r"rms_norm: weight must be replicated.*Shard\(dim=0\)"),
    "rms_norm-x-partial": ("ValueError", r"rms_norm: x is Partial\(sum\).*pending a reduction"),
    "rms_norm-plain-weight-requires-grad": ("TypeError", r"rms_norm: weight requires grad but is a plain tensor"),
    "fused_add_rms_norm-misaligned": ("ValueError", r"x and residual combine elementwise and must be sharded alike"),
    "swiglu-misaligned": ("ValueError", r"swiglu: a and b .*sharded alike; got a.placements=\(Shard\(dim=2\),\)"),
    "swiglu-plain-b": ("TypeError", r"swiglu: b is a plain tensor while a is a DTensor"),
    "rope-seq-sharded": ("ValueError", r"rope: q is Shard\(dim=2\) on mesh dim 0, along dim 2"),
    "layer_norm-bias-sharded": ("ValueError", r"layer_norm: bias must be replicated"),
}


@pytest.fixture(scope="module")
def results():
    return tp_harness.spawn(tp_harness.op_cases)


def check_case(results: dict, name: str) -> None:
    case = results[name]
    single, parallel = case["single"], case["parallel"]
    assert set(single) == set(parallel)
    for key in single:
        torch.testing.assert_close(parallel[key], single[key], rtol=1e-5, atol=1e-5, msg=lambda m: f"{name} {key}: {m}")


@pytest.mark.parametrize("name", CASES)
def test_matches_one_process(results, name):
    check_case(results, name)


def test_replicated_parameter_gradients(results):
    """A norm weight's gradient from sequence-sharded rows is Partial(sum), as torch's own
    RMSNorm gives it on the same placements; from replicated rows, Replicate."""
    torch_seq = results["torch_rms_norm-seq"]["placements"]["weight"]
    assert torch_seq == "(Partial(sum),)"
    for name in ("rms_norm-seq", "rms_norm-batch-gemma", "fused_add_rms_norm-seq"):
        assert results[name]["placements"]["weight"] == torch_seq, name
    assert results["layer_norm-seq"]["placements"] == {
        "x": "(Shard(dim=1),)",
        "weight": torch_seq,
        "bias": torch_seq,
    }
    assert results["rms_norm-replicated"]["placements"]["weight"] == "(Replicate(),)"
    # The inputs' gradients keep the inputs' placements.
    assert results["swiglu-colwise"]["placements"] == {"a": "(Shard(dim=2),)", "b": "(Shard(dim=2),)"}
    assert results["rope-heads"]["placements"] == {"q": "(Shard(dim=1),)", "k": "(Shard(dim=1),)"}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_refused_placements(results, name):
    got = results["errors"][name]
    assert got is not None, f"{name}: no error raised"
    kind, pattern = ERRORS[name]
    assert got[0] == kind and re.search(pattern, got[1]), got
