#!/usr/bin/env bash
# The GPU checks of one device session, as a user runs them: the GPU-marked tests, then the planted decode-path
# faults through the compiled harness loop with the product's own command (`bench accuracy`), whose console and
# records come back in $OUT. A side script: it installs the carried wheels (.whl/, see gpu_study_session.sh) and
# calls pytest and bench only; every figure is theirs.
# Usage (repo root, on the GPU machine): OUT=<folder> bash scripts/gpu_checks_session.sh
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
exec > >(tee -a "$OUT/checks.log") 2>&1
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0)) s] $*"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
stamp "GPU-marked tests"
timeout "${TESTS_TIMEOUT:-330}" $PY -m pytest -m gpu tests/test_gpu.py tests/test_accuracy.py -v -rs -p no:cacheprovider \
  --durations=15 --junitxml="$OUT/gpu-tests.xml" -k "not test_gpu_faults_in_the_compiled_loop"
stamp "pytest exited $?"
stamp "BENCH_ALLOW_CORRUPTION=1 bench accuracy --matrix tests/data/gpu-faults.toml"
BENCH_ALLOW_CORRUPTION=1 timeout "${FAULTS_TIMEOUT:-200}" $PY -m bench accuracy --matrix tests/data/gpu-faults.toml
stamp "bench accuracy exited $?"
gzip -c results/gpu-faults-accuracy.jsonl > "$OUT/gpu-faults-accuracy.jsonl.gz" 2>/dev/null
stamp "done"
