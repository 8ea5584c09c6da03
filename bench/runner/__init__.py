"""Runner: the run driver of a matrix (plan from the store, resume, build groups, store writes).

`matrix.run_matrix` plans what the store lacks, hands each build group to an executor
(bench.execution) and appends each record (bench.results) the moment its event arrives.
May import: every stage up to results (it needs the record types, the store and the query
API); nothing that probes, profiles or reports.
"""
