"""torch.compile of the functional API (`liger_core.compile`): every op compiles with
``fullgraph=True`` (no graph break) and gives the outputs and every gradient of the eager call.

The ops run on whatever backend serves the CPU (the reference in the ``core`` session; a vendor's
kernels in the Triton interpreter where ``LIGER_BACKEND`` says so). Compiled and eager calls run the
same backend's op, so they agree to the dtype's default `torch.testing.assert_close` tolerance
(float32: rtol 1.3e-6, atol 1e-5; bfloat16: rtol 1.6e-2, atol 1e-5).

The per-op cases use the ``aot_eager`` backend (Dynamo + AOTAutograd, no code generation: the
custom op and its autograd are what is under test); `test_inductor` runs Inductor on a few.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

from liger_core import compile as C
from liger_core import functional as F
from liger_core.interface import CATALOGUE
from liger_core.op import Op, Sample
from liger_core.registry import REGISTRY, LigerFallbackWarning

# Ops no custom op can carry (a process group argument): compiled code calls them eagerly.
EAGER_ONLY_OPS = ("vocab_parallel_cross_entropy",)


@pytest.fixture(autouse=True)
def _opaque(monkeypatch):
    """This file checks the custom ops, so every op runs opaque (``COMPILE_STRATEGY`` decomposes some by
    default); the decomposition tests name their ops."""
    monkeypatch.setenv(C.DECOMPOSE_ENV, "none")


torch._dynamo.config.cache_size_limit = 64  # one graph per op and sample; the default 8 would recompile too often


def _cases():
    """Each op's smoke samples in float32, the first also in bfloat16 (the dtype only changes the
    fake outputs' dtypes, which the first sample covers)."""
    for name, op in CATALOGUE.items():
        if name in EAGER_ONLY_OPS:
            continue
        for k, smoke in enumerate(op.smoke):
            for dtype in (torch.float32, torch.bfloat16) if k == 0 else (torch.float32,):
                yield pytest.param(op, smoke.with_params(dtype=dtype), id=f"{name}-{k}-{str(dtype)[6:]}")


def _prepare(op: Op, sample: Sample, **changes):
    args = op.bind({**sample.args("cpu"), **changes})
    for name in op.grads:
        t = args[name]
        if isinstance(t, torch.Tensor) and t.is_floating_point() and name not in sample.frozen:
            args[name] = t.detach().clone().requires_grad_(True)
    return args


def _run(fn, op: Op, args: dict, seed: int = 7):
    """Outputs and the gradients of every differentiable input under seeded upstream gradients."""
    values = {
        k: (v.detach().clone().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v)
        for k, v in args.items()
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LigerFallbackWarning)
        out = fn(*values.values())
    outs = out if isinstance(out, tuple) else (out,)
    g = torch.Generator().manual_seed(seed)
    pairs = [
        (o, torch.randn(o.shape, generator=g).to(o.dtype))
        for o, name in zip(outs, op.outputs, strict=False)
        if name not in op.no_grad_outputs and o.requires_grad
    ]
    leaves = [v for v in values.values() if isinstance(v, torch.Tensor) and v.requires_grad]
    grads = torch.autograd.grad([o for o, _ in pairs], leaves, [u for _, u in pairs]) if pairs and leaves else ()
    return outs, grads, values


def _public(op: Op):
    return getattr(F, f"liger_{op.name}")


