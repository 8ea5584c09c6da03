# Sourced by the GPU session scripts (gpu_study_session.sh, gpu_checks_session.sh, gpu_planted_session.sh), after
# `set -uo pipefail` and with LOG_NAME set: to the repository root, the console copied to $OUT/$LOG_NAME, T0 and
# stamp for the times, and the carried wheels (.whl/, git-ignored) installed into /tmp/site on PYTHONPATH.
: "${OUT:?set OUT to the output folder}"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
exec > >(tee -a "$OUT/$LOG_NAME") 2>&1
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0)) s] $*"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  # --upgrade: a warm machine keeps /tmp/site from the call before
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
