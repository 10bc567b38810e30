"""The compiled path without a GPU: build mhc_coeffs' projection kernels (the forward and the
fused backward) for an H100/H200 (sm_90) down to a cubin, at the bench's shape (4 streams of 4096
channels: K = 16384, M = 24) with bf16 streams, each dot precision the launch can pick.

The interpreter never sees what only the Triton compiler checks (tl.dot's operand shapes, dtypes
and input precisions, loop-carried types); a subprocess without TRITON_INTERPRET compiles each
variant and reports registers and stack (spill) bytes; skipped where this Triton cannot compile
for CUDA.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SKIP = 77

_SCRIPT = r"""
import json, os, re, subprocess, sys, tempfile
try:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from liger_ops_cuda import hardware, mhc
except Exception as e:
    print(json.dumps({"skip": f"cannot import the compiler: {e!r}"})); sys.exit(SKIP)
from triton.backends import backends
if "nvidia" not in backends:
    print(json.dumps({"skip": "this Triton has no NVIDIA backend"})); sys.exit(SKIP)
target = GPUTarget("cuda", 90, 32)
cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def variant(name, kernel, types, consts, num_warps):
    sig = {a: ("constexpr" if a in consts else types.get(a, "i32")) for a in kernel.arg_names}
    src = ASTSource(fn=kernel, signature=sig, constexprs={(kernel.arg_names.index(a),): v for a, v in consts.items()})
    row = {"name": name, "warps": num_warps}
    try:
        compiled = triton.compile(src, target=target, options={"num_warps": num_warps})
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"
        return row
    if os.path.exists(cuobjdump):
        with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
            f.write(compiled.asm["cubin"])
        usage = subprocess.run([cuobjdump, "-res-usage", f.name], capture_output=True, text=True).stdout
        m = re.search(r"REG:(\d+) STACK:(\d+)", usage)
        if m:
            row["regs"], row["stack"] = int(m.group(1)), int(m.group(2))
    return row


rows = []
block_m = mhc._dot_block(24, 48)
for phi_dtype, precision in (("bf16", "tf32"), ("fp32", "ieee")):
    types = {"X": "*bf16", "PHI": "*" + phi_dtype, "MIX_PARTIAL": "*fp32", "SQUARE_PARTIAL": "*fp32"}
    consts = {"PRECISION": precision, "BLOCK_T": hardware.MHC_PROJ_BLOCK_T, "BLOCK_K": hardware.MHC_PROJ_BLOCK_K,
              "BLOCK_M": block_m}
    rows.append(variant(f"mhc projection fwd phi={phi_dtype} {precision}", mhc._mhc_projection_forward_kernel,
                        types, consts, hardware.MHC_PROJ_NUM_WARPS))
types = {"X": "*bf16", "PHI": "*bf16", "D_PROJ": "*fp32", "COEF": "*fp32", "D_X": "*bf16", "D_PHI_PARTIAL": "*fp32"}
for precision in ("tf32", "ieee"):
    consts = {"PRECISION": precision, "BLOCK_T": hardware.MHC_PROJ_BACKWARD_BLOCK_T,
              "BLOCK_K": hardware.MHC_PROJ_BACKWARD_BLOCK_K, "BLOCK_M": block_m}
    rows.append(variant(f"mhc projection bwd {precision}", mhc._mhc_projection_backward_kernel, types, consts,
                        hardware.MHC_PROJ_BACKWARD_NUM_WARPS))
print(json.dumps({"rows": rows}))
"""


def test_mhc_projection_kernels_compile_for_sm90():
    root = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(root / "packages" / "liger-core" / "src"), str(root / "packages" / "liger-ops-cuda" / "src")]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == SKIP:
        pytest.skip(json.loads(lines[-1])["skip"] if lines else proc.stderr[-500:])
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    rows = json.loads(lines[-1])["rows"]
    failed = [f"{r['name']}: {r['error']}" for r in rows if "error" in r]
    assert not failed, "\n".join(failed)
    assert len(rows) == 4
    for r in rows:
        print(f"{r['name']:40s} warps={r['warps']:2d} regs={r.get('regs', '?')} stack={r.get('stack', '?')}")
    # hardware.py's tiles are sized so that no variant spills (stack known only with cuobjdump).
    spilled = [r["name"] for r in rows if r.get("stack", 0) > 0]
    assert not spilled, spilled
