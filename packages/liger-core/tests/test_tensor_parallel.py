"""Ops on DTensor inputs (`liger_core.distributed`): two CPU processes over gloo against one
process, forward and every gradient, with the backend this session dispatches to (the
reference in ``core``; liger-ops-cuda's kernels in the interpreter in ``hf-interpreter``, which
runs the same cases from tests/hf/test_tp_models.py).

Tolerance: float32, rtol = atol = 1e-5. Each rank computes whole rows, as one process does; only
the sums over rows of the weight gradients are split between the ranks and added in another order.
The cases and checks live in tp_harness.py.
"""

from __future__ import annotations

import pytest
import torch.distributed as dist
import tp_harness

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="this torch build has no torch.distributed with gloo",
)


@pytest.fixture(scope="module")
def results():
    return tp_harness.spawn(tp_harness.op_cases)


@pytest.mark.parametrize("name", tp_harness.CASES)
def test_matches_one_process(results, name):
    tp_harness.check_case(results, name)


def test_replicated_parameter_gradients(results):
    tp_harness.check_placements(results)


@pytest.mark.parametrize("name", sorted(tp_harness.ERRORS))
def test_refused_placements(results, name):
    tp_harness.check_error(results, name)


SHARDED_OPS = ("rms_norm", "fused_add_rms_norm", "layer_norm", "swiglu", "geglu", "rope")


def test_declarations():
    """Each declared sharding names the op's own arguments and outputs, and the functional entry
    point routes DTensors to it (every op the cases above run, and no other, declares one)."""
    import inspect

    from liger_core import functional
    from liger_core.interface import CATALOGUE

    assert sorted(name for name, op in CATALOGUE.items() if op.sharding is not None) == sorted(SHARDED_OPS)
    for name in SHARDED_OPS:
        op = CATALOGUE[name]
        s = op.sharding
        params = set(op.signature.parameters)
        assert set(s.inputs) | set(s.replicated) <= params, name
        assert set(s.outputs) <= set(s.inputs) and len(s.outputs) == len(op.outputs), name
        source = inspect.getsource(getattr(functional, f"liger_{name}"))
        assert f'distributed.call("{name}"' in source, name
