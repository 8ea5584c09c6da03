class RequestError(RuntimeError):
    """Mirrors tensorrt_llm/executor/utils.py RequestError: a request the executor failed."""
