"""The package's layout: imports flow one way down the pipeline (docs/architecture.md).

A module may import its own stage and the stages before it, never one after it. Every import
counts, including those inside functions (a lazy import is still a dependency).
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