def _compare(op: Op, args: dict, backend: str = "aot_eager") -> None:
    fn = _public(op)
    want, want_grads, _ = _run(fn, op, args)
    torch._dynamo.reset()
    got, got_grads, _ = _run(torch.compile(fn, backend=backend, fullgraph=True), op, args)
    assert len(got) == len(want), f"{op.name}: compiled call returned {len(got)} outputs, eager {len(want)}"
    for name, a, b in zip(op.outputs, got, want, strict=False):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"{op.name} output {name}: {m}")
    assert len(got_grads) == len(want_grads)
    for a, b in zip(got_grads, want_grads, strict=True):
        tol = {}
        if op.grads_in_forward is not None and op.grads_in_forward(args) and b.dtype in (torch.bfloat16, torch.float16):
            # Compiled: the gradient at upstream 1, rounded, then times the upstream and rounded again
            # (what the vendors' fused losses do eagerly too); the reference's eager autograd carries the
            # upstream through instead. One rounding apart: one ulp of the dtype at the gradient's scale.
            tol = {"rtol": 1.6e-2, "atol": torch.finfo(b.dtype).eps * float(b.abs().max())}
        torch.testing.assert_close(a, b, msg=lambda m: f"{op.name} gradient: {m}", **tol)


@pytest.mark.parametrize(("op", "sample"), list(_cases()))
def test_compiled_op(op: Op, sample: Sample):
    _compare(op, _prepare(op, sample))


IN_PLACE = [op for op in CATALOGUE.values() if "in_place" in op.signature.parameters and op.name not in EAGER_ONLY_OPS]


@pytest.mark.parametrize("op", IN_PLACE, ids=[op.name for op in IN_PLACE])
def test_in_place_compiles_out_of_place(op: Op):
    """``in_place=True`` allows a backend to overwrite buffers; compiled calls do not use the allowance
    (a graph must know its mutations): the caller's tensors stay intact, results equal eager's."""
    args = _prepare(op, op.smoke[0], in_place=True)
    before = {k: v.detach().clone() for k, v in args.items() if isinstance(v, torch.Tensor)}
    fn = torch.compile(_public(op), backend="aot_eager", fullgraph=True)
    torch._dynamo.reset()
    got, _, values = _run(fn, op, args)
    for k, v in values.items():
        if isinstance(v, torch.Tensor):
            torch.testing.assert_close(
                v.detach(), before[k], rtol=0, atol=0, msg=lambda m, k=k: f"{op.name}: {k} changed: {m}"
            )
    _compare(op, _prepare(op, op.smoke[0], in_place=False))


@pytest.mark.parametrize("return_z_loss", [False, True])
def test_dropped_outputs(return_z_loss: bool):
    """An option that drops an output (``return_z_loss``) gives the eager call's arity when compiled."""
    op = CATALOGUE["cross_entropy"]
    _compare(op, _prepare(op, op.smoke[0], return_z_loss=return_z_loss))


@pytest.mark.parametrize("name", ["rms_norm", "swiglu", "cross_entropy"])
def test_inductor(name: str):
    """Inductor compiles around the custom ops (they run as extern calls in its generated code)."""
    op = CATALOGUE[name]
    _compare(op, _prepare(op, op.smoke[0]), backend="inductor")


def test_compiled_op_inside_a_larger_graph():
    """No graph break between Liger ops and the torch code around them; grads flow through both."""
    x = torch.randn(3, 5, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    proj = torch.randn(16, 32, requires_grad=True)

    def block(x, w, proj):
        h = F.liger_rms_norm(x, w)
        a, b = (h @ proj).chunk(2, dim=-1)
        return F.liger_softmax(F.liger_swiglu(a, b) + h).square().mean()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LigerFallbackWarning)
        want = block(x, w, proj)
        want_grads = torch.autograd.grad(want, (x, w, proj))
        torch._dynamo.reset()
        explained = torch._dynamo.explain(block)(x, w, proj)
        assert explained.graph_break_count == 0, explained.break_reasons
        ops = {str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"}
        assert {"liger.rms_norm.default", "liger.swiglu.default", "liger.softmax.default"} <= ops, ops
        torch._dynamo.reset()
        got = torch.compile(block, backend="aot_eager", fullgraph=True)(x, w, proj)
        got_grads = torch.autograd.grad(got, (x, w, proj))
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b)


