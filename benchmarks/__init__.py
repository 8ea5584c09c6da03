"""asv's benchmark suite (asv_cells, asv_harness) and the scripts that drive asv (docs/regressions.md).

Which `bench` the suite measures, decided once here, before any benchmark module imports it:
1. BENCH_ASV_PROJECT=<a commit's tree>: that tree (benchmarks/asv_existing.py measures two
   commits in one existing environment this way);
2. else the `bench` installed in the environment (asv builds and installs each commit);
3. else the checkout this folder belongs to (`asv run -E existing` in a plain checkout).
"""

import os
import sys
from pathlib import Path

if os.environ.get("BENCH_ASV_PROJECT"):
    sys.path.insert(0, os.environ["BENCH_ASV_PROJECT"])
else:
    try:
        import bench  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# asv names the commit it installed; records then carry it rather than whatever git repository
# encloses the environment (bench.environment.project_commit reads BENCH_COMMIT first).
if os.environ.get("ASV_COMMIT") and not os.environ.get("BENCH_COMMIT"):
    os.environ["BENCH_COMMIT"] = os.environ["ASV_COMMIT"]
    os.environ["BENCH_DIRTY"] = "0"
