"""Generation with plain ``transformers``: left-padded batched ``generate`` in micro-batches.

This backend runs anywhere torch runs (the CPU tier uses it with the tiny model). Conversations are sorted by
prompt length before batching so that each micro-batch pads as little as possible; results come back in the
caller's order, ``sampling.n`` per conversation (conversation-major).

With ``sampling.logprobs`` each Generation carries ``token_logprobs``: the log-probability of each completion token
under the model's raw distribution (``log_softmax`` of the logits before temperature, top-k, top-p or any logits
processor; vLLM's default ``logprobs_mode="raw_logprobs"``), one per token counted in ``completion_tokens``
(eos included, padding and tokens after a stop string excluded), so ``len(token_logprobs) == completion_tokens``. With ``sampling.top_logprobs = k`` each Generation also carries
``tokens`` (each completion token decoded on its own) and ``top_logprobs`` (per position, the ``k`` most likely
tokens' decoded texts -> raw log-prob, from the same logits; ids that decode to the same text have their
probabilities added), aligned the same way; what is generated does not change.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from metamod.llm.base import Conversation, Generation, SamplingConfig

logger = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "bfloat16", "float16", "float32")
#: decoding loops: ``pruned`` drops finished rows (metamod.llm.hf_decode), ``generate`` is ``model.generate``;
#: ``auto`` is ``pruned`` unless the model's generation config asks for logits processors it does not implement
DECODERS = ("auto", "pruned", "generate")
#: generation-config settings the pruned loop does not implement, with their neutral values
_UNSUPPORTED = {
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "min_new_tokens": None,
    "min_length": 0,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "min_p": None,
}


def looks_local(path: str) -> bool:
    """Whether ``path`` is meant as a local folder rather than a Hub id like ``org/name``.

    >>> looks_local("./ckpt"), looks_local("/abs/model"), looks_local("Qwen/Qwen3-0.6B"), looks_local("a/b/c")
    (True, True, False, True)
    """
    return (
        Path(path).exists()
        or path.startswith((".", "/", "~"))
        or path.count("/") > 1
        or path.endswith("/")
        or (os.sep != "/" and os.sep in path)
    )


def resolve_device(device: str) -> str:
    """Map ``auto`` to ``cuda`` when available, else ``cpu``; reject unknown names.

    >>> resolve_device("cpu")
    'cpu'
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.split(":")[0] not in ("cpu", "cuda"):
        raise ValueError(f"device must be one of {list(DEVICES)} (or cuda:N), got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available here; use device=cpu or auto")
    return device


def resolve_dtype(dtype: str, device: str):
    """Map a dtype name to a torch dtype; ``auto`` is bfloat16 on a bf16-capable GPU, else float32.

    >>> resolve_dtype("auto", "cpu")
    torch.float32
    """
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    if dtype == "auto":
        if device.startswith("cuda") and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return getattr(torch, dtype)


def check_adapter_folder(adapter: str) -> None:
    """A local adapter reference must be an existing folder holding ``adapter_config.json`` (checked by the hf and
    vLLM backends before loading; a Hub id is left to the loader)."""
    if looks_local(adapter):
        folder = Path(adapter).expanduser()
        if not folder.is_dir():
            raise FileNotFoundError(f"adapter folder {adapter!r} does not exist")
        if not (folder / "adapter_config.json").is_file():
            raise FileNotFoundError(
                f"adapter folder {adapter!r} has no adapter_config.json; pass the folder a PEFT adapter was saved "
                "to (e.g. checkpoints/<run>/adapter or a checkpoint-N folder)"
            )


def _step_top(step_logits: Any, k: int) -> list[list[tuple[list[int], list[float]]]]:
    """Per row, per step, the :func:`~metamod.llm.hf_decode.top_alternatives` of ``generate``'s raw logits."""
    from metamod.llm.hf_decode import top_alternatives

    per_step = [top_alternatives(logits, k) for logits in step_logits]
    rows = len(per_step[0]) if per_step else 0
    return [[step[row] for step in per_step] for row in range(rows)]


