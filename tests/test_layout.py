"""The package's layout: imports flow one way down the pipeline (docs/architecture.md).

A module may import its own stage and the stages before it, never one after it. Every import
counts, including those inside functions (a lazy import is still a dependency). Inside a stage,
modules import each other in no circle of any length; and no module grows past MAX_MODULE_LINES.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bench"

# The pipeline, in order. Each stage lists the modules or packages it holds (a package holds
# its submodules).
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("bench", "bench.errors", "bench.checks", "bench.files", "bench.metrics")),
    ("machine", ("bench.machine",)),
    # A backend's declaration sits with the spec: the matrix reads it to validate cells and compute
    # their ids, never its runtime (bench/backends/<name>/config.py, optimum-benchmark's split).
    ("spec", ("bench.spec", "bench.models", "bench.backends.registry", "bench.backends.declaration",
              "bench.backends.*.config")),
    ("workloads", ("bench.workloads",)),
    ("serving", ("bench.serving",)),
    ("backends", ("bench.backends",)),
    ("execution", ("bench.execution",)),
    ("results", ("bench.results",)),
    ("runner", ("bench.runner",)),
    ("analysis", ("bench.oom", "bench.profiling", "bench.capacity", "bench.accuracy")),
    ("report", ("bench.report",)),
    # A study chains the drivers of runner and the analysis stages and ends in the report: after report.
    ("study", ("bench.study",)),
    ("commands", ("bench.commands", "bench.cli", "bench.__main__")),
]

# Imports that run back up the chain on purpose: (importer, imported) -> why. None today.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def stage_of(module: str) -> str:
    """Return the stage a module belongs to: a pattern it matches (fnmatch), else the longest matching prefix."""
    for stage, prefixes in STAGES:
        if any("*" in p and fnmatch.fnmatchcase(module, p) for p in prefixes):
            return stage
    best, best_len = None, -1
    for stage, prefixes in STAGES:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = stage, len(prefix)
    if best is None:
        raise LookupError(f"{module} is in no stage: add it to STAGES in tests/test_layout.py")
    return best


RANK = {stage: i for i, (stage, _) in enumerate(STAGES)}


def module_name(path: Path, package_root: Path) -> str:
    parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(target: str, name: str | None, package_root: Path) -> str:
    """Return the module `from target import name` loads: target.name when that is a module, else target."""
    if name:
        candidate = package_root.parent.joinpath(*f"{target}.{name}".split("."))
        if candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file():
            return f"{target}.{name}"
    return target


def imports_of(path: Path, package_root: Path) -> list[tuple[str, int, str]]:
    """Return (imported module, line, source text) for every import of the package in a file."""
    module = module_name(path, package_root)
    is_package = path.name == "__init__.py"
    top = package_root.name
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == top or alias.name.startswith(top + "."):
                    out.append((alias.name, node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target != top and not target.startswith(top + "."):
                continue
            text = f"from {'.' * node.level}{node.module or ''} import {', '.join(a.name for a in node.names)}"
            for alias in node.names:
                out.append((_resolve(target, alias.name, package_root), node.lineno, text))
    return out


def violations(package_root: Path, exceptions=None) -> list[str]:
    """Return one message per import that runs back up the chain (module, import, rule)."""
    exceptions = EXCEPTIONS if exceptions is None else exceptions
    found = []
    for path in sorted(package_root.rglob("*.py")):
        module = module_name(path, package_root)
        stage = stage_of(module)
        for imported, line, text in imports_of(path, package_root):
            target_stage = stage_of(imported)
            if RANK[target_stage] <= RANK[stage]:
                continue
            if any(module == a and (imported == b or imported.startswith(b + ".")) for a, b in exceptions):
                continue
            allowed = ", ".join(s for s, _ in STAGES[: RANK[stage] + 1])
            found.append(
                f"{path.relative_to(package_root.parent)}:{line}: `{text}` runs back up the chain: "
                f"{module} is in stage {stage!r}, which may import {allowed}; {imported} is in stage "
                f"{target_stage!r} (move the code to the stage it belongs to, or list a reasoned exception)"
            )
    return found


def test_imports_flow_one_way():
    found = violations(PACKAGE)
    assert not found, "\n".join(found)


def import_graph(package_root: Path) -> dict[str, dict[str, tuple[int, str]]]:
    """Return {module: {imported module of the package: (line, source text) of its first import}}.

    Every import counts, lazy ones included; a package is a module of its own (its __init__.py, named
    as the package). A submodule's implicit import of its parent package is not an edge: Python runs
    the package's __init__ first, so an __init__ that imports its own submodules (to choose one) is
    no circle.
    """
    graph: dict[str, dict[str, tuple[int, str]]] = {}
    for path in sorted(package_root.rglob("*.py")):
        module = module_name(path, package_root)
        edges = graph.setdefault(module, {})
        for imported, line, text in imports_of(path, package_root):
            if imported != module:
                edges.setdefault(imported, (line, text))
    return graph


def import_cycles(package_root: Path) -> list[str]:
    """Return one message per import cycle: the members of each strongly connected component of the import
    graph that holds more than one module (Tarjan's algorithm), with the imports that close it."""
    graph = import_graph(package_root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]  # iterative: no recursion limit on a long chain
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        members.append(m)
                        if m == node:
                            break
                    if len(members) > 1:
                        components.append(sorted(members))
    out = []
    for members in sorted(components):
        inside = set(members)
        edges = [f"  {m} -> {t}: line {line} `{text}`" for m in members for t, (line, text) in sorted(graph[m].items())
                 if t in inside]
        out.append(f"import cycle among {', '.join(members)} (lazy imports count; make the imports flow one way, "
                   "e.g. move what both need below both, or pass a function in):\n" + "\n".join(edges))
    return out


def test_no_import_cycle_of_any_length():
    found = import_cycles(PACKAGE)
    assert not found, "\n".join(found)


MAX_MODULE_LINES = 600


def oversized_modules(package_root: Path, limit: int = MAX_MODULE_LINES) -> list[str]:
    """Return one message per module of more than `limit` lines: the module and its count."""
    out = []
    for path in sorted(package_root.rglob("*.py")):
        n = len(path.read_text().splitlines())
        if n > limit:
            out.append(f"{path.relative_to(package_root.parent)} has {n} lines, over {limit}: split it by what each "
                       "part makes (one idea a module, small enough to read in one sitting)")
    return out


def test_no_module_over_the_line_limit():
    found = oversized_modules(PACKAGE)
    assert not found, "\n".join(found)


def test_every_exception_is_still_needed():
    """A listed exception nobody needs any more is a hole in the rule: drop it."""
    for (importer, imported), _why in EXCEPTIONS.items():
        path = PACKAGE.parent.joinpath(*importer.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        used = [m for m, _, _ in imports_of(path, PACKAGE) if m == imported or m.startswith(imported + ".")]
        assert used, f"exception ({importer} -> {imported}) is listed but {importer} no longer imports it"
        assert RANK[stage_of(imported)] > RANK[stage_of(importer)], f"exception ({importer} -> {imported}) is not a back-reference"


def test_every_module_has_a_stage_and_every_subpackage_says_what_it_may_import():
    for path in sorted(PACKAGE.rglob("*.py")):
        stage_of(module_name(path, PACKAGE))  # LookupError names the module
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        if init.parent.name == "presets":
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc, f"{init.relative_to(ROOT)}: its docstring must say what the package owns and what it may import"


# One shape per verb (asv's commands): bench/commands/<verb>.py parses its arguments, calls the one driver
# of its verb, in the driver's stage, and prints what it returns. Each verb of `bench --help` and its driver
# module, one-to-one; a command imports nothing of the package but bench.cli's helpers, bench.errors and it.
DRIVERS: dict[str, str] = {
    "presets": "bench.spec.presets",
    "run": "bench.study.run",
    "report": "bench.report.driver",
    "compare": "bench.study.compare",
    "study": "bench.study.driver",
    "oom": "bench.oom.driver",
    "profile": "bench.profiling.driver",
    "accuracy": "bench.accuracy.driver",
    "parity": "bench.accuracy.parity",
    "capacity": "bench.capacity.driver",
    "kernels": "bench.profiling.readback",
    "build": "bench.runner.build",
    "workload": "bench.workloads.driver",
}
COMMANDS_MAY_IMPORT = ("bench.cli", "bench.errors")
COMMAND_MAX_LINES = 200  # a command that grows past this is doing its driver's work


def _called_names(path: Path) -> set[str]:
    """Return the names a module calls (`f(...)`, `f(...).g`): the plain names of its call expressions."""
    return {node.func.id for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)}


def _names_from(path: Path, module: str) -> set[str]:
    """Return the names a file imports from `module` (`from module import a, b as c`: c and a's own name)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            out.update(a.asname or a.name for a in node.names)
    return out


def command_violations(package_root: Path, drivers: dict[str, str]) -> list[str]:
    """Return one message per command module that breaks the verb's shape: a module without a driver (or a driver
    without its module), a driver serving two verbs, an import other than bench.cli, bench.errors and its driver,
    its driver not imported or never called, a module over COMMAND_MAX_LINES lines."""
    found = []
    folder = package_root / "commands"
    modules = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    for verb in sorted(modules - set(drivers)):
        found.append(f"bench/commands/{verb}.py has no driver: list it in DRIVERS with the one module it calls")
    for verb in sorted(set(drivers) - modules):
        found.append(f"DRIVERS names verb {verb!r}, which has no module bench/commands/{verb}.py")
    for driver in sorted({d for d in drivers.values() if list(drivers.values()).count(d) > 1}):
        found.append(f"{driver} is the driver of {sorted(v for v, d in drivers.items() if d == driver)}: one driver a verb")
    for path in sorted(folder.glob("*.py")):
        rel = path.relative_to(package_root.parent)
        lines = len(path.read_text().splitlines())
        if lines > COMMAND_MAX_LINES:
            found.append(f"{rel} has {lines} lines (at most {COMMAND_MAX_LINES}): move its work to its driver")
        driver = drivers.get(path.stem)
        allowed = {*COMMANDS_MAY_IMPORT, *([driver] if driver else [])}
        imported = imports_of(path, package_root)
        for module, line, text in imported:
            if module not in allowed:
                found.append(f"{rel}:{line}: `{text}`: a command imports only {sorted(allowed)}; {module}'s use "
                             "belongs in the driver")
        if driver is None:
            continue
        if driver not in {m for m, _, _ in imported}:
            found.append(f"{rel} does not import its driver {driver}")
        elif not _names_from(path, driver) & _called_names(path):
            found.append(f"{rel} imports its driver {driver} but calls nothing of it")
        if stage_of(driver) == "commands":
            found.append(f"{rel}: its driver {driver} is in stage 'commands': a driver lives in its pipeline stage")
    return found


def test_each_command_calls_its_one_driver_and_stays_small():
    found = command_violations(PACKAGE, DRIVERS)
    assert not found, "\n".join(found)
    for driver in DRIVERS.values():  # every driver is a module of the package
        assert (PACKAGE.parent / (driver.replace(".", "/") + ".py")).is_file(), f"{driver} is not a module"


def test_the_verbs_of_bench_help_are_the_verbs_with_a_driver():
    from bench.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(DRIVERS)
    for verb, parser in sub.choices.items():
        func = parser.get_default("func") or next(
            (a.choices for a in parser._actions if a.dest.endswith("_command")), None)
        funcs = [func] if callable(func) else [p.get_default("func") for p in func.values()]
        assert all(f.__module__ == f"bench.commands.{verb}" for f in funcs), (verb, funcs)


def test_a_command_that_does_its_drivers_work_is_reported(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "cli.py": "",
        "errors.py": "",
        "commands/__init__.py": "",
        "commands/oom.py": "from bench.cli import load\ndef cmd(a):\n    from bench.oom.driver import search\n    search(a)\n",
        "commands/run.py": ("def cmd(a):\n    from bench.study.run import go\n    from bench.files import write_atomic\n"
                            "    write_atomic(go(a))\n" + "# more\n" * COMMAND_MAX_LINES),
        "commands/extra.py": "",
        "commands/build.py": "from bench.runner.build import build\ndef cmd(a):\n    return 0\n",
        "commands/kernels.py": "def cmd(a):\n    return 0\n",
        "runner/__init__.py": "",
        "runner/build.py": "def build(a): pass\n",
        "oom/__init__.py": "",
        "oom/driver.py": "def search(a): pass\n",
        "study/__init__.py": "",
        "study/run.py": "def go(a): pass\n",
        "files.py": "",
    })
    found = command_violations(root, {"oom": "bench.oom.driver", "run": "bench.study.run", "report": "bench.oom.driver",
                                      "build": "bench.runner.build", "kernels": "bench.profiling.readback"})
    text = "\n".join(found)
    assert len(found) == 7, text
    assert "bench/commands/extra.py has no driver" in text and "verb 'report', which has no module" in text
    assert "bench.oom.driver is the driver of ['oom', 'report']" in text
    assert "bench/commands/run.py has 204 lines" in text
    assert "bench/commands/run.py:3: `from bench.files import write_atomic`: a command imports only" in text
    assert "bench/commands/build.py imports its driver bench.runner.build but calls nothing of it" in text
    assert "bench/commands/kernels.py does not import its driver bench.profiling.readback" in text
    assert not any("oom.py" in f or "extra.py does not" in f for f in found)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "bench"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_lazy_back_reference_is_reported_with_module_import_and_rule(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "workloads/__init__.py": "",
        "workloads/wl.py": "def f():\n    from bench.report import build\n",
        "report/__init__.py": "",
        "report/build.py": "from bench.workloads import wl\n",
    })
    found = violations(root, exceptions={})
    assert len(found) == 1
    msg = found[0]
    assert "bench/workloads/wl.py:2" in msg and "`from bench.report import build`" in msg
    assert "stage 'workloads', which may import base, machine, spec, workloads" in msg and "'report'" in msg


def test_relative_imports_resolve_and_listed_exceptions_pass(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "spec.py": "def f():\n    from .backends import REGISTRY\n",
        "backends/__init__.py": "REGISTRY = {}\n",
        "results/__init__.py": "",
        "results/store.py": "from ..backends import REGISTRY\nfrom . import store\n",
    })
    assert len(violations(root, exceptions={})) == 1
    assert violations(root, exceptions={("bench.spec", "bench.backends"): "registry"}) == []


def test_a_cycle_through_a_lazy_import_and_a_package_init_is_reported_with_its_members(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "results/__init__.py": "from bench.results.query import load\n",
        "results/store.py": "def writer():\n    from bench.results import columnar\n",
        "results/columnar.py": "from bench.results.store import append\n",
        "results/query.py": "import bench.results.columnar\ndef load():\n    from bench import results\n",
        "results/records.py": "from . import store\n",  # into the cycle, not part of it
    })
    (cycle, other) = import_cycles(root)
    assert cycle.startswith("import cycle among bench.results, bench.results.query (")
    assert "bench.results.query -> bench.results: line 3 `from bench import results`" in cycle
    assert other.startswith("import cycle among bench.results.columnar, bench.results.store (")
    assert "bench.results.store -> bench.results.columnar: line 2 `from bench.results import columnar`" in other
    assert "records" not in cycle + other


def test_imports_flowing_one_way_make_no_cycle_and_a_package_init_may_import_its_submodules(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "results/__init__.py": "",
        "results/jsonl.py": "",
        "results/columnar.py": "from bench.results.jsonl import read_lines\n",
        "results/query.py": "from bench.results import columnar, jsonl\n",
        "results/store.py": "def writer():\n    from bench.results import query\n",
        "executors/__init__.py": "def make():\n    from bench.executors.local import Local\n",
        "executors/local.py": "import bench.results.store\n",
    })
    assert import_cycles(root) == []


def test_a_module_over_the_limit_is_named_with_its_count(tmp_path):
    root = _tree(tmp_path, {"__init__.py": "", "report/__init__.py": "", "report/tables.py": "x = 1\n" * 601,
                            "report/render.py": "x = 1\n" * 600})
    assert oversized_modules(root) == ["bench/report/tables.py has 601 lines, over 600: split it by what each part "
                                       "makes (one idea a module, small enough to read in one sitting)"]


@pytest.mark.parametrize("module, stage", [
    ("bench", "base"), ("bench.models", "spec"), ("bench.workloads.workload", "workloads"),
    ("bench.backends.speed_of_light", "backends"), ("bench.results.records", "results"),
    ("bench.runner.matrix", "runner"), ("bench.metrics", "base"), ("bench.machine.environment", "machine"),
    ("bench.workloads.request", "workloads"), ("bench.execution.worker", "execution"),
    ("bench.report.kernel_panel", "report"), ("bench.study.driver", "study"), ("bench.execution.launcher", "execution"),
    ("bench.cli", "commands"),
])
def test_where_modules_sit(module, stage):
    assert stage_of(module) == stage


def _documented_modules() -> list[tuple[str, str]]:
    """Return (stage, module) for every module the module table of docs/architecture.md names."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## Modules", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("stage", "---"):
            continue
        folder = None
        for name in re.findall(r"`([\w/]+(?:\.py|/\*\.py))`", cells[1]):
            if "/" in name:
                folder = name.rsplit("/", 1)[0]
            elif folder:
                name = f"{folder}/{name}"
            out.append((cells[0], name))
    return out


def test_architecture_doc_lists_every_module_in_its_stage():
    documented = _documented_modules()
    named = set()
    for stage, name in documented:
        paths = sorted(PACKAGE.glob(name.replace("bench/", "", 1))) if "*" in name else [
            PACKAGE / name.replace("bench/", "", 1)]
        assert paths and all(p.is_file() for p in paths), f"docs/architecture.md names {name}, which does not exist"
        for path in paths:
            module = module_name(path, PACKAGE)
            expected = {"oom": "analysis", "profiling": "analysis", "accuracy": "analysis"}.get(stage, stage)
            assert stage_of(module) == expected, f"docs/architecture.md puts {module} in {stage}; the code: {stage_of(module)}"
            named.add(path)
    missing = [str(p.relative_to(ROOT)) for p in sorted(PACKAGE.rglob("*.py"))
               if p not in named and p.name not in ("__main__.py",) and not (p.name == "__init__.py" and p.parent != PACKAGE)]
    assert not missing, f"docs/architecture.md's module table does not name: {missing}"
