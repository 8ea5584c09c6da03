"""Machine: what the device and the process are, the bottom of the pipeline.

The device strings (`devices`), the environment fingerprint (`environment`), the memory cap
(`memory_cap`), NVML telemetry (`telemetry`) and the one failure classifier (`failures`).
May import: the base modules (bench, errors, files, metrics) only; every stage may import it.
"""
