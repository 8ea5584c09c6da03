"""The docs hold together: every relative link in README.md and docs/**/*.md points at a file or
folder that exists, and no page carries an issue number ("issue #12", "issues 16, 21", "(#12)"):
measured history lives in dated records under docs/measurements/, not in references to a
tracker (docs/measurements/README.md). The records' stored data (docs/data/) stays under 5 MB,
its stores gzipped, and no test reads it: tests read their copies in tests/data/."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data"

# [text](target) and ![alt](target); reference-style links are not used in these docs.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# "issue 12", "Issue #12", "issues 16, 21", a bare "#12" or "(#12)"; "owner/repo#12" (an upstream
# reference such as pytorch/pytorch#173391) is allowed.
ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w/.-])#\d+\b", re.IGNORECASE)
FENCE = re.compile(r"^\s*(```|~~~)")


def doc_pages():
    """Return README.md and every Markdown page under docs/ except the stored data's own files (its README is a page)."""
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    return [p for p in pages if DATA not in p.parents or p == DATA / "README.md"]


def prose_lines(path):
    """Yield (line number, line) of a page outside fenced code blocks."""
    in_fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield number, line


def relative_links(path):
    """Return (line number, target) of every link of a page that is not a URL or a bare anchor."""
    links = []
    for number, line in prose_lines(path):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            links.append((number, target))
    return links


def test_the_docs_pages_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in doc_pages()}
    assert {"README.md", "docs/architecture.md", "docs/measurements/README.md", "docs/guide/matrix.md"} <= names
    assert [n for n in names if n.startswith("docs/data/")] == ["docs/data/README.md"]


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for number, target in relative_links(page):
        file_part = target.split("#", 1)[0]
        if not (page.parent / file_part).resolve().exists():
            broken.append(f"{page.relative_to(ROOT)}:{number}: {target}")
    assert not broken, "links to files that do not exist (fix the path or the link):\n" + "\n".join(broken)


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_issue_numbers(page):
    found = [f"{page.relative_to(ROOT)}:{n}: {line.strip()}" for n, line in prose_lines(page) if ISSUE.search(line)]
    assert not found, "issue numbers in the docs (say what happened instead, or link a dated record):\n" + "\n".join(found)


def test_the_checks_catch_what_they_look_for(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](page.md) [anchor](#x) [web](https://example.org) [gone](missing.md)\n"
        "fixed in issue #12; see (#7) and issues 16, 21; upstream pytorch/pytorch#173391 is fine\n"
        "```\n[in a fence](nowhere.md) issue 3\n```\n"
    )
    assert [t for _, t in relative_links(page)] == ["page.md", "missing.md"]
    hits = [ISSUE.findall(line) for _, line in prose_lines(page)]
    assert hits == [[], ["issue #12", "#7", "issues 16"]]


# A page named in the product's code, help texts, presets, scripts or tests (docs/<page>.md,
# docs/guide/<page>.md, docs/measurements/<record>.md); deeper docs/ paths name other projects' docs.
NAMED_PAGE = re.compile(r"\bdocs/(?:(?:guide|measurements)/)?[\w.-]+\.md\b")
PRODUCT = ["bench", "scripts", "benchmarks", "tests", "noxfile.py", "pyproject.toml", "asv.conf.json"]


def test_every_docs_page_the_product_names_exists():
    missing = []
    for top in PRODUCT:
        path = ROOT / top
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.suffix in {".py", ".toml", ".sh", ".json"}]
        for file in files:
            for number, line in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                missing += [f"{file.relative_to(ROOT)}:{number}: {name}"
                            for name in NAMED_PAGE.findall(line) if not (ROOT / name).is_file()]
    assert not missing, "the product names docs pages that do not exist (docs/guide/, docs/measurements/):\n" + "\n".join(missing)


# docs/data/README.md says how the stored data stays small: stores gzipped, long logs trimmed.
DATA_LIMIT_BYTES = 5_000_000
# A test reaching into docs/data: "docs/data/...", ROOT / "docs" / "data", Path("docs", "data").
NAMES_DOCS_DATA = re.compile(r"""\bdocs(?:/|["']\s*[/,]\s*["'])data\b""")


def data_problems(data: Path, limit_bytes: int = DATA_LIMIT_BYTES) -> list[str]:
    """Return what is wrong with the stored data: its files over `limit_bytes` together, or a plain (not gzipped) store."""
    files = [p for p in data.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    problems = [f"{p.relative_to(data)}: a plain result store: keep it as {p.name}.gz (gzip -9 -n; bench report and "
                "bench compare read it as it is)" for p in files if p.name.endswith(".jsonl")]
    if total > limit_bytes:
        largest = sorted(files, key=lambda p: p.stat().st_size, reverse=True)[:5]
        problems.append(f"{total:,} bytes, over {limit_bytes:,}: gzip stores, trim long logs, leave large files a "
                        "record does not need out (docs/data/README.md); largest: "
                        + ", ".join(f"{p.relative_to(data)} ({p.stat().st_size:,})" for p in largest))
    return problems


def modules_naming_docs_data(tests: Path) -> list[str]:
    """Return `file:line: text` of each line of a test module under `tests` that names docs/data (this module aside)."""
    hits = []
    for path in sorted(tests.rglob("*.py")):
        if path.resolve() == Path(__file__).resolve():  # it checks docs/data itself
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if NAMES_DOCS_DATA.search(line):
                hits.append(f"{path.relative_to(tests)}:{number}: {line.strip()}")
    return hits


def test_the_stored_data_stays_small_and_gzipped():
    problems = data_problems(DATA)
    assert not problems, "docs/data:\n" + "\n".join(problems)


def test_no_test_reads_the_stored_data():
    hits = modules_naming_docs_data(ROOT / "tests")
    assert not hits, ("tests name docs/data: copy the fixture into tests/data/ (a store gzipped) and read it "
                      "there (tests/data/README.md):\n" + "\n".join(hits))


def test_the_data_checks_catch_what_they_look_for(tmp_path):
    data = tmp_path / "data"
    (data / "run").mkdir(parents=True)
    (data / "run" / "store.jsonl.gz").write_bytes(b"x" * 60)
    (data / "run" / "session.log").write_bytes(b"x" * 40)
    assert data_problems(data, limit_bytes=100) == []
    (data / "run" / "store.jsonl").write_bytes(b"x")
    problems = data_problems(data, limit_bytes=100)
    assert len(problems) == 2 and problems[0].startswith("run/store.jsonl: a plain result store")
    assert "101 bytes, over 100" in problems[1] and "run/store.jsonl.gz (60)" in problems[1]
    tests = tmp_path / "tests"
    (tests / "support").mkdir(parents=True)
    (tests / "test_a.py").write_text('STORE = ROOT / "docs" / "data" / "run" / "store.jsonl.gz"\n')
    (tests / "support" / "b.py").write_text('x = 1\nload("docs/data/run/store.jsonl.gz")\n')
    (tests / "test_c.py").write_text('DATA = Path("docs", \'data\')\n')
    (tests / "test_ok.py").write_text('a = ROOT / "tests" / "data"\nb = "docs/guide/results.md"  # docs, data\n')
    hits = modules_naming_docs_data(tests)
    assert [h.split(": ")[0] for h in hits] == ["support/b.py:2", "test_a.py:1", "test_c.py:1"]
