#!/usr/bin/env bash
# GPU runbook of issue 31: one int8wo figure on two H200 machines from one engine artifact, and the
# tuning spread of cold builds beside it. Each mode is one device call (fresh machine, $OUT set);
# docs/guide/hf-backend.md ("Engines as artifacts") says what the artifacts are.
#
#   first   machine 1: `bench build` of the h200-best-bs1 preset's two cells (bf16, int8wo), each
#           cold, written as artifacts; both cells run from the artifacts in 2 fresh processes each;
#           `bench report`. Returns in $OUT: the artifacts (split into parts of 15 MiB where larger:
#           $OUT takes files of 16 MiB at most), m1.jsonl, m1-report.md, build.txt, session.log.
#   spread  any machine: K cold tuning builds of the int8wo cell (`--tuning-builds K`, K=${K:-3}),
#           1 process of 3 trials each; with several GPUs the builds run at once, one per GPU.
#           Returns spread.jsonl, spread-report.md, session.log.
#   second  machine 2: loads the carried artifacts, runs both cells in 2 fresh processes each,
#           `bench report`, and `bench compare` against machine 1's store. Returns m2.jsonl,
#           m2-report.md, compare.md, session.log.
#
# Carry between the calls (the device copies the lead's working tree; results/ is git-ignored):
#   after `first`: copy $OUT's *.tar (or *.tar.part-*) into results/h200-artifacts/art/ and
#   m1.jsonl into results/h200-artifacts/, then call `second` with
#   carry = ["results/h200-artifacts"] (plus ".whl" where torchao must be installed there).
# Each mode stops its steps (SIGINT: what finished is stored) so that it ends within
# BENCH_SESSION_BUDGET_S seconds (default 470, under the 8-minute goal).
# Estimates on an H200 (torch 2.11 cu130), from docs/measurements/README.md: a cold int8wo process took
# 155 s and 268 s to its first trial on two starts, bf16's cold one about 55 s; a warm int8wo
# process about 65 s with its trials, a warm bf16 one about 35 s. So: first 7-9 min (at the slow
# compile the budget cuts the last int8wo process), second 4-5 min, spread with K=2 on one GPU
# 6-9.5 min, with K=3 on one GPU 8.5-14 min (too long: use K=2, or a machine of several GPUs,
# where the builds run at once: 3-5 min).
set -uo pipefail
mode=${1:-}
case "$mode" in first|spread|second) ;; *) echo "usage: $0 first|spread|second (OUT must be set)" >&2; exit 2;; esac
: "${OUT:?set OUT to the folder whose files come back}"
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
CARRY=results/h200-artifacts
ART=$CARRY/art
budget_s=${BENCH_SESSION_BUDGET_S:-470}
# A dry run on a CPU: BENCH_MATRIX=a fake matrix TOML, TUNED=its --only for the spread (tests of this script).
if [ -n "${BENCH_MATRIX:-}" ]; then MATRIX=(--matrix "$BENCH_MATRIX"); else MATRIX=(--preset h200-best-bs1); fi
TUNED=${TUNED:-precision=int8wo}
# Stores and worker logs stay out of $OUT (it returns 8 files at most); the stores are copied there at the end.
WORK=/tmp/bench-session-$mode
mkdir -p "$WORK"
started=$(date +%s)
exec > >(tee -a "$OUT/session.log") 2>&1

left() { echo $(( budget_s - ($(date +%s) - started) )); }

built_cells() {  # --only value of the cells that have an artifact in $ART (a failed build leaves its cell out)
    $PY - "$ART" <<'EOF'
import glob, sys
from bench.backends.engine_artifact import read_manifest
precisions = sorted({read_manifest(p)["build_key"]["precision"] for p in glob.glob(sys.argv[1] + "/*.tar")})
print("precision=" + "|".join(precisions) if precisions else "")
EOF
}

step() {  # step NAME COMMAND...: run it within what is left of the budget; say how long it took
    local name=$1 t t0 rc; shift
    t=$(left)
    if (( t < 20 )); then echo "== $name: not run, $t s of the budget left"; return 124; fi
    echo "== $name (at most $t s, $(date -u +%H:%M:%S) UTC): $*"
    t0=$(date +%s)
    timeout --signal=INT --kill-after=30 "$t" "$@"
    rc=$?
    echo "== $name: exit $rc after $(( $(date +%s) - t0 )) s"
    return $rc
}

