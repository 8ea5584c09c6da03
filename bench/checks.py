"""Checks of user-given numbers: the one rule every matrix key, backend option and command-line flag goes through.

A number must be a number (not true/false, not text), finite (NaN never; infinity only where
the caller allows it), integral where it counts something, and inside its range. The message
names the value, what it must be, and what it is for, so the user can fix it without reading
the code.
"""

from __future__ import annotations

import math
from typing import Any

from bench.errors import BenchInputError

# The most requests one workload may hold: ShareGPT V3 has 94,145 conversations, and a workload is
# built and kept in memory (and frozen to a file) before anything runs.
MAX_NUM_REQUESTS = 100_000


def is_finite_number(value: Any) -> bool:
    """Return whether value is a finite int or float (not a bool), an int too large for a float not being one: a
    stored record is JSON, where `1e999` reads as inf and 400 digits as an int that no float holds."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # math.isfinite converts an int to a float first
        return False


def is_seconds(value: Any) -> bool:
    """Return whether value is a finite, non-negative number (not a bool): a duration read from a stored file or
    record, which is untrusted input (the capture's, the estimate's and the console's one test of it)."""
    return is_finite_number(value) and value >= 0


def check_number(value: Any, what: str, *, integer: bool = False, minimum: float | None = None,
                 maximum: float | None = None, above: float | None = None, infinite_ok: bool = False,
                 hint: str = "") -> None:
    """Raise BenchInputError unless `value` is a finite number (an integer if asked) inside the range.

    what: how the message names it ("option step_ms=nan for backend 'fake'" or "--factor");
    minimum/maximum: inclusive bounds; above: exclusive lower bound; hint: appended after a colon.
    """
    tail = f": {hint}" if hint else ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BenchInputError(f"{what} must be {range_text(minimum, maximum, above, integer)}, got {value!r}{tail}")
    if value != value or (math.isinf(value) and not infinite_ok):
        raise BenchInputError(f"{what} must be a finite number, got {value!r}{tail}")
    if integer and not isinstance(value, int):
        raise BenchInputError(f"{what} must be an integer, got {value!r}{tail}")
    low_ok = (minimum is None or value >= minimum) and (above is None or value > above)
    if not low_ok or (maximum is not None and value > maximum):
        raise BenchInputError(f"{what} must be {range_text(minimum, maximum, above, integer)}, got {value!r}{tail}")


def range_text(minimum: float | None, maximum: float | None, above: float | None = None, integer: bool = False) -> str:
    """Return a range in words: 'a positive integer', 'a non-negative number', 'between 0 and 1', 'a positive integer <= 100000'."""
    noun = "integer" if integer else "number"
    if minimum is not None and maximum is not None and above is None and not (integer and minimum == 1):
        return f"{'an integer' if integer else 'a number'} between {_text(minimum)} and {_text(maximum)}"
    if above == 0 or (integer and minimum == 1 and above is None):
        low = f"a positive {noun}"
    elif minimum == 0 and above is None:
        low = f"a non-negative {noun}"
    elif above is not None:
        low = f"a {noun} > {_text(above)}"
    elif minimum is not None:
        low = f"a {noun} >= {_text(minimum)}"
    else:
        low = f"{'an' if integer else 'a'} {noun}"
    return low if maximum is None else f"{low} <= {_text(maximum)}"


def _text(bound: float) -> str:
    """Return a bound as the message writes it: whole numbers in full (1000000, not 1e+06), others as %g."""
    return str(int(bound)) if float(bound).is_integer() and abs(bound) < 1e16 else f"{bound:g}"
