"""Spec: what a matrix asks for, validated before anything runs.

`cells` (the types and a cell's identity), `matrix` (TOML / preset -> Matrix), `baseline` (the
speedup baseline and its matching), `placement` (executor settings against the cells), `narrow`
(the command line's narrowing). Every message names the bad key and the valid values. May import:
base, machine and the backends' declarations (bench.backends.registry, declaration, <name>/config).
"""
