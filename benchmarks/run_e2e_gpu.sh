#!/usr/bin/env bash
# The transformers integration's GPU work, on an NVIDIA host without a package index, from the
# source trees. Needs .whl/hf from benchmarks/fetch_wheels.sh (run where there is an index).
#
#   bash benchmarks/run_e2e_gpu.sh setup   # transformers + liger-kernel into /tmp/e2e-site, over the host's torch/triton
#   bash benchmarks/run_e2e_gpu.sh tests   # the transformers tests on the GPU: tiny and mid-size convergence
#   bash benchmarks/run_e2e_gpu.sh mid [OUT] [-k EXPR]  # the mid-size tests, 4 processes on one GPU: 90 convergence
#                                          # (-k convergence), 90 compiled training against stock (-k compiled_training);
#                                          # per shard a log and the gaps (JSON lines) in OUT (default /tmp/mid)
#   bash benchmarks/run_e2e_gpu.sh bench   # bench_e2e.py: LLaMA-3.2-1B, Qwen3-1.7B, Gemma-3-1B shapes, batch 8 x 2048,
#                                          # stock vs liger-kernel 0.8.5 vs this project, kernel-category profiles
#   bash benchmarks/run_e2e_gpu.sh demo    # the main job on the GPU
#
# Each step stays within about 10 minutes on an H100/H200; results go to benchmarks/results/<GPU>/<topic>/.
set -euo pipefail
cd "$(dirname "$0")/.."
# pip --target, not a venv: a --system-site-packages venv on those hosts does not see the
# system torch (it lives outside the base interpreter's site-packages).
SITE=${LIGER_E2E_SITE:-/tmp/e2e-site}
PY=${PYTHON:-python3}
export PYTHONPATH="packages/liger-core/src:packages/liger-ops-cuda/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
# liger-ops-cuda from its source tree has no entry point: load it as if installed, in this
# process and in the demo's and the benchmark's child processes.
export LIGER_EXTRA_BACKENDS=liger_ops_cuda
gpu() { $PY -c "import torch; n = torch.cuda.get_device_name(); print(next((g for g in ('H200', 'H100', 'B200', 'A100') if g in n), n.replace(' ', '_')))"; }
case "${1:-}" in
    setup)
        $PY -m pip install -q --no-index --find-links .whl/hf --target "$SITE" transformers==5.23.0
        $PY -m pip install -q --no-index --no-deps --target "$SITE" .whl/hf/liger_kernel-0.8.5-py3-none-any.whl
        $PY -c "import pytest" 2>/dev/null || $PY -m pip install -q --no-index --find-links .whl/hf --target "$SITE" pytest
        $PY -c "import torch, triton, transformers, liger_kernel; print(torch.__version__, triton.__version__, transformers.__version__, torch.cuda.get_device_name())"
        ;;
    tests)
        shift
        $PY -m pytest -q -rs -p no:cacheprovider --durations=15 packages/liger-core/tests/hf "$@"
        ;;
    mid)
        shift
        out=${1:-/tmp/mid}
        shift || true
        mkdir -p "$out"
        # The tests are small for the GPU: four processes side by side take about a third of one's time.
        $PY -m pytest -q -p no:cacheprovider --collect-only -m mid packages/liger-core/tests/hf "$@" \
            | grep '::' | sed 's|^tests/|packages/liger-core/tests/|' >"$out/ids.txt"
        pids=()
        for i in 0 1 2 3; do
            awk -v i="$i" 'NR % 4 == i' "$out/ids.txt" >"$out/shard-$i.txt"
            [ -s "$out/shard-$i.txt" ] || continue
            LIGER_CONVERGENCE_LOG="$out/gaps-$i.jsonl" $PY -m pytest -q -p no:cacheprovider -m mid --tb=line -rf \
                $(cat "$out/shard-$i.txt") >"$out/shard-$i.log" 2>&1 &
            pids+=($!)
        done
        status=0
        for p in "${pids[@]}"; do wait "$p" || status=1; done
        tail -n 3 "$out"/shard-*.log
        exit $status
        ;;
    bench)
        shift
        mkdir -p "benchmarks/results/$(gpu)/e2e"
        $PY benchmarks/bench_e2e.py --out "benchmarks/results/$(gpu)/e2e/e2e_$(gpu).json" "$@"
        ;;
    demo)
        shift
        mkdir -p "benchmarks/results/$(gpu)/demo"
        $PY -m liger_core.demo --json "benchmarks/results/$(gpu)/demo/demo_$(gpu).json" "$@"
        ;;
    *)
        echo "usage: $0 setup|tests|bench|demo [options]" >&2
        exit 2
        ;;
esac
