"""Online serving: an asyncio streaming client for OpenAI-compatible servers, and servers to measure it against.

`sse.py` splits a server-sent-event byte stream into data payloads, `client.py` replays a
workload against /v1/completions or /v1/chat/completions and times every chunk (arrival times
come from bench/workloads/arrivals.py), `paced_server.py` is a paced and fault-injecting
streaming server for tests and benchmarks, `model_dir.py` writes a random-weight model
directory a real server can load, `transformers_serve.py` starts and stops `transformers serve`.
The `openai` backend (bench/backends/openai/backend.py) drives them.
May import: base, machine, spec and workloads (RequestTiming lives in bench.workloads.request).
"""