def test_eager_dispatch_unchanged():
    """Eager calls get the backend's own callable from `resolve`, never the compiled wrapper."""
    C.install()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LigerFallbackWarning)
        for name in CATALOGUE:
            fn = REGISTRY.resolve(name, "cpu")
            assert not isinstance(fn, C.CompiledOp), name


def test_every_op_has_a_custom_op():
    C.install()
    assert set(C.EAGER_ONLY) == set(EAGER_ONLY_OPS), C.EAGER_ONLY
    for name, op in CATALOGUE.items():
        if name in EAGER_ONLY_OPS:
            continue
        schema = str(getattr(torch.ops.liger, name).default._schema)
        for param in op.signature.parameters:
            assert f" {param}" in schema, f"{name}: {param} missing from {schema}"


def test_schema_type_error_names_the_parameter():
    def weird(x: torch.Tensor, table: dict) -> torch.Tensor:  # pragma: no cover - never called
        return x

    op = CATALOGUE["relu_squared"]
    import dataclasses
    import inspect

    fake = dataclasses.replace(op, reference=weird)
    with pytest.raises(TypeError, match=r"weird: parameter 'table' has type 'dict'"):
        C.schema_type(fake, inspect.signature(weird).parameters["table"])


def test_import_does_not_load_dynamo():
    """liger-core leaves torch._dynamo (seconds to import) unloaded, and installs the custom ops once
    someone else imports it."""
    code = (
        "import sys, torch, liger_core.functional\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "import torch._dynamo\n"
        "print(torch.ops.liger.rms_norm.default._schema)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "liger::rms_norm(Tensor x" in out.stdout


def test_dynamic_shapes():
    """With ``dynamic=True`` one graph serves several sequence lengths (the fake outputs follow the
    symbolic shapes)."""
    op = CATALOGUE["fused_linear_cross_entropy"]
    fn = torch.compile(_public(op), backend="aot_eager", fullgraph=True, dynamic=True)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # reset() keeps the counters of earlier tests
    for tokens in (6, 9):
        args = _prepare(op, op.smoke[0].with_params(shape=(tokens, 8, 5)))
        want, want_grads, _ = _run(_public(op), op, args)
        got, got_grads, _ = _run(fn, op, args)
        for a, b in zip(got + got_grads, want + want_grads, strict=True):
            torch.testing.assert_close(a, b)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1, "a second graph was compiled"


def test_eager_only_op_runs_eagerly_under_compile():
    """vocab_parallel_cross_entropy (a process group argument) compiles with a graph break at its call and
    computes what eager does; fullgraph=True refuses it."""
    from liger_core import functional as F

    C.install()
    logits = torch.randn(6, 11, requires_grad=True)
    target = torch.tensor([0, 3, -100, 10, 5, 7])

    def loss_of(x):
        return F.liger_vocab_parallel_cross_entropy(x * 2.0, target) + x.square().mean()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LigerFallbackWarning)
        want = loss_of(logits)
        (want_grad,) = torch.autograd.grad(want, logits)
        torch._dynamo.reset()
        got = torch.compile(loss_of, backend="aot_eager")(logits)
        (got_grad,) = torch.autograd.grad(got, logits)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_grad, want_grad)
        torch._dynamo.reset()
        with pytest.raises(Exception, match="(?i)graph break|disable|skip"):
            torch.compile(loss_of, backend="aot_eager", fullgraph=True)(logits)


# -- gradients in the forward (scalar losses) ---------------------------------------------------

GRADS_IN_FORWARD = [
    op for op in CATALOGUE.values() if op.grads_in_forward is not None and op.name not in EAGER_ONLY_OPS
]


def _graph_capture(graphs: dict):
    """An aot_eager-like backend that keeps the forward and backward graphs AOTAutograd hands it."""
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


