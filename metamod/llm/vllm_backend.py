"""Generation with vLLM's offline engine (``vllm.LLM``): one ``LLM.chat`` call per batch.

Written against vllm==0.31.0 (``LLM.__init__`` forwards engine options such as ``max_model_len``,
``enable_lora`` and ``max_lora_rank`` through ``**kwargs`` to ``EngineArgs``; ``LLM.chat`` takes a list of
conversations, one ``SamplingParams`` for all, an optional ``LoRARequest`` and ``chat_template_kwargs``, a dict
passed to the chat template, e.g. ``{"enable_thinking": False}`` for Qwen3: ``vllm/entrypoints/llm.py``,
``LLM.chat(..., chat_template_kwargs: dict[str, Any] | None = None, ...)``). vLLM schedules the whole batch itself
(continuous batching), so no micro-batching happens here.

Log-probs (``SamplingConfig.logprobs``): ``SamplingParams(logprobs=0)``, which in vllm 0.31.0 returns the sampled
token's log-prob only (``Sampler.gather_logprobs`` takes the top 0 plus the sampled token), one
``{token_id: Logprob}`` dict per entry of ``CompletionOutput.token_ids``. The values follow the engine's
``logprobs_mode``, whose default ``raw_logprobs`` (``vllm/config/model.py``) is ``log_softmax`` of the model's logits
before penalties, temperature, top-k and top-p: the same distribution the hf backend reports.

Top-k log-probs (``SamplingConfig.top_logprobs = k``): ``SamplingParams(logprobs=k)``; each position's dict then
holds the ``k`` most likely tokens plus the sampled one, each a ``vllm.logprobs.Logprob(logprob, rank,
decoded_token)`` (``decoded_token`` is filled because ``SamplingParams.detokenize`` defaults to ``True``). The
entries of rank ``<= k`` become ``Generation.top_logprobs`` (decoded text -> log-prob) and the sampled token's
``decoded_token`` its entry of ``Generation.tokens`` (:func:`completion_top_logprobs`).

This module imports without vllm; constructing :class:`VLLMGenerator` without it raises ``ImportError`` with the
install command.

>>> from metamod.llm.base import SamplingConfig
>>> sampling_kwargs(SamplingConfig(temperature=0, max_tokens=8, stop=["</answer>"]))["stop"]
['</answer>']
>>> sampling_kwargs(SamplingConfig(logprobs=True))["logprobs"]
0
>>> sampling_kwargs(SamplingConfig(top_logprobs=5))["logprobs"]
5
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from metamod.llm.adapter_files import read_adapter_config
from metamod.llm.base import Conversation, Generation, SamplingConfig
from metamod.llm.hf import check_adapter_folder, looks_local

logger = logging.getLogger(__name__)

INSTALL_HINT = "vLLM is not installed: `pip install 'meta-moderator[vllm]'` (vllm==0.31.0, needs a CUDA GPU)"

# Settings SamplingConfig does not control; taken from the model's generation_config (as the hf backend does).
# vllm 0.31.0 LoRAConfig.max_lora_rank is a Literal of these values.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
_MODEL_DEFAULT_KEYS = ("top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")


def require_vllm() -> None:
    """Raise ``ImportError`` with the install command when vllm is missing."""
    from metamod.llm import is_vllm_available

    if not is_vllm_available():
        raise ImportError(INSTALL_HINT)


def sampling_kwargs(sampling: SamplingConfig) -> dict[str, Any]:
    """``SamplingParams`` keyword arguments for a :class:`SamplingConfig` (temperature 0 is greedy in vLLM).

    Args:
        sampling: the decoding settings.

    Returns:
        A dict of ``n``, ``temperature``, ``top_p``, ``max_tokens``, ``seed`` and ``stop``, plus ``logprobs=0`` (the
        sampled token's log-prob only) when ``sampling.logprobs`` is set, ``logprobs=k`` when
        ``sampling.top_logprobs = k > 0``.
    """
    kwargs: dict[str, Any] = {
        "n": sampling.n,
        "temperature": sampling.temperature,
        "top_p": 1.0 if sampling.temperature == 0 else sampling.top_p,
        "max_tokens": sampling.max_tokens,
        "seed": sampling.seed,
        "stop": list(sampling.stop) if sampling.stop else None,
    }
    if sampling.logprobs or sampling.top_logprobs:
        kwargs["logprobs"] = int(sampling.top_logprobs)
    return kwargs


def completion_top_logprobs(completion: Any, k: int, backend: str = "vllm") -> tuple[list[str], list[dict[str, float]]]:
    """The decoded text of each token of a ``CompletionOutput`` and, per position, its top-``k`` alternatives.

    Args:
        completion: a ``vllm.outputs.CompletionOutput`` generated with ``SamplingParams(logprobs=k)``.
        k: the number of alternatives asked for (entries of ``rank > k``, the sampled token when it is not among
            the top ``k``, are left out of the alternatives).
        backend: the generator's name, for the error message.

    Returns:
        ``(tokens, top_logprobs)``, one entry per entry of ``completion.token_ids``; alternatives that decode to the
        same text have their probabilities added.

    Raises:
        RuntimeError: the output carries no log-probs, or not one position per token.

    >>> from types import SimpleNamespace as NS
    >>> out = NS(token_ids=[5, 7], logprobs=[
    ...     {5: NS(logprob=-0.1, rank=1, decoded_token="STOP"), 6: NS(logprob=-2.5, rank=2, decoded_token="CON")},
    ...     {7: NS(logprob=-3.0, rank=9, decoded_token=" <"), 3: NS(logprob=-0.2, rank=1, decoded_token="<")}])
    >>> completion_top_logprobs(out, 2)
    (['STOP', ' <'], [{'STOP': -0.1, 'CON': -2.5}, {'<': -0.2}])
    """
    import math

    token_ids = list(completion.token_ids)
    positions = completion.logprobs
    if positions is None or len(positions) != len(token_ids):
        got = "none" if positions is None else f"{len(positions)} positions"
        raise RuntimeError(f"{backend}: vLLM returned {got} of log-probs for {len(token_ids)} completion tokens")
    tokens: list[str] = []
    top: list[dict[str, float]] = []
    for i, (token, position) in enumerate(zip(token_ids, positions, strict=True)):
        if not position or token not in position:
            raise RuntimeError(f"{backend}: vLLM returned no log-prob for completion token {i} (id {token})")
        tokens.append(position[token].decoded_token or "")
        step: dict[str, float] = {}
        for entry in position.values():
            if entry.rank is not None and entry.rank > k:
                continue
            text, value = entry.decoded_token or "", float(entry.logprob)
            step[text] = value if text not in step else math.log(math.exp(step[text]) + math.exp(value))
        top.append(step)
    return tokens, top


def completion_logprobs(completion: Any, backend: str = "vllm") -> list[float]:
    """The log-prob of each token of a ``CompletionOutput`` (``logprobs[i][token_ids[i]].logprob``).

    Args:
        completion: a ``vllm.outputs.CompletionOutput`` generated with ``SamplingParams(logprobs=0)`` or more.
        backend: the generator's name, for the error message.

    Returns:
        One float per entry of ``completion.token_ids``.

    Raises:
        RuntimeError: the output carries no log-probs, or not one per token.

    >>> from types import SimpleNamespace as NS
    >>> out = NS(token_ids=[5, 7], logprobs=[{5: NS(logprob=-0.5)}, {7: NS(logprob=-1.0), 3: NS(logprob=-0.2)}])
    >>> completion_logprobs(out)
    [-0.5, -1.0]
    """
    token_ids = list(completion.token_ids)
    positions = completion.logprobs
    if positions is None or len(positions) != len(token_ids):
        got = "none" if positions is None else f"{len(positions)} positions"
        raise RuntimeError(f"{backend}: vLLM returned {got} of log-probs for {len(token_ids)} completion tokens")
    values = []
    for i, (token, position) in enumerate(zip(token_ids, positions, strict=True)):
        if not position or token not in position:
            raise RuntimeError(f"{backend}: vLLM returned no log-prob for completion token {i} (id {token})")
        values.append(float(position[token].logprob))
    return values


class VLLMGenerator:
    """A :class:`~metamod.llm.base.Generator` over ``vllm.LLM`` (optionally serving one LoRA adapter).

    Args:
        model: local folder or Hub id.
        adapter: optional PEFT LoRA adapter folder, sent with every request as a ``LoRARequest``.
        tensor_parallel_size: GPUs to shard over.
        dtype: ``auto``, ``bfloat16``, ``float16`` or ``float32``.
        gpu_memory_utilization: fraction of GPU memory for weights + KV cache.
        max_model_len: context length cap (``None``: the model's).
        enable_lora: enable LoRA support (forced on when ``adapter`` is set).
        max_lora_rank: largest LoRA rank the engine reserves room for.
        seed: engine seed.
        trust_remote_code: allow model code from the Hub.
        name: identifier used in traces.
        chat_template_kwargs: extra keyword arguments of the chat template (``LLM.chat`` and ``count_tokens``).
        **engine_kwargs: any other ``vllm.LLM`` / ``EngineArgs`` option (e.g. ``enforce_eager=True``).
    """

    def __init__(
        self,
        model: str,
        *,
        adapter: str | None = None,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        enable_lora: bool = False,
        max_lora_rank: int = 16,
        seed: int = 0,
        trust_remote_code: bool = False,
        name: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        **engine_kwargs: Any,
    ) -> None:
        if max_lora_rank not in LORA_RANKS:
            raise ValueError(f"max_lora_rank must be one of {list(LORA_RANKS)} (vLLM's choices), got {max_lora_rank}")
        require_vllm()
        if looks_local(model) and not Path(model).expanduser().is_dir():
            raise FileNotFoundError(f"model folder {model!r} does not exist; pass an existing folder or a Hub id")
        if adapter:
            check_adapter_folder(adapter)
            enable_lora = True
            rank = read_adapter_config(Path(adapter).expanduser()).get("r") if looks_local(adapter) else None
            if rank is not None and rank > max_lora_rank:
                raise ValueError(
                    f"adapter {adapter!r} has LoRA rank {rank} > max_lora_rank={max_lora_rank}; "
                    f"set max_lora_rank >= {rank}"
                )
        from vllm import LLM

        mode = engine_kwargs.get("logprobs_mode", "raw_logprobs")
        if mode != "raw_logprobs":
            logger.warning(
                "logprobs_mode=%r: token_logprobs will not be the raw model log-probs that the hf backend returns "
                "(perplexities are then not comparable across backends or sampling settings)",
                mode,
            )
        kwargs: dict[str, Any] = dict(engine_kwargs)
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if enable_lora:
            kwargs.update(enable_lora=True, max_lora_rank=max_lora_rank, max_loras=1)
        logger.info("Starting vLLM engine for %s (tp=%d, dtype=%s)", model, tensor_parallel_size, dtype)
        self.llm = LLM(
            model=model,
            tensor_parallel_size=tensor_parallel_size,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            trust_remote_code=trust_remote_code,
            **kwargs,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.chat_template_kwargs: dict[str, Any] = dict(chat_template_kwargs or {})
        self.name = name or (f"{model}+{adapter}" if adapter else model)
        self.context_length: int | None = self.llm.model_config.max_model_len
        self._lora_request = None
        if adapter:
            from vllm.lora.request import LoRARequest

            self._lora_request = LoRARequest(
                lora_name=Path(adapter).name or "adapter", lora_int_id=1, lora_path=adapter
            )
        defaults = self.llm.get_default_sampling_params()
        self._model_defaults = {k: getattr(defaults, k) for k in _MODEL_DEFAULT_KEYS if hasattr(defaults, k)}

    def count_tokens(self, conversation: Conversation) -> int:
        """Prompt tokens of ``conversation`` after the chat template (with the assistant generation prompt)."""
        text = self.tokenizer.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
        )
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def chat(self, conversations: list[Conversation], sampling: SamplingConfig) -> list[Generation]:
        """Generate ``sampling.n`` completions per conversation with ONE ``LLM.chat`` call (conversation-major).

        Args:
            conversations: chat message lists.
            sampling: decoding settings.

        Returns:
            ``len(conversations) * sampling.n`` generations with token counts from vLLM's outputs (and, with
            ``sampling.logprobs``, one token log-prob per entry of ``CompletionOutput.token_ids``).
        """
        if not conversations:
            return []
        from vllm import SamplingParams

        params = SamplingParams(**{**self._model_defaults, **sampling_kwargs(sampling)})
        outputs = self.llm.chat(
            [list(c) for c in conversations],
            sampling_params=params,
            use_tqdm=False,
            lora_request=self._lora_request,
            add_generation_prompt=True,
            chat_template_kwargs=self.chat_template_kwargs or None,
        )
        if len(outputs) != len(conversations):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(conversations)} conversations")
        generations: list[Generation] = []
        for request in outputs:
            prompt_tokens = len(request.prompt_token_ids or [])
            for completion in sorted(request.outputs, key=lambda o: o.index):
                generation = Generation(
                    text=completion.text,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=len(completion.token_ids),
                    finish_reason=completion.finish_reason,
                    token_logprobs=completion_logprobs(completion, self.name) if sampling.logprobs else None,
                )
                if sampling.top_logprobs:
                    generation.tokens, generation.top_logprobs = completion_top_logprobs(
                        completion, sampling.top_logprobs, self.name
                    )
                generations.append(generation)
        return generations
