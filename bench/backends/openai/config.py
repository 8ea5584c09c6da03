"""The openai backend's declaration: options of a served model and the checks a cell must pass."""

from __future__ import annotations

import math
import re
from urllib.parse import urlsplit

from bench.backends.declaration import BackendConfig, Option
from bench.errors import BenchInputError

AUTO = ("auto", True, False)


PRECISION_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")


class OpenAIConfig(BackendConfig):
    name = "openai"
    computes_on_device = False  # the server computes, wherever it runs
    precisions = ("server",)  # canonical label; any label matching PRECISION_RE is accepted
    tolerate_request_errors = True
    paces_requests = True  # arrivals (request_rate, burstiness) and concurrency are what it measures under
    local_model = False  # `model` labels the served model; the harness never loads it
    options = {
        "base_url": Option("http://127.0.0.1:8000", kind=str, help="server address scheme://host:port (a trailing /v1 is dropped)"),
        "endpoint": Option("completions", ("completions", "chat"), help="/v1/completions or /v1/chat/completions"),
        "model_name": Option("", kind=str, help="model name sent in requests; '' = the first one GET /v1/models lists"),
        "prompt": Option("auto", ("auto", "token_ids", "text"), in_build_key=False,
                         help="token ids (completions only) or decoded text; auto: ids for completions when the server "
                              "takes them, else text"),
        "tokenizer": Option("qwen-7b-chat", kind=str, in_build_key=False,
                            help="the workload's tokenizer: decodes text prompts, counts output tokens without usage"),
        "request_rate": Option("inf", kind=(int, float, str), in_build_key=False, infinite_ok=True,
                               help="mean requests/s of generated arrivals, or 'inf' (all at once / the workload's arrivals)"),
        "burstiness": Option(1.0, kind=(int, float), in_build_key=False, help="gamma shape of the gaps; 1 = Poisson"),
        "seed": Option(0, kind=int, in_build_key=False, help="seed of generated arrivals"),
        "max_concurrency": Option("batch", kind=(int, str), in_build_key=False,
                                  help="requests in flight at most: 'batch' (the cell's max_batch_size), 'none' or N"),
        "timeout_s": Option(600.0, kind=(int, float), in_build_key=False, help="per request, send to end of stream"),
        "ignore_eos": Option("auto", AUTO, in_build_key=False,
                             help="send ignore_eos (vLLM/SGLang/TensorRT-LLM extension); auto: when the server accepts it"),
        "min_tokens": Option("auto", AUTO, in_build_key=False,
                             help="send min_tokens = max_tokens (vLLM/TensorRT-LLM extension); auto: when the server accepts it"),
        "include_usage": Option("auto", AUTO, in_build_key=False,
                                help="ask for the server's token counts (stream_options); auto: when the server accepts it"),
        "count_tokens": Option("auto", ("auto", "usage"), in_build_key=False,
                               help="output tokens: the server's usage, else (auto) the streamed text re-tokenized with "
                                    "the workload's tokenizer; 'usage': a pass without the server's counts fails"),
        "max_failed_fraction": Option(0.05, kind=(int, float), in_build_key=False,
                                      help="a pass with more failed requests than this fraction is an error"),
        "strict_output_len": Option("auto", AUTO, in_build_key=False,
                                    help="an output length != max_tokens makes the pass an error; auto: when the server "
                                         "was asked for exact lengths and counted them itself"),
        "slo_ttft_ms": Option(0.0, kind=(int, float), in_build_key=False, help="goodput SLO on TTFT (0 = none)"),
        "slo_tpot_ms": Option(0.0, kind=(int, float), in_build_key=False, help="goodput SLO on TPOT (0 = none)"),
        "slo_e2el_ms": Option(0.0, kind=(int, float), in_build_key=False, help="goodput SLO on E2E latency (0 = none)"),
        "server_gpus": Option(1, kind=int, in_build_key=False, minimum=1, keeps_ids_at_default=True,
                              help="GPUs the server runs the model on (tensor x pipeline x data parallel), which the "
                                   "client cannot see: output tok/s per GPU divides by it"),
        "api_key_env": Option("OPENAI_API_KEY", kind=str, in_build_key=False,
                              help="environment variable holding a bearer token, sent when set"),
    }

    @classmethod
    def normalize_options(cls, given: dict) -> dict:
        """Return the full, checked option dict; BenchInputError naming the bad option."""
        opts = super().normalize_options(given)
        opts["base_url"] = normalize_base_url(opts["base_url"])
        rate = opts["request_rate"]
        if isinstance(rate, float) and math.isinf(rate) and rate > 0:
            opts["request_rate"] = rate = "inf"  # JSON has no infinity: one spelling in cell ids
        if isinstance(rate, str) and rate != "inf" or isinstance(rate, bool) or (not isinstance(rate, str) and not rate > 0):
            raise BenchInputError(f"option request_rate={rate!r} for backend 'openai' must be a positive number or 'inf'")
        conc = opts["max_concurrency"]
        if (isinstance(conc, str) and conc not in ("batch", "none")) or isinstance(conc, bool) or (isinstance(conc, int) and conc <= 0):
            raise BenchInputError(f"option max_concurrency={conc!r} for backend 'openai' must be 'batch', 'none' or a positive integer")
        check_api_key_env(opts["api_key_env"])
        for key in ("burstiness", "timeout_s"):
            if not opts[key] > 0:
                raise BenchInputError(f"option {key}={opts[key]!r} for backend 'openai' must be positive")
        if not 0 <= opts["max_failed_fraction"] <= 1:
            raise BenchInputError(f"option max_failed_fraction={opts['max_failed_fraction']!r} must be between 0 and 1")
        for key in ("slo_ttft_ms", "slo_tpot_ms", "slo_e2el_ms"):
            if opts[key] < 0:
                raise BenchInputError(f"option {key}={opts[key]!r} must be >= 0 (0 = no SLO)")
        return opts

    @classmethod
    def validate(cls, cell) -> None:
        """Raise BenchInputError for a precision label or prompt setting this backend cannot use."""
        if not isinstance(cell.precision, str) or not PRECISION_RE.match(cell.precision):
            raise BenchInputError(
                f"precision {cell.precision!r} for backend 'openai' must be a label of letters, digits, '.', '_', '-' "
                "(the server decides the precision; e.g. 'server', 'bf16', 'fp8')"
            )
        opts = cell.options_dict
        if opts.get("endpoint") == "chat" and opts.get("prompt") == "token_ids":
            raise BenchInputError("backend 'openai': the chat endpoint takes text; set prompt = 'text' (or 'auto')")
        if opts.get("tokenizer") != cell.workload.tokenizer:
            # It decodes text prompts and counts output tokens when a server sends no usage.
            raise BenchInputError(
                f"backend 'openai': option tokenizer={opts.get('tokenizer')!r} is not the tokenizer of workload "
                f"{cell.workload.name!r} ({cell.workload.tokenizer!r}), which text prompts and output token counts "
                f"need; set tokenizer = {cell.workload.tokenizer!r}"
            )


