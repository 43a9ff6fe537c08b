"""Generation through any OpenAI-compatible chat server (``vllm serve``, hosted APIs), with plain ``httpx``.

Each conversation is one ``POST {base_url}/chat/completions`` request (``n`` samples per request); at most
``max_concurrency`` requests are in flight. Rate limits (429), server errors (5xx), timeouts and connection errors
are retried with exponential backoff and jitter (honouring ``Retry-After``); other 4xx errors fail at once with
the server's message.

Token counts come from the response's ``usage``. With ``n > 1`` the server reports one completion total for all
choices, so it is split across the choices in proportion to their text length (the sum stays exact), or, with
log-probs, to their number of log-prob entries (exact on vLLM servers, which list one per generated token).
With ``sampling.logprobs`` the request sets ``"logprobs": true`` and each Generation's ``token_logprobs`` is
``choice["logprobs"]["content"][i]["logprob"]``; a server that returns none fails with a :class:`BackendError`.
Such a request also sets ``"top_logprobs": k`` (``sampling.top_logprobs``, at most 20; 0 when only ``logprobs`` is
asked: llama-cpp-python's server returns no log-probs without the field). With ``k > 0`` each Generation's
``tokens`` / ``top_logprobs`` are ``content[i]["token"]`` and ``content[i]["top_logprobs"]`` as token text ->
log-prob (entries with the same text: probabilities added; llama-cpp-python adds the chosen token to the k).
With ``sampling.seed``, conversation ``i`` of a call is sent ``seed + i``: servers seed each request on its own, so
equal conversations (the debaters' round-0 prompts) would otherwise get equal samples.
``count_tokens`` asks the server's ``/tokenize`` endpoint (vLLM has one) and otherwise approximates with
~4 characters per token plus a few tokens per message. Non-empty ``chat_template_kwargs`` (e.g.
``{"enable_thinking": False}`` for Qwen3) go into both request bodies as ``chat_template_kwargs``, which vLLM's
server reads (``ChatCompletionRequest`` and ``TokenizeChatRequest`` in vllm 0.31.0); empty, the field is not sent,
so servers that do not know it see the plain OpenAI request. ``extra_body`` fields are merged into every chat
request (llama-cpp-python's server needs :data:`LLAMACPP_PLAIN_SAMPLING` to sample without its own top-k, min-p and
repeat penalty).

>>> approx_tokens([{"role": "user", "content": "x" * 40}])
16
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import os
import random
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx

from metamod.errors import MetamodError
from metamod.llm.base import Conversation, Generation, SamplingConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")
RETRYABLE_STATUS = frozenset({408, 409, 429})  # plus every 5xx
#: ``extra_body`` that makes llama-cpp-python's server sample as the other backends do (temperature and top-p only):
#: its request defaults are top_k 40, min_p 0.05 and repeat_penalty 1.1 (llama_cpp/server/types.py, 0.3.36)
LLAMACPP_PLAIN_SAMPLING: dict[str, Any] = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}


class BackendError(MetamodError, RuntimeError):
    """A request to a generation server failed (after retries, or with a non-retryable error).

    A :class:`~metamod.errors.MetamodError` (the server or its address is the problem, not the code): the CLI
    reports it as one line (exit 2).
    """


def approx_tokens(conversation: Conversation) -> int:
    """Rough prompt size: ~4 characters per token plus 4 tokens of chat formatting per message, plus 2.

    Args:
        conversation: chat messages.

    Returns:
        The estimated number of prompt tokens.
    """
    return sum(math.ceil(len(m.get("content") or "") / 4) + 4 for m in conversation) + 2


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even inside a running event loop (then in a worker thread).

    >>> async def two():
    ...     return 2
    >>> run_sync(two())
    2
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _server_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:500]
        return str(err)[:500]
    return str(body)[:500]


def _split_tokens(total: int, texts: list[str], counts: list[int] | None = None) -> list[int]:
    """Split ``total`` completion tokens over choices in proportion to ``counts`` or else text length (sum kept).

    >>> _split_tokens(10, ["a", "bbbb"]), _split_tokens(10, ["a", "bbbb"], counts=[7, 3])
    ([2, 8], [7, 3])
    """
    if len(texts) == 1:
        return [total]
    weights = [max(w, 1) for w in (counts if counts is not None else [len(t) for t in texts])]
    shares = [total * w // sum(weights) for w in weights]
    for i in range(total - sum(shares)):
        shares[i % len(shares)] += 1
    return shares


class OpenAIGenerator:
    """A :class:`~metamod.llm.base.Generator` over an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        model: the served model name (``model`` field of the request).
        base_url: server URL up to ``/v1``.
        api_key_env: environment variable with the API key; unset or empty sends no Authorization header.
        max_concurrency: requests in flight at most.
        max_retries: retries per request on 429/5xx/timeouts/connection errors.
        timeout: per-request timeout in seconds.
        backoff_base: first retry delay in seconds (doubles each retry, with jitter).
        backoff_max: cap on one retry delay in seconds.
        context_length: the model's context, if known (servers do not report it in chat responses).
        name: identifier used in traces (defaults to ``model``).
        transport: an ``httpx`` transport to use instead of the network (tests pass ``httpx.MockTransport``).
        chat_template_kwargs: sent as the requests' ``chat_template_kwargs`` when non-empty (vLLM servers).
        extra_body: fields merged into every chat request body (server-specific options, e.g.
            :data:`LLAMACPP_PLAIN_SAMPLING` for llama-cpp-python's server).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "http://localhost:8000/v1",
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 16,
        max_retries: int = 5,
        timeout: float = 120.0,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        context_length: int | None = None,
        name: str | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if not model:
            raise ValueError("model must name the served model (the `model` field of chat requests)")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.model = model
        self.name = name or model
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.timeout = timeout
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.context_length = context_length
        self.transport = transport
        self.chat_template_kwargs: dict[str, Any] = dict(chat_template_kwargs or {})
        self.extra_body: dict[str, Any] = dict(extra_body or {})
        self._tokenize_ok: bool | None = None  # None: not tried yet

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _payload(self, conversation: Conversation, sampling: SamplingConfig, index: int = 0) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": list(conversation),
            "n": sampling.n,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.seed is not None:  # one seed per conversation: equal prompts must not give equal samples
            payload["seed"] = sampling.seed + index
        if sampling.stop:
            payload["stop"] = list(sampling.stop)
        if sampling.logprobs or sampling.top_logprobs:
            payload["logprobs"] = True
            # always sent: llama-cpp-python's server returns log-probs only when top_logprobs is set (0 is valid)
            payload["top_logprobs"] = int(sampling.top_logprobs)
        if self.chat_template_kwargs:
            payload["chat_template_kwargs"] = dict(self.chat_template_kwargs)
        payload.update(self.extra_body)
        return payload

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None and "retry-after" in response.headers:
            try:
                return min(float(response.headers["retry-after"]), self.backoff_max)
            except ValueError:
                pass
        return min(self.backoff_max, self.backoff_base * 2**attempt) * random.uniform(0.5, 1.0)

    # ------------------------------------------------------------------ chat

    def chat(self, conversations: list[Conversation], sampling: SamplingConfig) -> list[Generation]:
        """Generate ``sampling.n`` completions per conversation with bounded concurrent requests.

        Args:
            conversations: chat message lists.
            sampling: decoding settings.

        Returns:
            ``len(conversations) * sampling.n`` generations (conversation-major).

        Raises:
            BackendError: a request failed with a non-retryable error, or still failed after ``max_retries``.
        """
        if not conversations:
            return []
        return run_sync(self.achat(conversations, sampling))

    async def achat(self, conversations: list[Conversation], sampling: SamplingConfig) -> list[Generation]:
        """Async version of :meth:`chat` (for callers already inside an event loop)."""
        semaphore = asyncio.Semaphore(self.max_concurrency)
        limits = httpx.Limits(max_connections=self.max_concurrency)
        async with httpx.AsyncClient(
            headers=self._headers(), timeout=self.timeout, transport=self.transport, limits=limits
        ) as client:

            async def one(index: int, conversation: Conversation) -> list[Generation]:
                async with semaphore:
                    body = await self._post(client, self._payload(conversation, sampling, index))
                return self._parse(body, sampling.n, logprobs=sampling.logprobs, top_logprobs=sampling.top_logprobs)

            results = await asyncio.gather(*(one(i, c) for i, c in enumerate(conversations)))
        return [g for gens in results for g in gens]

    async def _post(self, client: httpx.AsyncClient, payload: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}/chat/completions"
        last_error = ""
        for attempt in range(self.max_retries + 1):
            response: httpx.Response | None = None
            try:
                response = await client.post(url, json=payload)
            except httpx.TimeoutException as err:
                last_error = f"timed out after {self.timeout}s ({type(err).__name__})"
            except httpx.TransportError as err:
                last_error = f"connection error ({type(err).__name__}: {err})"
            else:
                if response.status_code == 200:
                    try:
                        return response.json()
                    except ValueError as err:
                        raise BackendError(f"{url} returned invalid JSON: {response.text[:300]!r}") from err
                message = _server_message(response)
                if response.status_code not in RETRYABLE_STATUS and response.status_code < 500:
                    raise BackendError(f"{url} rejected the request: HTTP {response.status_code}: {message}")
                last_error = f"HTTP {response.status_code}: {message}"
            if attempt < self.max_retries:
                delay = self._delay(attempt, response)
                logger.warning("%s: %s; retry %d/%d in %.1fs", url, last_error, attempt + 1, self.max_retries, delay)
                await asyncio.sleep(delay)
        raise BackendError(f"{url} failed after {self.max_retries + 1} attempts; last error: {last_error}")

    def _parse(
        self, body: dict[str, Any], n: int, *, logprobs: bool = False, top_logprobs: int = 0
    ) -> list[Generation]:
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or len(choices) != n:
            got = len(choices) if isinstance(choices, list) else "no"
            raise BackendError(f"server returned {got} choices, expected n={n}: {str(body)[:300]}")
        choices = sorted(choices, key=lambda c: c.get("index", 0))
        texts = [(c.get("message") or {}).get("content") or "" for c in choices]
        wanted = logprobs or top_logprobs > 0
        token_logprobs = [self._choice_logprobs(c) for c in choices] if wanted else [None] * len(choices)
        usage = body.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        counts = [len(lp) for lp in token_logprobs] if wanted else None  # type: ignore[arg-type]
        completion = _split_tokens(int(usage.get("completion_tokens") or 0), texts, counts)
        generations = []
        for text, tokens, choice, lp in zip(texts, completion, choices, token_logprobs, strict=True):
            generation = Generation(text, prompt_tokens, tokens, choice.get("finish_reason"))
            generation.token_logprobs = lp if logprobs else None
            if top_logprobs:
                generation.tokens, generation.top_logprobs = _choice_top(choice)
            generations.append(generation)
        return generations

    def _choice_logprobs(self, choice: dict[str, Any]) -> list[float]:
        """``choice["logprobs"]["content"][i]["logprob"]`` for every token; a clear error when the server sent none."""
        block = choice.get("logprobs")
        content = block.get("content") if isinstance(block, dict) else None
        values = [entry.get("logprob") if isinstance(entry, dict) else None for entry in content or []]
        if not isinstance(content, list) or any(not isinstance(v, (int, float)) for v in values):
            raise BackendError(
                f"{self.base_url}/chat/completions (model {self.model!r}) did not return log-probs "
                f"(choice {choice.get('index', 0)}: logprobs={str(block)[:120]}); sampling.logprobs needs a server "
                "that supports `logprobs: true` in chat completions"
            )
        return [float(v) for v in values]

    # ------------------------------------------------------------------ tokens

    def count_tokens(self, conversation: Conversation) -> int:
        """Prompt tokens from the server's ``/tokenize`` (vLLM), else :func:`approx_tokens`.

        The first failure of ``/tokenize`` is remembered, so servers without it are asked only once.
        """
        if self._tokenize_ok is not False:
            root = self.base_url.removesuffix("/v1")
            payload = {"model": self.model, "messages": list(conversation), "add_generation_prompt": True}
            if self.chat_template_kwargs:
                payload["chat_template_kwargs"] = dict(self.chat_template_kwargs)
            try:
                with httpx.Client(headers=self._headers(), timeout=self.timeout, transport=self.transport) as client:
                    response = client.post(f"{root}/tokenize", json=payload)
                if response.status_code == 200 and isinstance(response.json().get("count"), int):
                    self._tokenize_ok = True
                    body = response.json()
                    if self.context_length is None and isinstance(body.get("max_model_len"), int):
                        self.context_length = body["max_model_len"]
                    return body["count"]
                logger.info("%s/tokenize unavailable (HTTP %d); approximating token counts", root, response.status_code)
            except (httpx.HTTPError, ValueError) as err:
                logger.info("%s/tokenize unavailable (%s); approximating token counts", root, err)
            self._tokenize_ok = False
        return approx_tokens(conversation)


def _choice_top(choice: dict[str, Any]) -> tuple[list[str], list[dict[str, float]]]:
    """``content[i]["token"]`` and ``content[i]["top_logprobs"]`` (text -> log-prob) of one choice (already checked
    to carry log-probs); alternatives with the same text have their probabilities added.

    >>> _choice_top({"logprobs": {"content": [{"token": "STOP", "logprob": -0.1, "top_logprobs": [
    ...     {"token": "STOP", "logprob": -0.1}, {"token": "CONT", "logprob": -2.4}]}]}})
    (['STOP'], [{'STOP': -0.1, 'CONT': -2.4}])
    """
    tokens: list[str] = []
    top: list[dict[str, float]] = []
    for entry in choice["logprobs"]["content"]:
        tokens.append(str(entry.get("token") or ""))
        step: dict[str, float] = {}
        for alternative in entry.get("top_logprobs") or []:
            text, value = str(alternative.get("token") or ""), float(alternative["logprob"])
            step[text] = value if text not in step else math.log(math.exp(step[text]) + math.exp(value))
        top.append(step)
    return tokens, top
