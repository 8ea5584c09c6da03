from .result import CompletionOutput, GenerationResult
from .utils import RequestError

__all__ = ["CompletionOutput", "GenerationResult", "RequestError"]
