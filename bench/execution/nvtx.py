"""Named ranges around module instances, prefill, decode steps and batches.

Modules are selected by fnmatch patterns on their class name (`*RMSNorm`) or their qualified
module name (`lm_head`). A forward pre-hook pushes a range and a forward hook registered with
`always_call=True` pops it, so the ranges stay balanced when a forward raises (torch calls
always-call hooks while the exception unwinds, innermost module first).

A range is pushed through every mechanism asked for: `record_function` (what torch.profiler
sees, and the only one on CPU, so the same logic is tested there) and NVTX (what nsys sees).
NVTX ranges go to their own domain, NVTX_DOMAIN, through the `nvtx` package (the `nvtx`
extra), so an nsys session can keep or drop the harness's ranges apart from a library's;
without the package they fall back to torch.cuda.nvtx's markers in the default domain.
Labels are "group:detail" (see bench.execution.kernels).
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Callable, Iterable

DEFAULT_PATTERNS = ("*RMSNorm", "*Attention", "*MLP", "*DecoderLayer", "lm_head")
NVTX_DOMAIN = "bench"


def nvtx_markers() -> tuple[Callable[[str], object], Callable[[], object], str | None]:
    """Return (push, pop, domain name) of the NVTX markers the harness uses.

    The nvtx package's domain NVTX_DOMAIN when the package is installed (a no-op unless a tool
    such as nsys is attached); otherwise torch.cuda.nvtx's range_push/range_pop, domain None
    (NVTX's default domain).
    """
    try:
        import nvtx
    except ImportError:
        import torch

        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop, None
    domain = nvtx.get_domain(NVTX_DOMAIN)
    return (lambda label: domain.push_range(domain.get_event_attributes(message=label))), domain.pop_range, NVTX_DOMAIN


class RangeStack:
    """Pushes and pops named ranges on record_function and/or NVTX; records every label pushed."""

    def __init__(self, record_function: bool = True, nvtx: bool = False):
        self.record_function = record_function
        self.nvtx = nvtx
        self._nvtx_push, self._nvtx_pop, self.nvtx_domain = nvtx_markers() if nvtx else (None, None, None)
        self._open: list = []  # (label, record_function context or None)
        self.labels: set[str] = set()
        self.pushed = 0

    def push(self, label: str) -> None:
        ctx = None
        if self.record_function:
            from torch.autograd.profiler import record_function

            ctx = record_function(label)
            ctx.__enter__()
        if self.nvtx:
            self._nvtx_push(label)
        self._open.append((label, ctx))
        self.labels.add(label)
        self.pushed += 1

    def pop(self, label: str | None = None) -> None:
        if not self._open:
            raise RuntimeError(f"range pop without a push (label {label!r})")
        top, ctx = self._open.pop()
        if label is not None and top != label:
            raise RuntimeError(f"unbalanced ranges: popping {label!r} but the innermost open range is {top!r}")
        if self.nvtx:
            self._nvtx_pop()
        if ctx is not None:
            ctx.__exit__(None, None, None)

    @property
    def depth(self) -> int:
        return len(self._open)

    def range(self, label: str):
        """Return a context manager holding `label` open (popped even when the body raises)."""
        stack = self

        class _Range:
            def __enter__(self):
                stack.push(label)
                return self

            def __exit__(self, *exc):
                stack.pop(label)
                return False

        return _Range()


def match_modules(model, patterns: Iterable[str]) -> list[tuple[str, object, str]]:
    """Return [(qualified name, module, label group)] for modules matching any pattern.

    A class-name match groups under the class name; a module-name match under the module name.
    Warns, listing the module classes that exist, for each pattern that matches nothing.
    """
    patterns = list(patterns)
    hits: list[tuple[str, object, str]] = []
    used = dict.fromkeys(patterns, False)
    for qname, module in model.named_modules():
        cls = type(module).__name__
        for p in patterns:
            if fnmatch.fnmatchcase(cls, p):
                hits.append((qname, module, cls))
                used[p] = True
                break
            if qname and fnmatch.fnmatchcase(qname, p):
                hits.append((qname, module, qname))
                used[p] = True
                break
    missing = [p for p, ok in used.items() if not ok]
    if missing:
        classes = sorted({type(m).__name__ for _, m in model.named_modules()})
        warnings.warn(
            f"range pattern(s) {missing} match no module class or module name of {type(model).__name__}; "
            f"module classes present: {classes}",
            stacklevel=2,
        )
    return hits


class ModuleRanges:
    """Context manager: ranges around matching module instances and generate phases.

    Inside it, every forward of a matching module is a range "<group>:<qualified name>"; every
    forward of the top-level model is "prefill:<batch>" (the first since `batch()` was entered)
    or "decode_step:<n>"; `batch(i)` opens "batch:<i>". Hooks are removed on exit.
    """

    def __init__(self, model, patterns: Iterable[str] = DEFAULT_PATTERNS, stack: RangeStack | None = None,
                 phases: bool = True):
        self.model = model
        self.stack = stack or RangeStack()
        self.targets = match_modules(model, patterns)
        self.phases = phases
        self._handles: list = []
        self._batch = 0
        self._step = 0

    def _hooks(self, label: str):
        stack = self.stack

        def pre(module, args):
            stack.push(label)

        def post(module, args, output):
            stack.pop(label)

        return pre, post

    def _phase_hooks(self):
        stack = self.stack
        open_labels: list[str] = []

        def pre(module, args, kwargs):
            label = f"prefill:{self._batch}" if self._step == 0 else f"decode_step:{self._step}"
            self._step += 1
            stack.push(label)
            open_labels.append(label)

        def post(module, args, kwargs, output):
            stack.pop(open_labels.pop())

        return pre, post

    def __enter__(self) -> ModuleRanges:
        for qname, module, group in self.targets:
            pre, post = self._hooks(f"{group}:{qname}" if group != qname else qname)
            self._handles.append(module.register_forward_pre_hook(pre))
            self._handles.append(module.register_forward_hook(post, always_call=True))
        if self.phases:
            # The phase range encloses a module range on the model itself: its pre-hook runs
            # first (prepend) and its post-hook last (registered last).
            pre, post = self._phase_hooks()
            self._handles.append(self.model.register_forward_pre_hook(pre, with_kwargs=True, prepend=True))
            self._handles.append(self.model.register_forward_hook(post, with_kwargs=True, always_call=True))
        return self

    def __exit__(self, *exc) -> bool:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        return False

    def batch(self, index: int, push: bool = True):
        """Return a context manager: range "batch:<index>" (none with push=False); the next model forward is its prefill."""
        import contextlib

        self._batch = index
        self._step = 0
        return self.stack.range(f"batch:{index}") if push else contextlib.nullcontext()
