"""asv's benchmark suite (asv_cells, asv_harness); the scripts that drive asv live in scripts/ (docs/guide/regressions.md).

Which `bench` the suite measures, decided once here, before any benchmark module imports it:
1. BENCH_ASV_PROJECT=<a commit's tree>: that tree (scripts/asv_existing.py measures two
   commits in one existing environment this way);
2. in an environment asv built for a commit (asv sets ASV_COMMIT): the `bench` installed there;
3. otherwise (`asv run -E existing`, scripts): the checkout this folder belongs to, even where
   the Python has another checkout's `bench` installed (an editable install of a main checkout
   would otherwise be measured in place of a worktree's).
"""

import os
import sys
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent

if os.environ.get("BENCH_ASV_PROJECT"):
    sys.path.insert(0, os.environ["BENCH_ASV_PROJECT"])
elif not os.environ.get("ASV_COMMIT") and (_CHECKOUT / "bench" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))

# asv names the commit it installed; records then carry it rather than whatever git repository
# encloses the environment (bench.machine.environment.project_commit reads BENCH_COMMIT first).
if os.environ.get("ASV_COMMIT") and not os.environ.get("BENCH_COMMIT"):
    os.environ["BENCH_COMMIT"] = os.environ["ASV_COMMIT"]
    os.environ["BENCH_DIRTY"] = "0"
