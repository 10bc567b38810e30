"""Every kernel compiled as far as a CPU can take it: triton-ascend's own frontend turns each
kernel specialization the ops launch into TTIR, and the wheel's triton-adapter-opt runs the
passes an NPU compile starts with (DiscreteMaskAccessConversion, TritonToAnnotation,
TritonToUnstructure). No NPU or CANN is needed.

What it shows that the interpreter cannot: that these passes accept every kernel (a crash there
is a compile failure on the NPU: this test found two, a care_padding=False gather and M-RoPE's
lower-bounded masks), and that TritonToUnstructure scalarises no load or store
(``DiscreteMemAccess``) except the deliberate gathers of cross-entropy's targets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from liger_core.interface import CATALOGUE
from perf_rules import SRC, collect, package_paths

# Kernels whose scalarised accesses are by design: one target logit, class weight and gradient
# element per row, gathered or scattered by the target index (fused_ce_tvd's and the scaled fused
# linear cross-entropy's forwards read their rows' target logits the same way).
GATHERS = {
    "_cross_entropy_forward_kernel",
    "_cross_entropy_backward_kernel",
    "_fused_ce_tvd_forward_kernel",
    "_fused_linear_scaled_cross_entropy_forward_kernel",
}
# Ops whose kernels have no chunked variant for the small-UB pass to reach, and whose smallest
# tiles an 8 KiB UB cannot hold (fused_moe's GEMMs, and fused_moe_clamped_swiglu's on them,
# fused_neighborhood_attention's banded products: their tile shrinks to tl.dot's 16, their code
# does not).
NO_SMALL_UB = {"fused_moe", "fused_moe_clamped_swiglu", "fused_neighborhood_attention"}

_COMPILE = r"""
import json, os, subprocess, sys, tempfile, importlib
from concurrent.futures import ThreadPoolExecutor
import triton
from triton.compiler.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from triton.backends.ascend.compiler import AscendBackend, make_ttir
from triton._C.libtriton import ir

opt = os.path.join(os.path.dirname(triton.__file__), "backends", "ascend", "triton-adapter-opt")
backend = AscendBackend(GPUTarget("npu", "Ascend910B2", 0))
options = backend.parse_options({})
passes = [
    "--discrete-mask-access-conversion=compile-on-910-95=False force-simt-template=False",
    "--triton-to-annotation",
    "--triton-to-unstructure=compile-on-910-95=False force-simt-template=False",
]
texts = []
for spec in json.load(sys.stdin):
    kernel = getattr(importlib.import_module(spec["module"]), spec["name"])
    sig = {a: "constexpr" if a in spec["consts"] else spec["sig"][a] for a in kernel.arg_names}
    ctx = ir.context()
    ir.load_dialects(ctx)
    mod = ASTSource(kernel, sig, spec["consts"]).make_ir(
        options, backend.get_codegen_implementation(), backend.get_module_map(), ctx)
    texts.append((spec, str(make_ttir(mod, {"hash": spec["name"]}, options))))

def adapt(item):
    spec, text = item
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "k.ttir"), os.path.join(tmp, "k.mlir")
        open(src, "w").write(text)
        done = subprocess.run([opt, src, *passes, "-o", dst], capture_output=True, text=True)
        out = open(dst).read() if done.returncode == 0 else ""
    err = [l for l in done.stderr.splitlines() if l.strip() and not l.startswith(("#", " "))][:3]
    return {"name": spec["name"], "consts": spec["consts"], "rc": done.returncode,
            "discrete": out.count("DiscreteMemAccess"), "stderr": err}

with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
    print(json.dumps(list(pool.map(adapt, texts))))
"""


def _adapter() -> Path | None:
    import triton

    path = Path(triton.__file__).parent / "backends" / "ascend" / "triton-adapter-opt"
    return path if path.exists() else None


def _type(value) -> str | None:
    if isinstance(value, torch.Tensor):
        names = {
            torch.float32: "fp32",
            torch.bfloat16: "bf16",
            torch.float16: "fp16",
            torch.int32: "i32",
            torch.int8: "i8",
        }
        return "*" + names.get(value.dtype, "i64")
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return None


def _record_specializations(monkeypatch) -> list[dict]:
    """The (kernel, argument types, constexprs) of every launch the ops make on their smoke
    samples (bf16 and fp32; a small UB for the chunked kernels), without running a kernel."""
    from liger_core import registry

    import liger_ops_ascend
    from liger_ops_ascend import hardware, launch

    seen: dict[tuple, dict] = {}

    def record(kernel, plan, hw, *args, **kwargs):
        fn = getattr(kernel, "fn", kernel)
        params = fn.__code__.co_varnames[: fn.__code__.co_argcount]
        # Constexprs by their annotation: a runtime scalar may be passed by keyword too
        # (fused_moe's `epilogue_args`), and compiles as an argument, not a constant.
        constexprs = {p for p in params if "constexpr" in str(fn.__annotations__.get(p, ""))}
        named = {**dict(zip(params, args)), **kwargs}
        sig = {p: _type(a) for p, a in named.items() if p not in constexprs}
        consts = {k: v for k, v in named.items() if k in constexprs}
        flags = tuple(sorted((k, v) for k, v in consts.items() if not k.startswith("BLOCK")))
        key = (fn.__module__, fn.__name__, flags, tuple(sorted(sig.items())))
        seen.setdefault(key, {"module": fn.__module__, "name": fn.__name__, "sig": sig, "consts": consts})

    real = launch.launch  # every module that imported it calls `record` instead
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name.startswith(liger_ops_ascend.__name__) and getattr(module, "launch", None) is real:
            monkeypatch.setattr(module, "launch", record)

    backend = registry.get_backend("ascend")
    from liger_core.ops import group_norm as group_norm_op

    def run(op, args):
        args = {
            k: v.detach().requires_grad_() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in CATALOGUE[op].bind(args).items()
        }
        # The outputs are whatever torch.empty held (no kernel runs): only the launches matter.
        out = backend.op(op)(*args.values())
        first = out[0] if isinstance(out, tuple) else out
        if first.requires_grad:
            first.float().sum().backward()

    for small_ub in (False, True):
        if small_ub:
            monkeypatch.setenv("LIGER_ASCEND_UB_BYTES", str(8 * 1024))
            monkeypatch.setattr(hardware, "MAX_BLOCK_M", 8)
        for op in sorted(backend.ops):
            if small_ub and op in NO_SMALL_UB:
                continue
            for sample in CATALOGUE[op].smoke:
                for dtype in (torch.bfloat16, torch.float32):
                    run(op, sample.with_params(dtype=dtype).args("cpu"))
        # Group norm without a spatial axis, 32-byte rows: the group-rows kernels.
        run("group_norm", group_norm_op.args("cpu", shape=(5, 48), groups=6, dtype=torch.float32))
    return list(seen.values())


@pytest.mark.skipif(_adapter() is None, reason="triton-ascend's triton-adapter-opt is not installed")
def test_every_kernel_passes_the_adapter_without_scalarised_access(monkeypatch):
    specs = _record_specializations(monkeypatch)
    kernels = {name for name in collect(package_paths(), SRC.parents[1]) if name.endswith("_kernel")}
    assert {s["name"] for s in specs} == kernels, kernels - {s["name"] for s in specs}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # jit, not the interpreter
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE],
        input=json.dumps(specs),
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    assert len(results) == len(specs)
    crashed = [r for r in results if r["rc"] != 0]
    assert not crashed, crashed
    scalarised = [r for r in results if r["discrete"] and r["name"] not in GATHERS]
    assert not scalarised, scalarised
