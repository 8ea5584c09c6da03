"""One key for a kernel's name as torch.profiler and as nsys spell it, so two collectors' tables can be diffed.

The two tools demangle the same symbol differently: torch.profiler (CUPTI's demangler) writes
`elementwise_kernel<(int)128, (int)4, ...>(int, T3)` and `[lambda(int) (instance 1)]`, nsys
(GNU-style) writes `elementwise_kernel<128, 4, ...>(int, <the full types>)` and the lambda in
braces with a hash-numbered index (seen on the H200, 2026-12-01). The key is the qualified function
name alone, without its return type, template arguments or parameters: coarse (one key per kernel
family, not per instantiation) but the same in both spellings. An anonymous namespace is
`(anonymous namespace)` in one and `<unnamed>` in the other (the H200's second run, 2026-12-01: read
as a parameter list, the first cut `at::native::(anonymous namespace)::CatArrayBatchedCopy` to
`at::native::`); both become `{anonymous}`.
"""

from __future__ import annotations

ANONYMOUS = ("(anonymous namespace)", "<unnamed>")  # one namespace, as CUPTI and as nsys spell it


def _outside_templates(text: str):
    """Yield (index, character) of the characters outside every template argument list (`<...>`)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if depth == 0 and ch not in "<>":
            yield i, ch


def base_name(name: str) -> str:
    """Return the qualified function name of a demangled kernel name (`at::native::elementwise_kernel`)."""
    for spelling in ANONYMOUS:
        name = name.replace(spelling, "{anonymous}")
    # the parameter list starts at the first '(' outside every template argument list
    cut = next((i for i, ch in _outside_templates(name) if ch == "("), len(name))
    head = name[:cut].rstrip()
    if head.endswith(">"):  # the function's own template arguments
        depth = 0
        for i in range(len(head) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(head[i], 0)
            if depth == 0:
                head = head[:i].rstrip()
                break
    # the return type, if any, is everything before the last space outside template arguments
    last_space = max((i for i, ch in _outside_templates(head) if ch == " "), default=-1)
    return head[last_space + 1:]