@pytest.mark.parametrize("op", GRADS_IN_FORWARD, ids=[op.name for op in GRADS_IN_FORWARD])
def test_grads_in_forward(op: Op, monkeypatch):
    """A scalar loss compiles to one ``liger::<op>_with_grads`` call in the forward graph; the backward
    graph holds no Liger op (it scales the forward's gradients by the upstream one: nothing that could
    re-run the forward, sync the host or call Python), and no backend op runs during the backward."""
    args = _prepare(op, op.smoke[0])
    assert op.grads_in_forward(args), f"{op.name}: the first smoke sample should take the gradients-in-forward path"
    _compare(op, args)
    graphs: dict = {}
    torch._dynamo.reset()
    fn = torch.compile(_public(op), backend=_graph_capture(graphs), fullgraph=True)
    values = {k: (v.detach().clone().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v)
              for k, v in args.items()}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LigerFallbackWarning)
        out = fn(*values.values())
    loss = out[0] if isinstance(out, tuple) else out
    assert f"liger.{op.name}_with_grads.default" in _targets(graphs["forward"]), _targets(graphs["forward"])
    resolves = []
    real_resolve = REGISTRY.resolve
    monkeypatch.setattr(REGISTRY, "resolve", lambda *a: resolves.append(a) or real_resolve(*a))
    (loss * 2.5).backward()
    backward_ops = _targets(graphs["backward"])
    assert not [t for t in backward_ops if t.startswith("liger.")], backward_ops
    assert resolves == [], f"{op.name}: the compiled backward ran backend ops {resolves}"


def test_grads_in_forward_inductor():
    op = CATALOGUE["fused_linear_cross_entropy"]
    _compare(op, _prepare(op, op.smoke[0]), backend="inductor")


@pytest.mark.parametrize("reduction", ["sum", "none"])
def test_cross_entropy_reductions(reduction: str):
    """``sum`` takes the gradients from the forward; ``none`` (a per-token loss, not a scalar) keeps the
    forward op and a backward op that recomputes."""
    op = CATALOGUE["fused_linear_cross_entropy"]
    args = _prepare(op, op.smoke[0], reduction=reduction)
    _compare(op, args)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(_public(op))(*args.values())
    name = (
        "liger.fused_linear_cross_entropy_with_grads.default"
        if reduction == "sum"
        else ("liger.fused_linear_cross_entropy.default")
    )
    assert name in {str(n.target) for g in explained.graphs for n in g.graph.nodes}


def test_grads_in_forward_frozen_weight_and_no_grad():
    """Only the inputs that require grad get one; under no_grad the plain forward op runs."""
    op = CATALOGUE["fused_linear_cross_entropy"]
    args = _prepare(op, op.smoke[0])
    args["weight"] = args["weight"].detach()
    _compare(op, args)
    torch._dynamo.reset()
    with torch.no_grad():
        explained = torch._dynamo.explain(_public(op))(*args.values())
    targets = {str(n.target) for g in explained.graphs for n in g.graph.nodes}
    assert "liger.fused_linear_cross_entropy.default" in targets, targets


def test_dynamic_without_recompiles():
    """``dynamic=None`` (torch.compile's default): the second sequence length recompiles once to a dynamic
    graph, later lengths reuse it."""
    op = CATALOGUE["fused_linear_cross_entropy"]
    fn = torch.compile(_public(op), backend="aot_eager", fullgraph=True)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    for tokens in (6, 9, 11, 14):
        args = _prepare(op, op.smoke[0].with_params(shape=(tokens, 8, 5)))
        want, want_grads, _ = _run(_public(op), op, args)
        got, got_grads, _ = _run(fn, op, args)
        for a, b in zip(got + got_grads, want + want_grads, strict=True):
            torch.testing.assert_close(a, b)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2, dict(torch._dynamo.utils.counters["stats"])


# -- decomposition (LIGER_COMPILE_DECOMPOSE) ----------------------------------------------------

