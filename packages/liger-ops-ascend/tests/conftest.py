"""Run the kernels natively on an Ascend NPU, else in the Triton interpreter on CPU.

The source tree's backend is loaded the way an installed one is (liger-core's registry reads
LIGER_EXTRA_BACKENDS), so the environment is set before anything imports the registry.
"""

import itertools
import operator
import os

# torch autoloads torch_npu when it is installed; without a working CANN that import fails
# and takes `import torch` with it. npu_available() below imports torch_npu itself, guarded.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_ascend")
os.environ.setdefault("LIGER_CONFORMANCE_BACKEND", "ascend")

from liger_core.device import npu_available

if not npu_available():
    # Must be set before triton is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

pytest_plugins = ["liger_core.conformance.plugin"]


def _numpy_max_min_in_the_interpreter() -> None:
    """Give triton-ascend's own tl.max / tl.min the interpreter's numpy reduction.

    triton-ascend (3.2) replaces tl.max and tl.min with versions that reduce with combine
    functions of its own (``triton.triton_patch.language.standard``); its interpreter only
    recognises upstream's (``tl.standard._elementwise_max``), so every tl.max / tl.min of these
    kernels ran its per-element Python fallback (``ReduceOps.generic_reduce``, a combine_fn call
    per element): about 60% of this package's interpreter time. Its interpreter lowers
    maximum/minimum, with or without propagate_nan, to np.maximum/np.minimum, so folding them
    element by element gives exactly what np.max/np.min give, NaN included. Test-only: nothing
    runs on an NPU this way, and the kernels are traced unchanged.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    try:
        import numpy as np
        from triton.runtime import interpreter
        from triton.triton_patch.language import standard as ascend_standard
    except ImportError:  # not triton-ascend, or another layout: the interpreter's own path stays
        return
    numpy_reductions = [
        (getattr(ascend_standard, name, None), op)
        for name, op in (
            ("_elementwise_max_default", np.max),
            ("_elementwise_max_propagate_nan", np.max),
            ("_elementwise_min", np.min),
        )
    ]
    generic = interpreter.ReduceOps.apply_impl

    def apply_impl(self, input):
        for combine_fn, op in numpy_reductions:
            if combine_fn is not None and self.combine_fn is combine_fn:
                return self.min_max(input[0], val_reduce_op=op)
        return generic(self, input)

    interpreter.ReduceOps.apply_impl = apply_impl


def _patch_lang_only_what_changed() -> None:
    """Skip the interpreter's re-scan of triton.language when nothing in it changed.

    triton-ascend's interpreter calls ``_patch_builtin`` on tl, tl.tensor and tl.math at every
    call of a @jit function from a kernel (tl.max and tl.min are such functions), and each call
    walks every member with ``inspect.getmembers`` to wrap the builtins: about 40% of this
    package's interpreter time. The first call wraps every builtin, so a later one can only
    find a builtin among the members assigned since; this wrapper hands the call on only then
    (and on the first call for each namespace), so what gets patched is unchanged.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    try:
        from triton.runtime import interpreter
        from triton.triton_patch.language import standard  # noqa: F401  (triton-ascend only)
    except ImportError:
        return
    scan = interpreter._patch_builtin
    seen: dict[tuple[int, int], dict[str, object]] = {}

    def members(namespace) -> dict[str, object]:
        if isinstance(namespace, type):  # a class: what attribute lookup finds, bases first
            found: dict[str, object] = {}
            for klass in reversed(namespace.__mro__):
                found.update(vars(klass))
            return found
        return dict(vars(namespace))

    def patch_builtin(namespace, builder) -> None:
        key = (id(namespace), id(builder))
        now = members(namespace)
        before = seen.get(key)
        if before is None or before.keys() != now.keys():
            changed = now.keys()
        else:  # reassigning a name keeps its place in the dict: compare value by value, in C
            changed = itertools.compress(now.keys(), map(operator.is_not, before.values(), now.values()))
        if before is None or any(interpreter.tl.core.is_builtin(getattr(namespace, name, None)) for name in changed):
            scan(namespace, builder)
            now = members(namespace)
        seen[key] = now

    interpreter._patch_builtin = patch_builtin


_numpy_max_min_in_the_interpreter()
_patch_lang_only_what_changed()


@pytest.fixture(scope="session")
def backend(conformance_backend):
    """This package's backend as liger-core's registry loaded and validated it."""
    return conformance_backend


@pytest.fixture(scope="session")
def device(conformance_device):
    return conformance_device


@pytest.fixture
def few_cores(monkeypatch):
    """3 programs: each loops over several row blocks, the last iteration partly masked."""
    monkeypatch.setenv("LIGER_ASCEND_VECTOR_CORES", "3")


@pytest.fixture
def small_ub(monkeypatch):
    """An 8 KiB UB (about 7 KiB budget): a few hundred columns no longer fit one tile."""
    monkeypatch.setenv("LIGER_ASCEND_UB_BYTES", str(8 * 1024))


@pytest.fixture
def rows_per_tile(monkeypatch):
    """At most 8 rows per tile: tile shapes no longer depend on the row count, so a few dozen
    short rows would otherwise fit one tile; capped, programs walk several row blocks."""
    from liger_ops_ascend import hardware

    monkeypatch.setattr(hardware, "MAX_BLOCK_M", 8)


@pytest.fixture
def current_hw(device):
    """``current_hw()``: the hardware facts a launch on ``device`` plans with, read when called
    (after the environment fixtures above have set their overrides)."""
    import torch

    from liger_ops_ascend import hardware

    return lambda: hardware.current(torch.device(device))
