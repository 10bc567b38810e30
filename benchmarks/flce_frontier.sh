#!/usr/bin/env bash
# Issue 38: the fused linear cross-entropy's time/memory frontier on an NVIDIA GPU host, from the
# source trees (no install, no index needed). At the five training shapes (tokens x hidden x
# vocab: 16384x2048x128256, 16384x4096x128256, 16384x1152x262144, 16384x2048x151936,
# 8192x4096x128256), bf16, the full step (forward + backward) in one process: this project at
# memory budgets of 128, 256, 512 and 1024 MiB (with the chunk row counts its GEMMs ran at), torch
# eager, torch.compile, liger-kernel 0.8.5 and cut-cross-entropy 25.1.1 (from .whl/ when they do
# not import), and the bare GEMMs. Writes frontier-fused_linear_cross_entropy.json (and one PNG per
# shape when matplotlib imports) to benchmarks/results/<GPU>/flce-frontier/.
#
#   bash benchmarks/flce_frontier.sh [more liger bench options, e.g. --budgets 256,512,768,1024]
#
# About 3 minutes on an H200, each shape in a process of its own (--isolate: in one process the CUDA-graph
# pools of one shape's peers stayed reserved and torch.compile at Gemma-3's shape ran out of memory). Without
# matplotlib on the host, draw the plots elsewhere from the committed JSON:
#   liger bench --frontier --replot benchmarks/results/H200/flce-frontier
# End to end at one budget: LIGER_FLCE_MEMORY_BUDGET=512MiB bash benchmarks/run_e2e_gpu.sh bench
# (or bench_e2e.py --memory-budget 512MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${BENCH_SITE:-/tmp/site}
PEERS=$(ls .whl/liger_kernel-0.8.5-*.whl .whl/peers/liger_kernel-0.8.5-*.whl .whl/cut_cross_entropy-25.1.1-*.whl .whl/peers/cut_cross_entropy-25.1.1-*.whl 2>/dev/null) || true
if [ -n "$PEERS" ] && ! PYTHONPATH=$SITE $PY -c "import liger_kernel, cut_cross_entropy" 2>/dev/null; then
    # shellcheck disable=SC2086
    $PY -m pip install -q --no-deps --no-index --target "$SITE" $PEERS
fi
export PYTHONPATH="packages/liger-core/src:packages/liger-ops-cuda/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
# The source tree's backend has no entry point: this is the one way to load it.
export LIGER_EXTRA_BACKENDS=liger_ops_cuda
# The budgets below are what is measured: none may come from the environment.
unset LIGER_FLCE_MEMORY_BUDGET
GPU=$($PY -c "import torch; n = torch.cuda.get_device_name(); print(next((g for g in ('H200', 'H100', 'B200', 'A100', 'L40S') if g in n), n.replace(' ', '_')))")
OUT=${BENCH_OUT:-benchmarks/results/$GPU/flce-frontier}
exec $PY -m liger_core bench --frontier --ops fused_linear_cross_entropy --shapes flce-training \
    --budgets 128,256,512,1024 --dtype bfloat16 --no-progress --isolate --out "$OUT" "$@"
