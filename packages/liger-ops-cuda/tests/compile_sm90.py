"""What the compile tests share (test_compile_norms.py, test_compile_attention.py, test_compile_mhc.py,
and compile_loss_kernels.py behind test_compile_losses.py): building kernels for an H100/H200
(sm_90) down to a cubin without a GPU.

Triton's NVIDIA backend and its bundled ptxas need no device, so the real compiler (not the
interpreter) checks each kernel variant here. A test hands its script to `run_variants`, which
runs it in a subprocess with TRITON_INTERPRET unset. The script imports this module as well:
`require_nvidia_backend` first, then `variant` for each kernel variant, then `report` with the
rows. Where this Triton cannot compile for CUDA, the script exits with `SKIP` and a JSON line
``{"skip": why}``, and the test is skipped.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

SKIP = 77
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parents[2]


# In the test process.


def compile_env(**defaults: str) -> dict[str, str]:
    """This process's environment without TRITON_INTERPRET, with the source trees and this folder
    ahead of PYTHONPATH. ``defaults`` are set where the environment does not set them already."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    sources = [ROOT / "packages" / "liger-core" / "src", ROOT / "packages" / "liger-ops-cuda" / "src", TESTS]
    env["PYTHONPATH"] = os.pathsep.join(
        [str(p) for p in sources] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    for name, value in defaults.items():
        env.setdefault(name, value)
    return env


def run_variants(script: str, **env_defaults: str) -> list[dict]:
    """Run ``script`` (Python source) with the compiler on and return the rows it reported. Skips
    the calling test where the script exits `SKIP`. Fails if the script crashes or a variant did not
    build."""
    import pytest  # the compiling subprocess imports this module too, and needs no pytest

    env = compile_env(**env_defaults)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == SKIP:
        pytest.skip(skip_reason(proc))
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    rows = json.loads(lines[-1])["rows"]
    failed = [f"{r['name']}: {r['error']}" for r in rows if "error" in r]
    assert not failed, "\n".join(failed)
    return rows


def skip_reason(proc: subprocess.CompletedProcess) -> str:
    """Why a compiling subprocess that exited with `SKIP` could not compile: its JSON ``skip`` line,
    else the end of its stderr."""
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"skip"')]
    return json.loads(lines[-1])["skip"] if lines else proc.stderr.strip()[-500:]


def print_rows(rows: list[dict], width: int) -> None:
    """What ptxas made of each variant (stack bytes are register spills; '?' without cuobjdump)."""
    for r in rows:
        print(f"{r['name']:{width}s} warps={r['warps']:2d} regs={r.get('regs', '?')} stack={r.get('stack', '?')}")


# In the compiling subprocess.


def skip(reason: str) -> NoReturn:
    """Report why nothing can be compiled here, and exit with `SKIP`."""
    print(json.dumps({"skip": reason}))
    sys.exit(SKIP)


@functools.cache
def sm90_compiler():
    """``(triton, ASTSource, target)`` for sm_90. Exits with `SKIP` where Triton cannot be
    imported."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except Exception as e:  # noqa: BLE001 - any import failure means: cannot compile here
        skip(f"cannot import the compiler: {e!r}")
    return triton, ASTSource, GPUTarget("cuda", 90, 32)


def require_nvidia_backend() -> None:
    """Exit with `SKIP` unless this Triton can compile for CUDA."""
    sm90_compiler()
    from triton.backends import backends

    if "nvidia" not in backends:
        skip("this Triton has no NVIDIA backend")


def variant(name: str, kernel, types: dict, consts: dict, num_warps: int, **options) -> dict:
    """Compile one variant of ``kernel``: ``consts`` are its constexprs, ``types`` the other
    arguments' types (``i32`` where not given). Returns a row: name, warps, and either ``error``
    or (with the wheel's cuobjdump) ``regs`` and ``stack``."""
    triton, ASTSource, target = sm90_compiler()
    sig = {a: ("constexpr" if a in consts else types.get(a, "i32")) for a in kernel.arg_names}
    src = ASTSource(fn=kernel, signature=sig, constexprs={(kernel.arg_names.index(a),): v for a, v in consts.items()})
    row = {"name": name, "warps": num_warps}
    try:
        compiled = triton.compile(src, target=target, options={"num_warps": num_warps, **options})
    except Exception as e:  # noqa: BLE001 - reported per variant
        row["error"] = f"{type(e).__name__}: {e}"
        return row
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if os.path.exists(cuobjdump):
        with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
            f.write(compiled.asm["cubin"])
        usage = subprocess.run([cuobjdump, "-res-usage", f.name], capture_output=True, text=True).stdout
        m = re.search(r"REG:(\d+) STACK:(\d+)", usage)
        if m:
            row["regs"], row["stack"] = int(m.group(1)), int(m.group(2))
    return row


def report(rows: list[dict]) -> None:
    """Hand the rows to `run_variants` (the last JSON line on stdout)."""
    print(json.dumps({"rows": rows}))
