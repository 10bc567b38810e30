"""The compiled path without a GPU: build mhc_coeffs' projection kernels (the forward and the
fused backward) for an H100/H200 (sm_90) down to a cubin, at the bench's shape (4 streams of 4096
channels: K = 16384, M = 24) with bf16 streams, each dot precision the launch can pick.

The interpreter never sees what only the Triton compiler checks (tl.dot's operand shapes, dtypes
and input precisions, loop-carried types); a subprocess without TRITON_INTERPRET compiles each
variant and reports registers and stack (spill) bytes; skipped where this Triton cannot compile
for CUDA.
"""

from __future__ import annotations

from compile_sm90 import print_rows, run_variants

_SCRIPT = r"""
from compile_sm90 import report, require_nvidia_backend, skip, variant
try:
    from liger_ops_cuda import hardware, mhc
except Exception as e:
    skip(f"cannot import the compiler: {e!r}")
require_nvidia_backend()

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
report(rows)
"""


def test_mhc_projection_kernels_compile_for_sm90():
    rows = run_variants(_SCRIPT)
    assert len(rows) == 4
    print_rows(rows, 40)
    # hardware.py's tiles are sized so that no variant spills (stack known only with cuobjdump).
    spilled = [r["name"] for r in rows if r.get("stack", 0) > 0]
    assert not spilled, spilled
