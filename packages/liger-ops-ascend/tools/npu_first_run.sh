#!/usr/bin/env bash
# What an Ascend NPU runner runs first, as one command: every kernel of liger-ops-ascend compiled
# natively at its planned sizes, the compiler's UB figure beside the UB model's (the run fails if
# the model undercounts), and msprof of each kernel family. Reports: $LIGER_NPU_REPORT_DIR
# (default ./npu-first-run): ub.json, msprof/<family>/. Without an NPU every test skips.
#
#   bash packages/liger-ops-ascend/tools/npu_first_run.sh [pytest options]
set -euo pipefail
pkg="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$pkg/../.." && pwd)"
export LIGER_NPU_REPORT_DIR="${LIGER_NPU_REPORT_DIR:-$PWD/npu-first-run}"
export PYTHONPATH="$root/packages/liger-core/src:$pkg/src${PYTHONPATH:+:$PYTHONPATH}"
exec python -m pytest -m npu -rs -q "$pkg/tests/test_npu_first_run.py" "$@"
