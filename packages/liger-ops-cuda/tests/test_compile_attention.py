"""The compiled path without a GPU: build fused_neighborhood_attention's banded kernels (forward,
the dQ and the dK/dV backward) for an H100/H200 (sm_90) down to a cubin, at the plans the package
picks for head_dim 64 (bf16 and fp32) and 256 (bf16).

The interpreter never sees what only the Triton compiler checks (loop-carried types, tl.dot's
operand shapes and dtypes); a subprocess without TRITON_INTERPRET compiles each variant and
reports registers and stack (spill) bytes; skipped where this Triton cannot compile for CUDA.
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
    import torch
    from liger_ops_cuda import fused_neighborhood_attention as nat
except Exception as e:
    print(json.dumps({"skip": f"cannot import the compiler: {e!r}"})); sys.exit(SKIP)
from triton.backends import backends
if "nvidia" not in backends:
    print(json.dumps({"skip": "this Triton has no NVIDIA backend"})); sys.exit(SKIP)
target = GPUTarget("cuda", 90, 32)
cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def variant(name, kernel, types, consts, options):
    sig = {a: ("constexpr" if a in consts else types.get(a, "i32")) for a in kernel.arg_names}
    src = ASTSource(fn=kernel, signature=sig, constexprs={(kernel.arg_names.index(a),): v for a, v in consts.items()})
    row = {"name": name, "warps": options["num_warps"]}
    try:
        compiled = triton.compile(src, target=target, options=options)
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


P = lambda t: "*" + t
rows = []
# Each variant takes about half a minute to build on a CI CPU: the bench's head_dim in both dtypes
# and a wide head in bf16.
for dtype, dt, head_dim in ((torch.bfloat16, "bf16", 64), (torch.float32, "fp32", 64), (torch.bfloat16, "bf16", 256)):
    plan = nat.plan_fused_neighborhood_attention(4096, head_dim, dtype)
    consts = {k: v for k, v in plan.kernel().items() if k.isupper()}
    options = {k: v for k, v in plan.kernel().items() if not k.isupper()}
    tag = f"{dt} d={head_dim}"
    tensors = ("Q", "K", "V", "OUT", "DO", "DQ", "DK", "DV", "Q_LIKE")
    T = {name: P(dt) for name in tensors}
    T.update(LSE=P("fp32"), DELTA=P("fp32"), scale="fp32")
    rows.append(variant(f"nat fwd {tag}", nat._fused_neighborhood_attention_forward_kernel, T, consts, options))
    rows.append(variant(f"nat bwd dq {tag}", nat._fused_neighborhood_attention_backward_dq_kernel, T, consts, options))
    rows.append(
        variant(f"nat bwd dkdv {tag}", nat._fused_neighborhood_attention_backward_dkdv_kernel, T, consts, options)
    )
print(json.dumps({"rows": rows}))
"""


def test_neighborhood_attention_kernels_compile_for_sm90():
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
    for r in rows:
        print(f"{r['name']:32s} warps={r['warps']:2d} regs={r.get('regs', '?')} stack={r.get('stack', '?')}")
