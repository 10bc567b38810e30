#!/usr/bin/env bash
# `liger bench` on an NVIDIA GPU host, from the source trees (no install, no index needed):
# every catalogue op at LLaMA-3-8B shapes (tokens 4096, bf16) against torch eager, torch.compile,
# liger-kernel 0.8.5 and cut-cross-entropy 25.1.1, CUDA-graph timing. Results go to
# benchmarks/results/<GPU>/ops/ (<op>.json, <op>.csv, summary.md; <op>.png when matplotlib is there).
#
#   bash benchmarks/run_gpu.sh [norms|activations|losses|all] [more liger bench options]
#
# Each group takes a few minutes (torch.compile compiles each op once); groups add up in one
# folder. Peers: liger-kernel 0.8.5 and cut-cross-entropy 25.1.1 wheels in .whl/ are installed with
# `pip install --no-deps --target` into $BENCH_SITE (default /tmp/site) when they do not import. Without matplotlib on the
# host, draw the plots and the README table elsewhere from the committed JSON:
#   liger bench --replot benchmarks/results/<GPU>/ops --readme README.md
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
GROUP=${1:-all}
shift || true
SITE=${BENCH_SITE:-/tmp/site}
# Only the two peers (.whl/ may hold other wheels, e.g. transformers' for bench_e2e.py).
PEERS=$(compgen -G ".whl/liger_kernel-0.8.5-*.whl"; compgen -G ".whl/cut_cross_entropy-25.1.1-*.whl") || true
if [ -n "$PEERS" ] && ! PYTHONPATH=$SITE $PY -c "import liger_kernel, cut_cross_entropy" 2>/dev/null; then
    # shellcheck disable=SC2086
    $PY -m pip install -q --no-deps --no-index --target "$SITE" $PEERS
fi
export PYTHONPATH="packages/liger-core/src:packages/liger-ops-cuda/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
# The source tree's backend has no entry point: this is the one way to load it.
export LIGER_EXTRA_BACKENDS=liger_ops_cuda
if [ -z "${BENCH_OUT:-}" ]; then
    GPU=$($PY -c "import torch; n = torch.cuda.get_device_name(); print(next((g for g in ('H200', 'H100', 'B200', 'A100', 'L40S') if g in n), n.replace(' ', '_')))")
fi
OUT=${BENCH_OUT:-benchmarks/results/$GPU/ops}
case "$GROUP" in
    norms | activations | losses) OPS=(--ops "$GROUP") ;;
    all) OPS=() ;;
    *) echo "usage: $0 [norms|activations|losses|all] [liger bench options]" >&2; exit 2 ;;
esac
$PY -m liger_core info
exec $PY -m liger_core bench --config llama-3-8b --dtype bfloat16 ${OPS[@]+"${OPS[@]}"} --out "$OUT" "$@"
