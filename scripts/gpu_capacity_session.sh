#!/usr/bin/env bash
# Issue 35 on one H200, with the product's commands only, in about 6 minutes (estimate below):
#   1. `transformers serve --continuous-batching` on a random-weight qwen-7b-shape model (bf16),
#      as scripts/gpu_serving_sweep.py starts it (bench/serving/model_dir.py, transformers_serve.py);
#   2. `bench capacity` against it, closed loop (max_concurrency 2..16, resolution 1), SLO
#      tpot_p99_ms=120,ttft_p99_ms=1000, twice: two separate `bench capacity` processes, two stores;
#   3. a batch sweep of the hf backend (bf16, generate, batch 1/2/4/8/16) through `bench run`, and
#      `bench report` over it: the dashboard's interactivity-vs-throughput (Pareto) figure, telemetry.
#
# Usage (repo root; OUT is where everything goes):
#   OUT=/tmp/cap bash scripts/gpu_capacity_session.sh            # H200: qwen-7b-shape on cuda
#   OUT=/tmp/cap CPU_SMOKE=1 bash scripts/gpu_capacity_session.sh # qwen-tiny on the CPU (a check of the script)
# The serving packages must be installed first (docs/guide/serving.md, "On a GPU"):
#   pip install --no-index --find-links WHEELS_DIR fastapi uvicorn 'openai>=1.98.0' 'accelerate>=1.1.0' aiohttp
#
# Why this SLO binds (docs/measurements/2026-12-01-h200-serving.md): the server's TPOT p99 was
# 99-128 ms at 1 req/s offered and 123-144 ms at 4-16 req/s, TTFT p99 221-337 ms throughout; so a
# TPOT p99 bound of 120 ms lies between light and heavy load, and TTFT <= 1000 ms is a sanity bound.
#
# Time estimate on the H200 (from the 2026-12-01 sweep: server ready in 16 s, ~100-115 ms a token;
# the study: a worker with the 7B model costs ~16 s before its first pass, generate ~36 ms a token
# at batch 1): model directory ~10 s; server ~20 s; each capacity search 6-8 probes of 32 requests x
# 16 tokens (c=2: ~27 s, c=4: ~14 s, c=8: ~7 s, c=16 and the bisection: ~4-5 s each, plus ~4 s to
# start each client process) ~100-130 s, two of them ~200-260 s; the batch sweep ~16 s load + ~40 s
# of passes and warm-ups ~70 s; report ~5 s. Total ~5-6 minutes; each step runs under `timeout`,
# so the whole stays under 7 minutes (a step that overruns is cut and says so in $OUT/session.log).
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p "$OUT"
LOG="$OUT/session.log"
exec > >(tee -a "$LOG") 2>&1
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0)) s] $*"; }

if [ "${CPU_SMOKE:-0}" = 1 ]; then
  MODEL=qwen-tiny DTYPE=float32 DEVICE=cpu UPPER=4 LOWER=1 REQS=8 OUTLEN=4 SLO="tpot_p99_ms=2000,ttft_p99_ms=20000"
  BATCHES="[1, 4]" FLAGS="--cb-num-blocks=64 --cb-max-batch-tokens=512" CAP_TIMEOUT=300
else
  MODEL=qwen-7b-shape DTYPE=bfloat16 DEVICE=cuda UPPER=16 LOWER=2 REQS=32 OUTLEN=16 SLO="tpot_p99_ms=120,ttft_p99_ms=1000"
  BATCHES="[1, 2, 4, 8, 16]" FLAGS="" CAP_TIMEOUT=150
fi
# Overrides: CAPACITY_SLO (e.g. tpot_p99_ms=140 if 120 ms is missed even at the lower bound), CAPACITY_UPPER.
SLO=${CAPACITY_SLO:-$SLO}
UPPER=${CAPACITY_UPPER:-$UPPER}
missing=$($PY - <<'EOF'
import importlib.util
print(" ".join(m for m in ("fastapi", "uvicorn", "openai", "accelerate", "aiohttp") if importlib.util.find_spec(m) is None))
EOF
)
if [ -n "$missing" ]; then
  echo "missing packages: $missing"
  echo "  pip install --no-index --find-links WHEELS_DIR fastapi uvicorn 'openai>=1.98.0' 'accelerate>=1.1.0' aiohttp"
  exit 2
fi
stamp "environment: $($PY -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /'

