"""fused_linear_grpo's own path: several chunks of whole sequences, the last one ragged."""

import pytest

from liger_core.conformance.check import check, make_args
from liger_core.ops.fused_linear_grpo import sequences_per_chunk
from liger_ops_cuda import hardware


@pytest.mark.parametrize(
    "options",
    [
        dict(loss_type="grpo", importance_sampling_level="sequence"),
        dict(loss_type="vespo", vllm="token", spread=0.05),
        dict(loss_type="dapo", bias=True, temperature=0.8, vllm="sequence"),
    ],
    ids=["grpo_sequence", "vespo", "dapo_bias"],
)
def test_several_chunks(backend, device, monkeypatch, options):
    elements = 2 * 11 * 70 + 5
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 4 * elements)  # fp32 logits
    assert sequences_per_chunk(7, 11, 70, elements) == 2  # 4 chunks, the last one sequence
    args = make_args("fused_linear_grpo", device, shape=(7, 11, 16, 70), seed=41, **options)
    check(backend, "fused_linear_grpo", args, grad_scalar=0.5)
