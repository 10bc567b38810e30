"""Every kernel specialization the ops launch, compiled for an H100 (sm90) on the CPU: Triton's
CUDA backend, from the frontend to ptxas (bundled with the wheel), no GPU needed.

Why: CI runs the kernels in the interpreter, which executes their Python and so accepts code the
compiler rejects. A static ``if PAIR_BITS == 32: return ...`` in a helper passed every interpreter
test and failed to compile on the GPU (the compiler also builds the code after a static early
return). This test records each launch the ops make on their smoke samples (bf16 and fp32), while
the interpreter runs them, and compiles every distinct (kernel, argument types, constexprs, warps,
stages) in a fresh process without the interpreter.

Integer arguments compile as plain i32/i64 (the GPU runtime further specialises values equal to 1
and multiples of 16; the code paths are the same). On a GPU the native tests compile everything
anyway, so this test runs only under the interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from liger_core import registry
from liger_core.interface import CATALOGUE

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="natively, every test compiles its kernels already"
)

_COMPILE = r"""
import importlib, json, os, sys
from concurrent.futures import ProcessPoolExecutor

def compile_one(spec):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    kernel = getattr(importlib.import_module(spec["module"]), spec["name"])
    names = kernel.arg_names
    sig = {a: "constexpr" if a in spec["consts"] else spec["sig"][a] for a in names}
    consts = {(names.index(a),): v for a, v in spec["consts"].items()}
    try:
        triton.compile(ASTSource(kernel, sig, consts), target=GPUTarget("cuda", 90, 32), options=spec["options"])
        return None
    except Exception as e:  # the compiler's message, whatever its type
        cause = e
        while cause.__cause__ is not None:
            cause = cause.__cause__
        return {"name": spec["name"], "consts": spec["consts"], "error": str(e)[-1500:], "cause": repr(cause)[:500]}

specs = json.load(sys.stdin)
with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
    print(json.dumps([r for r in pool.map(compile_one, specs) if r is not None]))
"""

_POINTEE = {
    torch.float32: "fp32",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float64: "fp64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "i1",
}


def _type(value) -> str:
    if isinstance(value, torch.Tensor):
        return "*" + _POINTEE[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"an argument of type {type(value).__name__}")


def _constant(value):
    # Constexprs as JSON: numbers, strings, booleans, None; a dtype by its name.
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _package_kernels() -> set[tuple[str, str]]:
    """(module, name) of every ``*_kernel`` Triton function of liger_ops_cuda."""
    import importlib
    import pkgutil

    from triton.runtime.interpreter import InterpretedFunction

    import liger_ops_cuda

    found = set()
    for info in pkgutil.iter_modules(liger_ops_cuda.__path__):
        module = importlib.import_module(f"{liger_ops_cuda.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, InterpretedFunction) and name.endswith("_kernel"):
                found.add((value.fn.__module__, name))
    return found


def _record_launches(monkeypatch) -> list[dict]:
    """The specializations of every launch the ops make on their smoke samples (bf16 and fp32),
    forward and backward, recorded as the interpreter runs them; then group_norm's again with
    its split plan forced (the smoke shapes take the fused one)."""
    from triton.runtime.interpreter import InterpretedFunction

    from liger_ops_cuda import hardware

    seen: dict[str, dict] = {}
    real_run = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        names = self.arg_names
        bound = dict(zip(names, args))
        consts = {k: _constant(v) for k, v in kwargs.items() if k in names}
        consts.update({k: None for k, v in bound.items() if v is None})
        sig = {k: _type(v) for k, v in bound.items() if v is not None}
        options = {k: v for k, v in kwargs.items() if k in ("num_warps", "num_stages")}
        spec = {"module": self.fn.__module__, "name": self.fn.__name__, "sig": sig, "consts": consts}
        spec["options"] = options
        seen.setdefault(json.dumps(spec, sort_keys=True), spec)
        return real_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", run)
    backend = registry.get_backend("cuda")

    def run_smoke(op):
        for sample in CATALOGUE[op].smoke:
            for dtype in (torch.bfloat16, torch.float32):
                args = {
                    k: v.detach().requires_grad_() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                    for k, v in CATALOGUE[op].bind(sample.with_params(dtype=dtype).args("cpu")).items()
                }
                out = backend.op(op)(*args.values())
                outs = [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, torch.Tensor)]
                if outs and outs[0].requires_grad:
                    torch.autograd.backward(outs[0].float().sum())

    for op in sorted(backend.ops):
        run_smoke(op)
    monkeypatch.setattr(hardware, "GROUP_NORM_CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "GROUP_NORM_SPLIT_PROGRAMS_PER_SM", 1000)
    run_smoke("group_norm")
    return list(seen.values())


def test_every_launched_kernel_compiles_for_sm90(monkeypatch):
    specs = _record_launches(monkeypatch)
    missing = _package_kernels() - {(s["module"], s["name"]) for s in specs}
    assert not missing, f"kernels no recorded launch reached (add a launch that does): {sorted(missing)}"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the compiler, not the interpreter
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE],
        input=json.dumps(specs),
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout.splitlines()[-1])
    assert failed == [], json.dumps(failed, indent=1)[:6000]
