"""Every op of the backend launches its kernels through the launch guard, and through
nothing else: each op's `liger check` smoke case runs with `launch.check` recording."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.smoke import SMOKE
from liger_core.device import npu_available

from liger_ops_ascend import BACKEND, launch

DEVICE = "npu" if npu_available() else "cpu"


@pytest.mark.parametrize("op", sorted(BACKEND.ops))
def test_op_launches_through_the_guard(monkeypatch, op):
    seen = []
    real_check = launch.check
    monkeypatch.setattr(launch, "check", lambda plan, hw: (seen.append(plan.kernel), real_check(plan, hw)))
    smoke = SMOKE[op]
    smoke.run(BACKEND, DEVICE, torch.float32, smoke.shapes[0])
    assert seen, f"{op} launched no kernel through liger_ops_ascend.launch"
    # Kernel names say which op they belong to (guard errors name them).
    prefix = {"kl_div": "kl_div", "jsd": "jsd", "tvd": "tvd", "fused_linear_cross_entropy": "cross_entropy",
              "fused_linear_jsd": "jsd", "swiglu": "swiglu", "geglu": "geglu"}.get(op, op)  # fmt: skip
    assert all(name.startswith(prefix) for name in seen), (op, seen)
