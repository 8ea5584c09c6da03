"""The guide's commands and matrices are the product's: every `bench ...` command line in the guide's code blocks
(docs/guide/*.md and README.md) parses with the real argument parser, so a renamed or removed flag fails here, and
every complete matrix the guide shows (a TOML block with `backends`) loads and names one baseline cell."""

import re
import shlex
import warnings
from pathlib import Path

import pytest

from bench.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs" / "guide").glob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^\s*(```|~~~)\s*(\w*)")
SHELL = {"", "bash", "sh", "shell", "console"}
# A command of the page: bench ARGS, or python[3] -m bench ARGS, after any VAR=value assignments.
ENTRY = (["bench"], ["python", "-m", "bench"], ["python3", "-m", "bench"])


def code_lines(page: Path):
    """Yield (line number, line) of a page's shell code blocks, a line ending in a backslash joined to the next."""
    lang, held, start = None, "", 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            lang = None if lang is not None else fence.group(2)
            continue
        if lang not in SHELL:
            continue
        if not held:
            start = number
        if line.rstrip().endswith("\\"):
            held += line.rstrip()[:-1] + " "
            continue
        yield start, held + line
        held = ""


def bench_commands(line: str) -> list[list[str]]:
    """Return the argument lists of the bench commands in a shell line (&&, ;, | and ( ) split it; comments,
    `<placeholder>`s, `[optional]` brackets and `...` elisions are the page's prose, not arguments)."""
    line = re.sub(r"<[^<>\s]+>", "PLACEHOLDER", line)
    line = re.sub(r"\[(--[^\]]*)\]", r"\1", line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    tokens = list(lexer)
    out, current = [], []
    for tok in tokens + [";"]:
        if tok and set(tok) <= set("&|;()"):
            out.append(current)
            current = []
        else:
            current.append(tok)
    found = []
    for cmd in out:
        while cmd and re.match(r"^[A-Z_][A-Z0-9_]*=", cmd[0]):
            cmd = cmd[1:]
        for entry in ENTRY:
            if cmd[:len(entry)] == entry:
                found.append([t for t in cmd[len(entry):] if t != "..."])
    return found


def guide_commands():
    return [pytest.param(args, id=f"{page.relative_to(ROOT).as_posix()}:{number}")
            for page in PAGES for number, line in code_lines(page) for args in bench_commands(line)]


def test_the_guide_has_commands_to_check():
    commands = guide_commands()
    assert len(commands) > 50
    verbs = {c.values[0][0] for c in commands}
    assert {"run", "report", "compare", "oom", "profile", "capacity", "study", "presets", "workload"} <= verbs


@pytest.mark.parametrize("args", guide_commands())
def test_every_guide_command_parses(args, capsys):
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"`bench {shlex.join(args)}` does not parse: {capsys.readouterr().err.strip()[-400:]}")
    assert callable(parsed.func)


def test_the_splitter_reads_what_the_pages_write():
    line = "(cd ../b && bench run --matrix M.toml --store $PWD/../b.jsonl --only <cell> # a comment"
    assert bench_commands(line) == [["run", "--matrix", "M.toml", "--store", "$PWD/../b.jsonl", "--only", "PLACEHOLDER"]]
    assert bench_commands("CUDA_VISIBLE_DEVICES=4,5 python3 -m bench profile ... --no-progress") == [
        ["profile", "--no-progress"]]
    assert bench_commands("bench kernels r.sqlite [--out DIR] [--innermost]") == [
        ["kernels", "r.sqlite", "--out", "DIR", "--innermost"]]
    assert bench_commands("git clone x bench && cd bench") == []
    with pytest.raises(SystemExit):  # a flag the parser lacks fails the check
        build_parser().parse_args(["run", "--no-such-flag"])


def guide_matrices():
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"^```toml\n(.*?)^```", text, re.S | re.M):
            if re.search(r"^backends\s*=", m.group(1), re.M):  # a whole matrix, not a fragment of one
                number = text[:m.start()].count("\n") + 1
                out.append(pytest.param(m.group(1), id=f"{page.relative_to(ROOT).as_posix()}:{number}"))
    return out


def test_matrix_md_shows_a_whole_matrix():
    assert any("docs/guide/matrix.md" in p.id for p in guide_matrices())


@pytest.mark.parametrize("toml", guide_matrices())
def test_every_guide_matrix_loads_and_names_one_baseline(toml, tmp_path):
    from bench.spec.baseline import check_baseline
    from bench.spec.matrix import load_matrix

    path = tmp_path / "m.toml"
    path.write_text(toml)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no GPU here to check against": loading runs nothing
        matrix = load_matrix(path, check_installed=False)
    assert matrix.cells
    check_baseline(matrix.baseline, matrix.cells)  # one cell: the guide's own matrix must not be ambiguous
