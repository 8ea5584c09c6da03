"""The docs hold together: every relative link in README.md and docs/**/*.md points at a file or
folder that exists, and no page carries an issue number ("issue #12", "issues 16, 21", "(#12)"):
measured history lives in dated records under docs/measurements/, not in references to a
tracker (docs/measurements/README.md)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# [text](target) and ![alt](target); reference-style links are not used in these docs.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# "issue 12", "Issue #12", "issues 16, 21", a bare "#12" or "(#12)"; "owner/repo#12" (an upstream
# reference such as pytorch/pytorch#173391) is allowed.
ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w/.-])#\d+\b", re.IGNORECASE)
FENCE = re.compile(r"^\s*(```|~~~)")


def doc_pages():
    """Return README.md and every Markdown page under docs/ except the stored data's own files."""
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    return [p for p in pages if "data" not in p.relative_to(ROOT).parts[:2]]


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
    assert not any(n.startswith("docs/data/") for n in names)


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
