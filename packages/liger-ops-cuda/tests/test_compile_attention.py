"""The compiled path without a GPU: build fused_neighborhood_attention's banded kernels (forward,
the dQ and the dK/dV backward) for an H100/H200 (sm_90) down to a cubin, at the plans the package
picks for head_dim 64 (bf16 and fp32) and 256 (bf16).

The interpreter never sees what only the Triton compiler checks (loop-carried types, tl.dot's
operand shapes and dtypes); a subprocess without TRITON_INTERPRET compiles each variant and
reports registers and stack (spill) bytes; skipped where this Triton cannot compile for CUDA.
"""

from __future__ import annotations

from compile_sm90 import print_rows, run_variants

_SCRIPT = r"""
from compile_sm90 import report, require_nvidia_backend, skip, variant
try:
    import torch
    from liger_ops_cuda import fused_neighborhood_attention as nat
except Exception as e:
    skip(f"cannot import the compiler: {e!r}")
require_nvidia_backend()

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
    kernels = (
        ("fwd", nat._fused_neighborhood_attention_forward_kernel),
        ("bwd dq", nat._fused_neighborhood_attention_backward_dq_kernel),
        ("bwd dkdv", nat._fused_neighborhood_attention_backward_dkdv_kernel),
    )
    for what, kernel in kernels:
        rows.append(variant(f"nat {what} {tag}", kernel, T, consts, **options))
report(rows)
"""


def test_neighborhood_attention_kernels_compile_for_sm90():
    print_rows(run_variants(_SCRIPT), 32)