def _step_logprobs(step_logits: Any, new_ids: Any) -> list[list[float]]:
    """Per-row log-probs of ``new_ids`` (rows x steps) from ``generate``'s raw per-step logits (one per step)."""
    import torch

    from metamod.llm.hf_decode import chosen_logprobs

    if not step_logits:
        return [[] for _ in range(new_ids.shape[0])]
    values = [chosen_logprobs(logits, new_ids[:, step]) for step, logits in enumerate(step_logits)]
    return torch.stack(values, dim=1).tolist()


class HFGenerator:
    """A :class:`~metamod.llm.base.Generator` over a ``transformers`` causal LM (optionally with a LoRA adapter).

    Args:
        model: local folder or Hub id of the base model.
        adapter: optional PEFT adapter folder (or Hub id) loaded on top with ``PeftModel.from_pretrained``.
        device: ``auto``, ``cpu`` or ``cuda`` (``cuda:N``).
        dtype: ``auto``, ``bfloat16``, ``float16`` or ``float32``.
        batch_size: conversations per ``generate`` call (each yields ``n`` sequences).
        trust_remote_code: forwarded to ``from_pretrained``.
        name: identifier used in traces (defaults to the model path, plus the adapter).
        decode: ``auto``, ``pruned`` (finished rows leave the batch) or ``generate`` (``model.generate``).
        num_threads: torch CPU threads to use (``None``: leave torch's setting).
        chat_template_kwargs: extra keyword arguments of every ``apply_chat_template`` call (prompts and token
            counts), e.g. ``{"enable_thinking": False}`` for Qwen3.

    Attributes:
        model: the loaded (possibly PEFT-wrapped) model, in eval mode.
        tokenizer: its tokenizer (left padding).
    """

    def __init__(
        self,
        model: str,
        *,
        adapter: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 8,
        trust_remote_code: bool = False,
        name: str | None = None,
        decode: str = "auto",
        num_threads: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from metamod.llm.embedded import is_embedded, resolve_model_ref

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if decode not in DECODERS:
            raise ValueError(f"decode must be one of {list(DECODERS)}, got {decode!r}")
        if num_threads is not None:
            import torch

            if num_threads < 1:
                raise ValueError(f"num_threads must be >= 1 or None, got {num_threads}")
            torch.set_num_threads(num_threads)
        alias = model if is_embedded(model) else None
        model = resolve_model_ref(model)
        if looks_local(model) and not Path(model).expanduser().is_dir():
            raise FileNotFoundError(
                f"model folder {model!r} does not exist; pass an existing folder (the tiny model is built with "
                "metamod.llm.tiny.ensure_tiny_model) or a Hub id like 'Qwen/Qwen2.5-7B-Instruct'"
            )
        if adapter:
            check_adapter_folder(adapter)
        device = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, device)
        logger.info("Loading %s (%s, %s)%s", model, device, torch_dtype, f" + adapter {adapter}" if adapter else "")
        tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
        lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype, trust_remote_code=trust_remote_code)
        if device == "cpu":
            from metamod.llm.cpu_attention import use_gqa_attention

            use_gqa_attention(lm)  # grouped-query attention without copying the KV cache (same outputs)
        if adapter:
            from peft import PeftModel

            lm = PeftModel.from_pretrained(lm, adapter)
        lm.to(device)
        label = alias or model
        self._setup(
            lm,
            tokenizer,
            name=name or (f"{label}+{adapter}" if adapter else label),
            batch_size=batch_size,
            chat_template_kwargs=chat_template_kwargs,
        )
        self.decode = decode

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "in-memory",
        batch_size: int = 8,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> HFGenerator:
        """Wrap an already-loaded model and tokenizer (e.g. a policy being trained) without reloading.

        Args:
            model: a causal LM (``PreTrainedModel`` or ``PeftModel``).
            tokenizer: its tokenizer (must have a chat template).
            name: identifier used in traces.
            batch_size: conversations per ``generate`` call.
            chat_template_kwargs: extra keyword arguments of the chat template.

        Returns:
            The generator.
        """
        self = cls.__new__(cls)
        self._setup(model, tokenizer, name=name, batch_size=batch_size, chat_template_kwargs=chat_template_kwargs)
        self.decode = "auto"
        return self

    def _setup(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        batch_size: int,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(f"tokenizer of {name!r} has no chat template; use an instruction-tuned model")
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.eval()
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.batch_size = batch_size
        self.chat_template_kwargs: dict[str, Any] = dict(chat_template_kwargs or {})
        config = getattr(model, "config", None)
        self.context_length: int | None = getattr(config, "max_position_embeddings", None)
        self.device = next(model.parameters()).device
        self._stop_strings_ok = True

    # ------------------------------------------------------------------ helpers

    def _prompt_ids(self, conversation: Conversation) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
        )
        # The template already writes any BOS text; do not let the tokenizer add special tokens twice.
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def count_tokens(self, conversation: Conversation) -> int:
        """Prompt tokens of ``conversation`` after the chat template (with the assistant generation prompt)."""
        return len(self._prompt_ids(conversation))

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.tokenizer):
            eos = getattr(source, "eos_token_id", None)
            if isinstance(eos, int):
                ids.add(eos)
            elif eos:
                ids.update(int(e) for e in eos)
        return ids

    def _finish(self, token_ids: list[int], stop: list[str] | None, eos_ids: set[int]) -> tuple[str, int, str]:
        """Cut one generated sequence at eos / the first stop string; return (text, completion tokens, reason)."""
        pad = self.tokenizer.pad_token_id
        reason = "length"
        for i, t in enumerate(token_ids):
            if t in eos_ids:
                token_ids, reason = token_ids[: i + 1], "stop"
                break
        else:
            while token_ids and token_ids[-1] == pad:  # right padding after a stop-string stop
                token_ids = token_ids[:-1]
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        if stop:
            hits = [text.find(s) for s in stop if s and s in text]
            if hits:
                cut = min(hits)
                text, reason = text[:cut], "stop"
                token_ids = token_ids[: self._tokens_through_stop(token_ids, stop)]
        return text, len(token_ids), reason

    def _tokens_through_stop(self, token_ids: list[int], stop: list[str]) -> int:
        """Smallest prefix length whose decoded text contains a stop string (binary search; decode is monotone)."""
        lo, hi = 1, len(token_ids)
        while lo < hi:
            mid = (lo + hi) // 2
            text = self.tokenizer.decode(token_ids[:mid], skip_special_tokens=True)
            if any(s and s in text for s in stop):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _generation_kwargs(self, sampling: SamplingConfig, max_new_tokens: int) -> dict[str, Any]:
        import copy

        config = copy.deepcopy(self.model.generation_config)
        config.max_new_tokens = max_new_tokens
        config.max_length = None
        # Greedy decoding cannot return several sequences in transformers; its n copies are identical anyway.
        config.num_return_sequences = 1 if sampling.temperature == 0 else sampling.n
        config.pad_token_id = self.tokenizer.pad_token_id
        if sampling.temperature == 0:
            config.do_sample = False
            config.temperature, config.top_p, config.top_k = None, None, None
            if sampling.n > 1:
                logger.info("temperature=0 with n=%d: decoding once and repeating the result", sampling.n)
        else:
            config.do_sample = True
            config.temperature = sampling.temperature
            config.top_p = sampling.top_p
            if config.top_k is None:  # transformers would fill in top_k=50; vLLM and servers apply no top-k
                config.top_k = 0
        if sampling.logprobs or sampling.top_logprobs:  # raw logits of every step (before any logits processor)
            config.output_logits = True
            config.return_dict_in_generate = True
        kwargs: dict[str, Any] = {"generation_config": config}
        if sampling.stop and self._stop_strings_ok:
            config.stop_strings = list(sampling.stop)
            kwargs["tokenizer"] = self.tokenizer
        return kwargs

    # ------------------------------------------------------------------ generation

    def chat(self, conversations: list[Conversation], sampling: SamplingConfig) -> list[Generation]:
        """Generate ``sampling.n`` completions per conversation (conversation-major), in micro-batches.

        Args:
            conversations: chat message lists.
            sampling: decoding settings (``temperature=0`` is greedy; ``seed`` makes sampling repeatable;
                ``logprobs`` adds raw-model ``token_logprobs``, one per completion token).

        Returns:
            ``len(conversations) * sampling.n`` generations with prompt/completion token counts.
        """
        import torch

        if not conversations:
            return []
        prompts = [self._prompt_ids(c) for c in conversations]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[list[Generation] | None] = [None] * len(prompts)
        eos_ids = self._eos_ids()
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, enabled=sampling.seed is not None):
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)
            for chunk_index, start in enumerate(range(0, len(order), self.batch_size)):
                chunk = order[start : start + self.batch_size]
                batch = [prompts[i] for i in chunk]
                for idx, gens in zip(chunk, self._generate_batch(batch, sampling, eos_ids, chunk_index), strict=True):
                    results[idx] = gens
        return [g for gens in results for g in gens]  # type: ignore[union-attr]

    def _generate_batch(
        self, prompts: list[list[int]], sampling: SamplingConfig, eos_ids: set[int], chunk_index: int = 0
    ) -> list[list[Generation]]:
        import torch

        longest = max(len(p) for p in prompts)
        max_new = sampling.max_tokens
        if self.context_length and longest + max_new > self.context_length:
            max_new = max(1, self.context_length - longest)
            logger.warning(
                "prompt of %d tokens + max_tokens=%d exceeds the context (%d); generating at most %d tokens",
                longest, sampling.max_tokens, self.context_length, max_new,
            )  # fmt: skip
        if self._use_pruned():
            return self._pruned_batch(prompts, sampling, eos_ids, max_new, chunk_index)
        batch = self.tokenizer.pad({"input_ids": prompts}, padding=True, return_tensors="pt")
        batch = {k: v.to(self.device) for k, v in batch.items()}
        kwargs = self._generation_kwargs(sampling, max_new)
        with torch.inference_mode():
            try:
                out = self.model.generate(**batch, **kwargs)
            except (ValueError, TypeError, AttributeError) as err:
                if "tokenizer" not in kwargs:
                    raise
                # Some tokenizers cannot build the stop-string tables; stop strings are then applied after decoding.
                logger.warning("generate(stop_strings=...) failed (%s); truncating stop strings after decoding", err)
                self._stop_strings_ok = False
                kwargs = self._generation_kwargs(sampling, max_new)
                out = self.model.generate(**batch, **kwargs)
        per_prompt = kwargs["generation_config"].num_return_sequences
        if not (sampling.logprobs or sampling.top_logprobs):
            new_tokens = out[:, batch["input_ids"].shape[1] :].tolist()
            return self._group(prompts, new_tokens, per_prompt, sampling, eos_ids)
        new_ids = out.sequences[:, batch["input_ids"].shape[1] :]
        logprobs = _step_logprobs(out.logits, new_ids) if sampling.logprobs else None
        top = _step_top(out.logits, sampling.top_logprobs) if sampling.top_logprobs else None
        del out
        return self._group(prompts, new_ids.tolist(), per_prompt, sampling, eos_ids, logprobs, top)

    def _group(
        self,
        prompts: list[list[int]],
        rows: list[list[int]],
        per_prompt: int,
        sampling: SamplingConfig,
        eos_ids: set[int],
        row_logprobs: list[list[float]] | None = None,
        row_top: list[list[tuple[list[int], list[float]]]] | None = None,
    ) -> list[list[Generation]]:
        """Generated rows (``per_prompt`` per prompt, prompt-major) -> ``sampling.n`` Generations per prompt.

        ``row_logprobs`` (one list per row, aligned with its ids) is cut to the ``completion_tokens`` of each row;
        so is ``row_top`` (per row, per step, the top-k ids and log-probs), whose ids become texts.
        """
        grouped: list[list[Generation]] = []
        for i, prompt in enumerate(prompts):
            gens = []
            for j in range(sampling.n):
                index = i * per_prompt + (j if per_prompt > 1 else 0)
                text, n_tokens, reason = self._finish(rows[index], sampling.stop, eos_ids)
                logprobs = None if row_logprobs is None else row_logprobs[index][:n_tokens]
                generation = Generation(text, len(prompt), n_tokens, reason, token_logprobs=logprobs)
                if row_top is not None:
                    generation.tokens = [self._token_text(t) for t in rows[index][:n_tokens]]
                    generation.top_logprobs = [self._top_texts(*step) for step in row_top[index][:n_tokens]]
                gens.append(generation)
            grouped.append(gens)
        return grouped

    def _token_text(self, token_id: int) -> str:
        """One token decoded on its own (special tokens such as eos give ``""``)."""
        return self.tokenizer.decode([int(token_id)], skip_special_tokens=True)

    def _top_texts(self, ids: list[int], values: list[float]) -> dict[str, float]:
        """Top-k ids and log-probs -> decoded text -> log-prob (ids decoding to the same text: probabilities added)."""
        import math

        out: dict[str, float] = {}
        for token_id, value in zip(ids, values, strict=True):
            text = self._token_text(token_id)
            out[text] = (
                value if text not in out else max(out[text], value) + math.log1p(math.exp(-abs(out[text] - value)))
            )
        return out

    # ------------------------------------------------------------------ pruned decoding

    def _use_pruned(self) -> bool:
        if self.decode != "auto":
            return self.decode == "pruned"
        config = getattr(self.model, "generation_config", None)
        odd = [k for k, neutral in _UNSUPPORTED.items() if getattr(config, k, neutral) not in (neutral, None)]
        if odd and not getattr(self, "_logged_decoder", False):
            logger.info("%s: generation config sets %s; decoding with model.generate", self.name, odd)
            self._logged_decoder = True
        return not odd

    def _stop_check(self, stop: list[str] | None):
        """A cheap per-token stop-string test: decode only the last few tokens of a row."""
        stop = [s for s in stop or [] if s]
        if not stop:
            return None
        window = max(len(self.tokenizer(s, add_special_tokens=False)["input_ids"]) for s in stop) + 2

        def stopped(ids: list[int]) -> bool:
            text = self.tokenizer.decode(ids[-window:], skip_special_tokens=True)
            return any(s in text for s in stop)

        return stopped

    def _pruned_batch(
        self, prompts: list[list[int]], sampling: SamplingConfig, eos_ids: set[int], max_new: int, chunk_index: int
    ) -> list[list[Generation]]:
        from metamod.llm.hf_decode import decode_rows

        per_prompt = 1 if sampling.temperature == 0 else sampling.n
        rows = [p for p in prompts for _ in range(per_prompt)]
        top_k = getattr(getattr(self.model, "generation_config", None), "top_k", None) or 0
        seed = sampling.seed
        logprobs: list[list[float]] | None = [] if sampling.logprobs else None
        top: list[list[tuple[list[int], list[float]]]] | None = [] if sampling.top_logprobs else None
        generated = decode_rows(
            self.model,
            rows,
            pad_id=self.tokenizer.pad_token_id,
            eos_ids=eos_ids,
            max_new_tokens=max_new,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=top_k if sampling.temperature > 0 else 0,
            # a separate stream per micro-batch, all fixed by the call's seed
            seed=None if seed is None else int(seed) * 100_003 + chunk_index,
            stopped=self._stop_check(sampling.stop),
            logprobs_out=logprobs,
            top_logprobs=sampling.top_logprobs,
            top_out=top,
        )
        return self._group(prompts, generated, per_prompt, sampling, eos_ids, logprobs, top)
