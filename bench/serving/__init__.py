"""Online serving: an asyncio streaming client for OpenAI-compatible servers, and a paced test server.

`sse.py` splits a server-sent-event byte stream into data payloads, `client.py` replays a
workload against /v1/completions or /v1/chat/completions and times every chunk, `load.py`
turns a request rate into arrival times, `paced_server.py` is a paced streaming server for
tests and benchmarks. The `openai` backend (bench/backends/openai.py) drives them. Sits in the
execution stage. May import: the spec stage, workloads and bench.backends.base (RequestTiming).
"""