DECODER_OPS = (
    "rms_norm",
    "fused_add_rms_norm",
    "layer_norm",
    "rope",
    "swiglu",
    "geglu",
    "relu_squared",
    "cross_entropy",
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", DECODER_OPS)
def test_decomposed_op(name: str, dtype: torch.dtype, monkeypatch):
    """With ``LIGER_COMPILE_DECOMPOSE`` naming the op, compiled code traces its ``math`` (no Liger op in
    the graph) and gives the eager op's outputs and gradients, in the contract's dtypes."""
    monkeypatch.setenv(C.DECOMPOSE_ENV, name)
    op = CATALOGUE[name]
    args = _prepare(op, op.smoke[0].with_params(dtype=dtype))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(_public(op))(*args.values())
    assert explained.graph_break_count == 0, explained.break_reasons
    targets = {str(n.target) for g in explained.graphs for n in g.graph.nodes}
    assert not [t for t in targets if t.startswith("liger.")], targets
    want, want_grads, _ = _run(_public(op), op, args)
    torch._dynamo.reset()
    got, got_grads, _ = _run(torch.compile(_public(op), backend="aot_eager", fullgraph=True), op, args)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    for a, b in zip(got + got_grads, want + want_grads, strict=True):
        assert a.dtype == b.dtype, f"{name}: dtype {a.dtype}, eager {b.dtype}"
        torch.testing.assert_close(a, b, **tol)


def test_decomposed_inductor(monkeypatch):
    monkeypatch.setenv(C.DECOMPOSE_ENV, "rms_norm,swiglu")
    op = CATALOGUE["rms_norm"]
    _compare(op, _prepare(op, op.smoke[0]), backend="inductor")


def test_decompose_setting():
    assert C.decomposed_ops({}) == frozenset(n for n, how in C.COMPILE_STRATEGY.items() if how == "decompose")
    assert C.decomposed_ops({C.DECOMPOSE_ENV: "all"}) == frozenset(CATALOGUE)
    assert C.decomposed_ops({C.DECOMPOSE_ENV: "none"}) == frozenset()
    assert C.decomposed_ops({C.DECOMPOSE_ENV: " rms_norm, rope "}) == {"rms_norm", "rope"}
    with pytest.raises(ValueError, match=r"LIGER_COMPILE_DECOMPOSE='rms_norm,rmsnorm' names unknown ops \['rmsnorm'\]"):
        C.decomposed_ops({C.DECOMPOSE_ENV: "rms_norm,rmsnorm"})


def _storages(tensors) -> list[int]:
    return [t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor) and t.numel()]


@pytest.mark.parametrize("op", [o for n, o in CATALOGUE.items() if n not in EAGER_ONLY_OPS], ids=lambda o: o.name)
def test_backward_op_outputs_alias_nothing(op: Op):
    """``liger::<op>_backward`` returns gradients that share no storage with each other or with any input
    (the incoming gradients included). A custom op may not alias: Inductor treats its outputs as buffers of
    their own and reuses them in place. fused_add_rms_norm's backend hands back one tensor as both x's and
    the residual's gradient, and under Inductor that corrupted Gemma-3's residual stream gradients."""
    compiled = C.compiled(op.name)
    args = _prepare(op, op.smoke[0])
    values = [args[n] for n in compiled.names]
    with torch.no_grad():
        outs = compiled.forward_op(*values)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    torch.manual_seed(3)
    grad_outputs = [torch.randn_like(o) if o.is_floating_point() else None for o in outs]
    needs = [isinstance(args[n], torch.Tensor) and args[n].requires_grad for n in op.grads]
    detached = [v.detach() if isinstance(v, torch.Tensor) else v for v in values]
    grads = compiled.backward_op(grad_outputs, needs, *detached)
    inputs = _storages([*grad_outputs, *detached])
    produced = _storages(grads)
    assert len(set(produced)) == len(produced), f"{op.name}: two gradients share storage"
    assert not set(produced) & set(inputs), f"{op.name}: a gradient aliases an input"