# 1. the model directory and the server (a Python parent holds the server; it stops it on exit)
$PY - "$OUT" "$MODEL" "$DTYPE" "$DEVICE" "$FLAGS" <<'EOF' &
import signal, sys, time
from pathlib import Path
from bench.serving import transformers_serve
from bench.serving.model_dir import write_model_dir
out, model, dtype, device, flags = sys.argv[1:6]
model_dir = write_model_dir(model, Path(out) / "model", dtype=dtype, weights="stub")
flags = dict(f.split("=", 1) for f in flags.split())
server = transformers_serve.start(model_dir, Path(out) / "serve.log", device=device, flags=flags,
                                  check_flags=bool(flags), ready_timeout_s=240)
(Path(out) / "server.url").write_text(server.base_url)
print(f"server {server.base_url} ready: {' '.join(server.command)}", flush=True)
signal.signal(signal.SIGTERM, lambda *_: (server.stop(), sys.exit(0)))
while True:
    time.sleep(1)
EOF
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null' EXIT
for _ in $(seq 1 300); do
  [ -s "$OUT/server.url" ] && break
  kill -0 $SERVER_PID 2>/dev/null || { echo "the server did not start: see $OUT/serve.log"; tail -30 "$OUT/serve.log"; exit 1; }
  sleep 1
done
[ -s "$OUT/server.url" ] || { echo "the server did not answer in 300 s"; exit 1; }
URL=$(cat "$OUT/server.url")
stamp "server ready at $URL"

# 2. bench capacity, twice (two processes, two stores)
cat > "$OUT/capacity.toml" <<EOF
name = "capacity-h200"
description = "transformers serve (continuous batching), $MODEL $DTYPE, random weights: capacity under an SLO"
backends = ["openai"]
model = "$MODEL"
precisions = ["$DTYPE"]
max_batch_sizes = [1]
workloads = ["syn"]
device = "cpu"   # the client runs on the host; the server owns the GPU
runs = 1
trials = 1
warmup = 0
timeout_s = 120
build_timeout_s = 120

[workload.syn]
source = "synthetic"
input_len = 128
output_len = $OUTLEN
num_requests = $REQS

[options.openai]
base_url = "$URL"
model_name = "$OUT/model"
timeout_s = 110
EOF
for i in 1 2; do
  stamp "bench capacity, process $i"
  timeout $CAP_TIMEOUT $PY -m bench capacity --matrix "$OUT/capacity.toml" --axis max_concurrency \
    --lower $LOWER --upper $UPPER --tolerance 1 --slo "$SLO" \
    --store "$OUT/capacity-$i.jsonl" --report-dir "$OUT/capacity-$i" || echo "bench capacity $i ended with status $?"
done
kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null
stamp "server stopped"

# 3. the batch sweep and its report (the Pareto figure)
cat > "$OUT/batch.toml" <<EOF
name = "batch-sweep"
description = "hf generate, $MODEL $DTYPE: a batch sweep for the interactivity-vs-throughput front"
backends = ["hf"]
model = "$MODEL"
precisions = ["$DTYPE"]
max_batch_sizes = $BATCHES
workloads = ["syn"]
device = "$DEVICE"
runs = 1
trials = 1
warmup = 1
timeout_s = 120
build_timeout_s = 300

[workload.syn]
source = "synthetic"
input_len = 128
output_len = 32
num_requests = 16
EOF
[ "$DTYPE" = float32 ] && sed -i 's/precisions = \["float32"\]/precisions = ["fp32"]/' "$OUT/batch.toml"
[ "$DTYPE" = bfloat16 ] && sed -i 's/precisions = \["bfloat16"\]/precisions = ["bf16"]/' "$OUT/batch.toml"
stamp "bench run (batch sweep)"
timeout 200 $PY -m bench run --matrix "$OUT/batch.toml" --store "$OUT/batch-sweep.jsonl" --no-progress \
  --report-dir "$OUT/batch-report" --baseline "backend=hf,max_batch_size=1" || echo "bench run ended with status $?"
stamp "bench report"
timeout 60 $PY -m bench report "$OUT/batch-sweep.jsonl" --out "$OUT/batch-report" --baseline "backend=hf,max_batch_size=1" \
  || echo "bench report ended with status $?"
for i in 1 2; do echo "---- capacity, process $i"; cat "$OUT/capacity-$i/capacity.md" 2>/dev/null; done
stamp "done"
