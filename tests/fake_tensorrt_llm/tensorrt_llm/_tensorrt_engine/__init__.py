from tensorrt_llm._fake import EngineLLM as LLM

__all__ = ["LLM"]
