"""`vocab_parallel_cross_entropy` on two ranks, this package's kernels on each: two CPU processes
over gloo in the Triton interpreter without the device, one device per rank with it. Loss and shard
gradients equal the one-process full-vocabulary reference; the one-process cases run in the
conformance suite."""

import pytest
from liger_core.conformance.distributed import check_vocab_parallel, devices_for


def test_two_ranks_equal_one_process(conformance_backend, conformance_device):
    if devices_for(conformance_device) < 2:
        pytest.skip(f"two ranks need two {conformance_device} devices (the CPU run covers the kernels)")
    check_vocab_parallel(conformance_backend.name, conformance_device)
