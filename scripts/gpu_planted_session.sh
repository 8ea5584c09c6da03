#!/usr/bin/env bash
# Planted and real regressions of the Qwen-7B shape explained by `bench compare --profile`, on the GPU machine:
# scripts/planted_regressions.py (product commands only: bench run, bench compare --profile) for the parts named,
# within one device call's budget. A side script: it installs the carried wheels and calls that script.
#
# Usage (repo root, on the GPU machine; the device tool's $OUT comes back):
#   PARTS="1" bash scripts/gpu_planted_session.sh         # then PARTS="2", "3", "4": each under 10 minutes
# WORK (/tmp/planted-work) keeps the stores and profiles between calls on a machine that stays warm: a baseline
# measured and profiled once is reused by the next part. Carry .whl/ (plotly, narwhals, torchao for the dashboards).
# $OUT gets: session.log, summary.md, and planted.tgz (out/: each change's compare.md/.json, planted.log, summary.md;
# the stores, profile records and kernel tables, the matrix files).
set -uo pipefail
LOG_NAME=session.log
source "$(dirname "$0")/gpu_session_common.sh"
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, \
torch.cuda.get_device_name(0))" || exit 2
export WORK=${WORK:-/tmp/planted-work} PYTHONUNBUFFERED=1
export OUT_DIR="$WORK/out"
mkdir -p "$OUT_DIR"
BUDGET_S=${BUDGET_S:-575}
rc=0
for part in ${PARTS:-1}; do
  left=$((BUDGET_S - ($(date +%s) - T0) - 20))
  if [ "$left" -lt 60 ]; then stamp "no time left for PART=$part"; rc=124; break; fi
  stamp "PART=$part (limit $left s)"
  OUT="$OUT_DIR" PART=$part timeout "$left" $PY -m scripts.planted_regressions
  r=$?; stamp "PART=$part exited $r"; [ $r -ne 0 ] && rc=$r
done
# One archive: the device tool brings back only a few files a call.
cp "$OUT_DIR"/summary.md "$OUT/" 2>/dev/null
(cd "$WORK" && tar czf "$OUT/planted.tgz" out results/*.jsonl profiles/*.jsonl profiles/*/*/kernel_table.* \
  profiles/*/*/session.* ./*.toml 2>/dev/null)
stamp "done"
exit $rc