echo "issue 31, mode $mode, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo +dirty)"
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader || echo "no nvidia-smi"
$PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
if ! $PY -c "import torchao" 2>/dev/null; then  # int8wo needs it; docs/guide/hf-backend.md says how to carry the wheel
    ls .whl/torchao-*.whl >/dev/null 2>&1 && $PY -m pip install -q --no-deps --no-index .whl/torchao-*.whl
fi
$PY -c "import torchao; print('torchao', torchao.__version__)" || { echo "torchao is missing: carry .whl"; exit 2; }

case "$mode" in
first)
    mkdir -p "$ART"
    step build $PY -m bench build "${MATRIX[@]}" --artifacts "$ART" | tee "$OUT/build.txt"
    ls -l "$ART"/*.tar
    only=$(built_cells)
    [ -n "$only" ] || { echo "no artifact was built: see build.txt and $ART/logs"; exit 1; }
    step artifact-runs $PY -m bench run "${MATRIX[@]}" --only "$only" --engines "$ART" --runs 2 \
        --store "$WORK/m1.jsonl" --report-dir /tmp/m1-report --no-progress
    step report $PY -m bench report "$WORK/m1.jsonl" --out /tmp/m1-report && cp /tmp/m1-report/report.md "$OUT/m1-report.md"
    for a in "$ART"/*.tar; do  # $OUT returns files of at most 16 MiB
        if (( $(stat -c %s "$a") > 15 * 1024 * 1024 )); then
            split -b 15M -d "$a" "$OUT/$(basename "$a").part-"
        else
            cp "$a" "$OUT/"
        fi
    done
    ;;
spread)
    gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
    devices=()
    (( gpus > 1 )) && devices=(--devices all)  # the K cold builds at once, one per GPU
    step tuning-builds $PY -m bench run "${MATRIX[@]}" --only "$TUNED" --tuning-builds "${K:-3}" \
        --runs 1 "${devices[@]}" --store "$WORK/spread.jsonl" --report-dir /tmp/spread-report --no-progress \
        --baseline "$TUNED"  # the tuned cell alone: it is its own baseline
    step report $PY -m bench report "$WORK/spread.jsonl" --out /tmp/spread-report --baseline "$TUNED" \
        && cp /tmp/spread-report/report.md "$OUT/spread-report.md"
    ;;
second)
    for first_part in "$ART"/*.tar.part-00; do  # artifacts that came back in parts
        [ -e "$first_part" ] || continue
        cat "${first_part%-00}"-* > "${first_part%.part-00}"
    done
    ls -l "$ART"/*.tar "$CARRY/m1.jsonl" || { echo "carry results/h200-artifacts (art/*.tar, m1.jsonl) from first"; exit 2; }
    step artifact-runs $PY -m bench run "${MATRIX[@]}" --only "$(built_cells)" --engines "$ART" --runs 2 \
        --store "$WORK/m2.jsonl" --report-dir /tmp/m2-report --no-progress
    step report $PY -m bench report "$WORK/m2.jsonl" --out /tmp/m2-report && cp /tmp/m2-report/report.md "$OUT/m2-report.md"
    # Two machines by design: their environments may differ (the CPU's name); compare says how.
    step compare $PY -m bench compare "$CARRY/m1.jsonl" "$WORK/m2.jsonl" --allow-env-mismatch \
        --metrics output_throughput,tpot_median_ms --markdown "$OUT/compare.md"
    $PY - "$CARRY/m1.jsonl" "$WORK/m2.jsonl" <<'EOF'
import sys
from bench.results import query
for store in sys.argv[1:]:
    recs = [r for r in query.load([store]) if r.ok]
    seen = sorted({(r.cell["precision"], r.environment.get("gpu_uuid"), r.kernels.get("source"),
                    (r.kernels.get("artifact") or "")[:12], r.kernels.get("artifact_tuned_digest"), r.tuned_digest)
                   for r in recs})
    for row in seen:  # the last two equal: the process ran the artifact's tuned configs, tuned nothing anew
        print(store, "precision, GPU, kernels, artifact, its tuned digest, the pass's tuned digest:", *row)
EOF
    ;;
esac
cp "$WORK"/*.jsonl "$OUT/" 2>/dev/null
# The worker logs say where each process spent its time (load, artifact install, warm-up, trials).
tar czf "$OUT/logs-$mode.tgz" $(find "$WORK" "$ART" -name '*.log' 2>/dev/null) 2>/dev/null
echo "mode $mode done after $(( $(date +%s) - started )) s"
