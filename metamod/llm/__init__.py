"""Generation backends behind one protocol (:class:`~metamod.llm.base.Generator`).

``BACKENDS`` maps a backend name to the dotted path of its class, so importing this package does not import
torch, transformers or vllm; :func:`build_generator` imports only the backend it builds.

>>> sorted(BACKENDS)
['hf', 'llamacpp', 'openai', 'vllm']
>>> BackendConfig(backend="hf", model="runs/tiny").backend
'hf'
>>> try:
...     build_generator(BackendConfig(backend="nope", model="x"))
... except KeyError as err:
...     print("Valid names: hf, llamacpp, openai, vllm" in str(err))
True
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, field

from metamod.llm.base import Conversation, Generation, Generator, Message, SamplingConfig
from metamod.registry import import_dotted, resolve

logger = logging.getLogger(__name__)

__all__ = [
    "BACKENDS",
    "BackendConfig",
    "Conversation",
    "Generation",
    "Generator",
    "Message",
    "SamplingConfig",
    "build_generator",
    "is_vllm_available",
]

# name -> "module:Class" (imported lazily by build_generator)
BACKENDS: dict[str, str] = {
    "hf": "metamod.llm.hf:HFGenerator",
    "vllm": "metamod.llm.vllm_backend:VLLMGenerator",
    "openai": "metamod.llm.openai_backend:OpenAIGenerator",
    "llamacpp": "metamod.llm.llamacpp.backend:LlamaCppGenerator",
}

#: the BackendConfig fields each of those backends takes as keyword arguments (besides the model)
BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {
    "hf": (
        "adapter",
        "device",
        "dtype",
        "batch_size",
        "trust_remote_code",
        "decode",
        "num_threads",
        "chat_template_kwargs",
    ),
    "vllm": (
        "adapter",
        "tensor_parallel_size",
        "dtype",
        "gpu_memory_utilization",
        "max_model_len",
        "enable_lora",
        "max_lora_rank",
        "seed",
        "trust_remote_code",
        "chat_template_kwargs",
    ),
    "openai": (
        "base_url",
        "api_key_env",
        "max_concurrency",
        "max_retries",
        "timeout",
        "chat_template_kwargs",
        "extra_body",
    ),
    "llamacpp": ("adapter", "num_threads", "max_model_len", "max_concurrency", "max_retries", "timeout"),
}

#: arguments of ``apply_chat_template`` / ``LLM.chat`` the backends set themselves (not allowed in chat_template_kwargs)
RESERVED_TEMPLATE_KWARGS = ("conversation", "messages", "tokenize", "add_generation_prompt", "continue_final_message")


def is_vllm_available() -> bool:
    """Whether the ``vllm`` package can be imported (without importing it).

    >>> isinstance(is_vllm_available(), bool)
    True
    """
    return importlib.util.find_spec("vllm") is not None


@dataclass
class BackendConfig:
    """Which generation backend to build and its options (options of other backends are ignored)."""

    backend: str = field(default="hf", metadata={"help": f"Generation backend: one of {', '.join(sorted(BACKENDS))}."})
    model: str = field(
        default="",
        metadata={
            "help": "Model: local folder or Hub id (hf, vllm), the served model name (openai), or an embedded alias / "
            ".gguf file (llamacpp: served by its own llama.cpp server)."
        },
    )
    adapter: str | None = field(
        default=None,
        metadata={"help": "Optional LoRA adapter folder (hf: PeftModel; vllm: LoRARequest, needs enable_lora)."},
    )
    # hf
    device: str = field(default="auto", metadata={"help": "hf: device, auto|cpu|cuda (auto picks cuda if present)."})
    dtype: str = field(
        default="auto",
        metadata={"help": "hf/vllm: weights dtype, auto|bfloat16|float16|float32 (hf auto: bf16 on GPU, fp32 on CPU)."},
    )
    batch_size: int = field(default=8, metadata={"help": "hf: conversations per batched generate call."})
    decode: str = field(
        default="auto",
        metadata={
            "help": "hf: decoding loop: pruned (finished rows leave the batch; fast for ragged lengths), generate "
            "(model.generate), or auto (pruned unless the model's generation config needs generate)."
        },
    )
    num_threads: int | None = field(
        default=None,
        metadata={
            "help": "hf: torch CPU threads (None: torch's default / OMP_NUM_THREADS); llamacpp: server threads (None: 2)."
        },
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "hf/vllm: allow model code from the Hub."})
    chat_template_kwargs: dict = field(
        default_factory=dict,
        metadata={
            "help": "hf/vllm/openai: extra keyword arguments of the chat template, e.g. {enable_thinking: false} for "
            "Qwen3 (hf: apply_chat_template; vllm: LLM.chat; openai: the request's chat_template_kwargs)."
        },
    )
    # vllm
    tensor_parallel_size: int = field(default=1, metadata={"help": "vllm: number of GPUs to shard the model over."})
    gpu_memory_utilization: float = field(
        default=0.9, metadata={"help": "vllm: fraction of GPU memory vLLM may use (0-1]."}
    )
    max_model_len: int | None = field(
        default=None,
        metadata={
            "help": "Maximum context length: vllm's engine, and for every backend the prompt budget (a prompt must "
            "leave room for max_tokens; metamod.llm.budget). None: the model's own (openai: unknown, not checked; llamacpp: the server's n_ctx, 8192)."
        },
    )
    generation_cap: int | None = field(
        default=None,
        metadata={
            "help": "Generate at most this many tokens per call whatever max_tokens says; the prompt budget still "
            "reserves max_tokens (the CPU shape run of a GPU config: real prompt budgets, short generations)."
        },
    )
    prompt_log: str | None = field(
        default=None,
        metadata={"help": "Append every conversation sent to this model to this JSONL file (an audit of prompts)."},
    )
    token_estimate: bool = field(
        default=False,
        metadata={
            "help": "Count prompt tokens for the budget with a conservative estimate (UTF-8 bytes / 3) instead of "
            "the model's tokenizer: for runs whose tokenizer is not the real model's (the CPU shape run)."
        },
    )
    hf_overrides: dict = field(
        default_factory=dict,
        metadata={
            "help": "vllm: model-config fields to override (vLLM's hf_overrides), e.g. a YaRN rope for a context past "
            "the model's native one: {max_position_embeddings: 131072, rope_parameters: {rope_type: yarn, factor: "
            "4.0, original_max_position_embeddings: 32768, rope_theta: 1000000.0}} for Qwen3."
        },
    )
    enable_lora: bool = field(
        default=False, metadata={"help": "vllm: enable LoRA adapters (set automatically with adapter)."}
    )
    max_lora_rank: int = field(default=16, metadata={"help": "vllm: largest LoRA rank to support."})
    seed: int = field(default=0, metadata={"help": "vllm: engine seed."})
    # openai
    base_url: str = field(
        default="http://localhost:8000/v1",
        metadata={"help": "openai: server base URL up to /v1 (e.g. the address of `vllm serve`)."},
    )
    api_key_env: str = field(
        default="OPENAI_API_KEY",
        metadata={
            "help": "openai: name of the environment variable holding the API key (may be unset for local servers)."
        },
    )
    max_concurrency: int = field(default=16, metadata={"help": "openai, llamacpp: maximum requests in flight."})
    max_retries: int = field(
        default=5, metadata={"help": "openai, llamacpp: retries on 429/5xx/timeouts/connection errors."}
    )
    timeout: float = field(default=120.0, metadata={"help": "openai, llamacpp: per-request timeout in seconds."})
    extra_body: dict = field(
        default_factory=dict,
        metadata={
            "help": "openai: fields merged into every chat request body (server-specific options), e.g. {top_k: 0, "
            "min_p: 0.0, repeat_penalty: 1.0} for llama-cpp-python's server (its defaults are 40, 0.05, 1.1)."
        },
    )

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.generation_cap is not None and self.generation_cap < 1:
            raise ValueError(f"generation_cap must be >= 1 or None, got {self.generation_cap}")
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout}")
        if self.max_lora_rank not in (1, 8, 16, 32, 64, 128, 256, 320, 512):
            raise ValueError(
                f"max_lora_rank must be one of 1, 8, 16, 32, 64, 128, 256, 320, 512 (vLLM's choices), "
                f"got {self.max_lora_rank}"
            )
        if self.decode not in ("auto", "pruned", "generate"):
            raise ValueError(f"decode must be one of auto, pruned, generate; got {self.decode!r}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {self.num_threads}")
        if self.dtype not in ("auto", "bfloat16", "float16", "float32"):
            raise ValueError(f"dtype must be one of auto, bfloat16, float16, float32; got {self.dtype!r}")
        if not isinstance(self.hf_overrides, dict):
            raise ValueError(f"hf_overrides must be a mapping of model-config fields, got {self.hf_overrides!r}")
        if not isinstance(self.extra_body, dict) or not all(isinstance(key, str) for key in self.extra_body):
            raise ValueError(f"extra_body must be a mapping of request fields to values, got {self.extra_body!r}")
        if not isinstance(self.chat_template_kwargs, dict) or not all(
            isinstance(key, str) for key in self.chat_template_kwargs
        ):
            raise ValueError(
                "chat_template_kwargs must be a mapping of template variable names to values, e.g. "
                f"{{enable_thinking: false}}; got {self.chat_template_kwargs!r}"
            )
        reserved = sorted(set(self.chat_template_kwargs) & set(RESERVED_TEMPLATE_KWARGS))
        if reserved:
            raise ValueError(
                f"chat_template_kwargs must not set {reserved}: the backends set "
                f"{', '.join(RESERVED_TEMPLATE_KWARGS)} themselves; expected template variables such as enable_thinking"
            )


def build_generator(config: BackendConfig) -> Generator:
    """Build the backend named by ``config.backend`` with the options that backend uses.

    Args:
        config: the backend configuration.

    Returns:
        A :class:`~metamod.llm.base.Generator`: the backend inside a :class:`~metamod.llm.budget.BudgetedGenerator`
        (every prompt is kept inside the context, ``max_model_len`` or the model's own).

    Raises:
        KeyError: unknown backend (the message lists the valid ones).
        ValueError: no model given.
    """
    from metamod.llm.budget import BudgetedGenerator

    generator = _build_backend(config)
    return BudgetedGenerator(
        generator,
        context_length=config.max_model_len,
        token_estimate=config.token_estimate,
        generation_cap=config.generation_cap,
        prompt_log=config.prompt_log,
    )


def _build_backend(config: BackendConfig) -> Generator:
    """The backend itself (:func:`build_generator` wraps it in the prompt budget)."""
    target = resolve(BACKENDS, config.backend, what="generation backend")
    cls = import_dotted(target) if isinstance(target, str) else target
    if not config.model:
        raise ValueError(f"backend {config.backend!r} needs a model: set `model` to a folder, Hub id or served name")
    if config.backend not in BACKEND_OPTIONS:
        # A dotted-path backend defined outside metamod receives the whole config.
        return cls(config)
    model, options = config.model, {name: getattr(config, name) for name in BACKEND_OPTIONS[config.backend]}
    if config.backend == "vllm":
        from metamod.llm.embedded import resolve_model_ref

        model = resolve_model_ref(model)
        options["enable_lora"] = config.enable_lora or bool(config.adapter)
        if config.hf_overrides:
            options["hf_overrides"] = dict(config.hf_overrides)
    return cls(model, **options)
