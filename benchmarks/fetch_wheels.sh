#!/usr/bin/env bash
# Download, on a machine with a package index, the wheels that benchmarks/bench_e2e.py needs on a
# GPU host without one (python 3.12, x86_64, torch and triton installed there):
#   transformers 5.23.0 with its dependencies (mostly pure python; binary: tokenizers, safetensors,
#   hf-xet, regex, pyyaml, pydantic-core, numpy), resolved and built for CPython 3.12 / manylinux
#   x86_64; liger-kernel 0.8.5 (the peer) without its dependencies (torch, triton: on the host).
# They go to .whl/hf/ (about 45 MB; .whl/ is git-ignored, carry .whl/hf with the tree). On the host:
#   python3 -m venv --system-site-packages /tmp/e2e          # keeps the host's torch, triton, numpy
#   /tmp/e2e/bin/pip install --no-index --find-links .whl/hf transformers==5.23.0
#   /tmp/e2e/bin/pip install --no-index --no-deps .whl/hf/liger_kernel-0.8.5-py3-none-any.whl
#   /tmp/e2e/bin/python benchmarks/bench_e2e.py --out benchmarks/results/H100/e2e/e2e_llama-3.2-1b_H100.json
#
#   bash benchmarks/fetch_wheels.sh [python-version, default 3.12]
set -euo pipefail
cd "$(dirname "$0")/.."
PYV=${1:-3.12}
TRANSFORMERS=${LIGER_E2E_TRANSFORMERS:-transformers==5.23.0}
DEST=.whl/hf
mkdir -p "$DEST"
PY=${PYTHON:-python3}
# --only-binary with an explicit interpreter and platform: pip resolves the dependency tree for
# the GPU host, not for this machine.
$PY -m pip download -q --dest "$DEST" --only-binary=:all: \
    --python-version "$PYV" --implementation cp --abi "cp${PYV/./}" --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any "$TRANSFORMERS"
$PY -m pip download -q --dest "$DEST" --no-deps --only-binary=:all: "liger-kernel==0.8.5"
echo "in $DEST ($(du -sh "$DEST" | cut -f1)):"
ls -1 "$DEST"