def normalize_base_url(url: str) -> str:
    """Return scheme://host[:port][/prefix] without a trailing '/' or '/v1'; BenchInputError if malformed."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise BenchInputError(
            f"option base_url={url!r} for backend 'openai' is not a server address: use http://HOST:PORT "
            "(for example http://127.0.0.1:8000 for `vllm serve`)"
        )
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise BenchInputError(f"option base_url={url!r} for backend 'openai' has a bad port: {exc}") from None
    out = url.rstrip("/")
    return out[: -len("/v1")] if out.endswith("/v1") else out


API_KEY_ENV_DEFAULT = "OPENAI_API_KEY"
API_KEY_ENV_ALLOW = "BENCH_ALLOW_API_KEY_ENV"  # the user's own list of further variables a matrix may name


def check_api_key_env(name: str) -> None:
    """Refuse a matrix that names an environment variable other than OPENAI_API_KEY as its bearer token, unless the
    user (not the matrix) allowed it in BENCH_ALLOW_API_KEY_ENV: a matrix from elsewhere could otherwise send any
    secret of this environment (AWS_SECRET_ACCESS_KEY, HF_TOKEN, ...) to a server of its choosing."""
    import os

    allowed = {API_KEY_ENV_DEFAULT} | {n.strip() for n in os.environ.get(API_KEY_ENV_ALLOW, "").split(",") if n.strip()}
    if name not in allowed:
        raise BenchInputError(
            f"option api_key_env={name!r} for backend 'openai' would send that environment variable's value to the "
            f"server as its bearer token; only {API_KEY_ENV_DEFAULT} is sent unless you allow another: "
            f"export {API_KEY_ENV_ALLOW}={name} if you trust this matrix and its base_url"
        )
