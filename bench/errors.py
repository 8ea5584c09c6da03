"""Errors the user can fix. The CLI prints them as one message and exits with status 2."""


class BenchInputError(ValueError):
    """Bad input (matrix file, option, path, bound): raised before any expensive work starts."""


def choices(values) -> str:
    """Return the valid values as a readable, sorted list for error messages."""
    return ", ".join(repr(v) for v in sorted(values, key=str))


class StoreWriteError(Exception):
    """A record could not be stored (disk full, I/O error): nothing of it is in the store, and the run must stop.

    The CLI prints it and exits with status 3; everything stored before it stays."""
