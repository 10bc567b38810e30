"""What the MoE block benchmarks (bench_llama4_moe.py, bench_gpt_oss_moe.py) time with: one training
step of a module on one NVIDIA GPU, cuda events and peak memory."""

import torch


def measure(step, params, n=10):
    """(p50 ms, peak MB above the memory allocated before the step) of ``step()``; gradients are
    dropped before each step, as ``zero_grad(set_to_none=True)`` does."""

    def run():
        for p in params:
            p.grad = None
        step()

    for _ in range(2):
        run()
    for p in params:
        p.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(n):
        for p in params:
            p.grad = None
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[n // 2], peak
