"""Shared check for vendor backends: `liger_core.compile`'s paths run this backend's ops under
``torch.compile`` and give what its eager calls give.

- A scalar fused loss (fused_linear_cross_entropy, "mean" and "sum") compiles to one
  ``liger::<op>_with_grads`` call that drives the backend's autograd Function's ``forward`` and
  ``backward`` on a `liger_core.compile.RecordingCtx`; the compiled backward holds no Liger op and
  runs no backend op.
- rms_norm, as the opaque custom op and decomposed (``LIGER_COMPILE_DECOMPOSE``).
- fused_moe (`liger_core.compile.SAVED_STATE_OPS`): the compiled forward is one ``liger::fused_moe_saving``
  call and the compiled backward runs the backend's backward on what it kept, never the backend's forward
  (counted), with eager's output and gradients.

A vendor package runs it from its tests, its conftest naming the backend in
``LIGER_CONFORMANCE_BACKEND``:

    # tests/test_torch_compile.py
    from liger_core.conformance.compiled import *  # noqa: F403
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch

from liger_core import functional as F
from liger_core.registry import REGISTRY, LigerFallbackWarning

__all__ = [
    "test_compiled_fused_loss_takes_gradients_from_forward",
    "test_compiled_fused_moe_backward_runs_no_forward",
    "test_compiled_rms_norm",
    "vendor_dispatch",
]


@pytest.fixture
def vendor_dispatch(monkeypatch: pytest.MonkeyPatch, conformance_device: str) -> torch.device:
    """The device whose tensors the backend under test (``LIGER_CONFORMANCE_BACKEND``) serves: its own
    device natively, CPU tensors (dispatch forced to it) in the Triton interpreter."""
    name = os.environ.get("LIGER_CONFORMANCE_BACKEND", "").strip()
    if not name:
        raise RuntimeError("LIGER_CONFORMANCE_BACKEND must name the backend under test (set it in conftest.py)")
    import torch._dynamo  # noqa: F401  (installs the liger:: custom ops)

    if conformance_device == "cpu":
        monkeypatch.setenv("LIGER_BACKEND", name)
    monkeypatch.setattr(REGISTRY, "cache", {})
    assert REGISTRY.backend_for_device(conformance_device).name == name
    return torch.device(conformance_device)


def _capture(graphs: dict):
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs.setdefault(kind, []).append(gm)
            return make_boxed_func(gm.forward)

        return compiler

    return aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))


def _targets(gms) -> set[str]:
    return {str(n.target) for gm in gms for n in gm.graph.nodes if n.op == "call_function"}


def _leaves(tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_compiled_fused_loss_takes_gradients_from_forward(vendor_dispatch, reduction, monkeypatch):
    device = vendor_dispatch
    fn = REGISTRY.resolve("fused_linear_cross_entropy", device)
    function = getattr(fn, "__self__", None)
    assert isinstance(function, type) and issubclass(function, torch.autograd.Function), (
        f"{device}: fused_linear_cross_entropy is no autograd Function ({fn!r})"
    )
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(7, 8, generator=g), torch.randn(30, 8, generator=g), torch.randn(30, generator=g)
    target = torch.randint(0, 30, (7,), generator=g)
    target[2] = -100
    x, w, b, target = (t.to(device) for t in (x, w, b, target))

    def loss_of(x, w, b):
        return F.liger_fused_linear_cross_entropy(x, w, target, b, reduction=reduction) * 0.75

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LigerFallbackWarning)
        eager = _leaves((x, w, b))
        want = loss_of(*eager)
        want.backward()
        graphs: dict = {}
        torch._dynamo.reset()
        compiled = _leaves((x, w, b))
        got = torch.compile(loss_of, backend=_capture(graphs), fullgraph=True)(*compiled)
    assert "liger.fused_linear_cross_entropy_with_grads.default" in _targets(graphs["forward"])
    resolves = []
    real_resolve = REGISTRY.resolve
    monkeypatch.setattr(REGISTRY, "resolve", lambda *a: resolves.append(a) or real_resolve(*a))
    got.backward()
    assert not [t for t in _targets(graphs["backward"]) if t.startswith("liger.")], _targets(graphs["backward"])
    assert resolves == [], f"the compiled backward ran backend ops: {resolves}"
    torch.testing.assert_close(got, want)
    for name, a, e in zip(("input", "weight", "bias"), compiled, eager, strict=True):
        torch.testing.assert_close(a.grad, e.grad, msg=lambda m, name=name: f"grad of {name}: {m}")


@pytest.mark.parametrize("decompose", [False, True], ids=["opaque", "decomposed"])
def test_compiled_rms_norm(vendor_dispatch, decompose, monkeypatch):
    monkeypatch.setenv("LIGER_COMPILE_DECOMPOSE", "rms_norm" if decompose else "none")
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(2, 5, 32, generator=g), torch.randn(32, generator=g)
    up = torch.randn(2, 5, 32, generator=g)
    x, w, up = (t.to(vendor_dispatch) for t in (x, w, up))

    def norm(x, w):
        return F.liger_rms_norm(x, w, 1e-6)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LigerFallbackWarning)
        eager = _leaves((x, w))
        want = norm(*eager)
        want.backward(up)
        graphs: dict = {}
        torch._dynamo.reset()
        compiled = _leaves((x, w))
        got = torch.compile(norm, backend=_capture(graphs), fullgraph=True)(*compiled)
        got.backward(up)
    in_graph = "liger.rms_norm.default" in _targets(graphs["forward"])
    assert in_graph != decompose, _targets(graphs["forward"])
    torch.testing.assert_close(got, want)
    for a, e in zip(compiled, eager, strict=True):
        torch.testing.assert_close(a.grad, e.grad)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_fused_moe_backward_runs_no_forward(vendor_dispatch, backend, monkeypatch):
    device = vendor_dispatch
    function = getattr(REGISTRY.resolve("fused_moe", device), "__self__", None)
    assert isinstance(function, type) and issubclass(function, torch.autograd.Function), function
    assert getattr(function, "saved_form", None) is not None, f"{function.__name__} has no saved_form"
    g = torch.Generator().manual_seed(2)
    tokens, hidden, intermediate, experts, top_k = 13, 16, 24, 4, 2
    x = torch.randn(tokens, hidden, generator=g)
    gate_up = torch.randn(experts, 2 * intermediate, hidden, generator=g) / hidden**0.5
    down = torch.randn(experts, hidden, intermediate, generator=g) / intermediate**0.5
    index = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k, generator=g)
    up = torch.randn(tokens, hidden, generator=g)
    x, gate_up, down, index, weights, up = (t.to(device) for t in (x, gate_up, down, index, weights, up))

    def moe(x, gate_up, down, weights):
        return F.liger_fused_moe(x, gate_up, down, index, weights)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LigerFallbackWarning)
        eager = _leaves((x, gate_up, down, weights))
        want = moe(*eager)
        want.backward(up)
        forwards = []
        real_forward = function.forward
        monkeypatch.setattr(function, "forward", staticmethod(lambda *a: forwards.append(1) or real_forward(*a)))
        graphs: dict = {}
        torch._dynamo.reset()
        compiled = _leaves((x, gate_up, down, weights))
        fn = torch.compile(moe, backend=_capture(graphs) if backend == "aot_eager" else backend, fullgraph=True)
        got = fn(*compiled)
        assert forwards, "the compiled forward did not run the backend's forward"
        forwards.clear()
        got.backward(up)
    assert forwards == [], f"the compiled backward ran the backend's forward {len(forwards)} time(s)"
    if backend == "aot_eager":
        assert "liger.fused_moe_saving.default" in _targets(graphs["forward"]), _targets(graphs["forward"])
        assert "liger.fused_moe_from_saved.default" in _targets(graphs["backward"]), _targets(graphs["backward"])
    torch.testing.assert_close(got, want)
    for name, a, e in zip(
        ("hidden_states", "gate_up_proj", "down_proj", "top_k_weights"), compiled, eager, strict=True
    ):
        torch.testing.assert_close(a.grad, e.grad, msg=lambda m, name=name: f"grad of {name}: {m}")
