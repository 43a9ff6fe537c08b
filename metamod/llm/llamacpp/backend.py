"""The ``llamacpp`` backend: a GGUF model served by its own llama.cpp server, spoken to as the ``openai`` backend.

Building it starts llama.cpp's OpenAI-compatible server (:mod:`metamod.llm.llamacpp.server`) on ``model`` (an
embedded alias such as ``smollm2-135m-instruct``, whose shipped Q4_1 GGUF is run as is, or a ``.gguf`` path) on a
free loopback port; :meth:`LlamaCppGenerator.close` stops it, and so does the end of the process, however it ends
(the server's watchdog). Requests go through :class:`~metamod.llm.openai_backend.OpenAIGenerator` (retries,
log-probs, stop strings), with three things the server needs:

- sampling is plain temperature + top-p, as in the other backends (:data:`~metamod.llm.openai_backend.
  LLAMACPP_PLAIN_SAMPLING`: no top-k, min-p or repeat penalty, which the server applies by default);

- ``n > 1`` is sent as ``n`` requests of one sample each (llama-cpp-python's server ignores ``n``); with a seed,
  each gets its own (``seed + i``);
- the context is the server's ``n_ctx`` (``max_model_len``, default 8192, SmolLM2's own), so the prompt budget
  trims what does not fit; :meth:`~LlamaCppGenerator.count_tokens` counts the messages' texts with the server's
  tokenizer plus a margin per message for the chat template (the server has no chat ``/tokenize``); the counts in
  traces are the server's own ``usage``.

To share one server between processes, run ``metamod model serve`` and use the ``openai`` backend on its base_url.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import httpx

from metamod.errors import ConfigError
from metamod.llm.base import Conversation, Generation, SamplingConfig
from metamod.llm.llamacpp.server import RunningServer, ServerConfig, start_server, stop_server, wait_ready
from metamod.llm.openai_backend import LLAMACPP_PLAIN_SAMPLING, BackendError, OpenAIGenerator

logger = logging.getLogger(__name__)

#: the server's context when max_model_len is not set (SmolLM2-135M-Instruct's own)
DEFAULT_N_CTX = 8192
#: chat-template tokens allowed per message by count_tokens (ChatML takes 5; SmolLM2's default system message ~20)
TEMPLATE_MARGIN = 24


class LlamaCppGenerator:
    """A :class:`~metamod.llm.base.Generator` that runs its own llama.cpp server on a GGUF model.

    Args:
        model: an embedded alias (its GGUF file) or a path to a ``.gguf`` file.
        adapter: must be None (a LoRA adapter is not applied: use the hf backend).
        num_threads: CPU threads of the server (None: 2).
        max_model_len: the server's context in tokens (None: 8192).
        max_concurrency: requests in flight (the server answers one at a time; a few in flight hide the HTTP turns).
        max_retries: retries on connection errors, timeouts and 5xx.
        timeout: per-request timeout in seconds.
        startup_timeout: seconds to wait for the server to answer.
    """

    def __init__(
        self,
        model: str,
        *,
        adapter: str | None = None,
        num_threads: int | None = None,
        max_model_len: int | None = None,
        max_concurrency: int = 4,
        max_retries: int = 2,
        timeout: float = 600.0,
        startup_timeout: float = 120.0,
    ) -> None:
        if adapter:
            raise ConfigError(
                f"the llamacpp backend cannot apply the LoRA adapter {adapter!r}: use backend hf for an adapter"
            )
        self.config = ServerConfig(
            model=model,
            n_ctx=max_model_len or DEFAULT_N_CTX,
            n_threads=num_threads or 2,
            startup_timeout=startup_timeout,
        )
        self.server: RunningServer | None = None
        server, self._watchdog_fd = start_server(self.config)
        try:
            wait_ready(server, self.config.startup_timeout)
        except BaseException:
            self._stop(server)
            raise
        self.server = server
        self.name = model
        self.context_length: int | None = self.config.n_ctx
        self.client = OpenAIGenerator(
            server.model_name,
            base_url=server.base_url,
            max_concurrency=max_concurrency,
            max_retries=max_retries,
            timeout=timeout,
            backoff_base=0.5,
            context_length=self.config.n_ctx,
            name=model,
            extra_body=LLAMACPP_PLAIN_SAMPLING,
        )
        logger.info("llamacpp backend: %s served at %s (pid %d)", model, server.base_url, server.pid)

    def chat(self, conversations: list[Conversation], sampling: SamplingConfig) -> list[Generation]:
        """``sampling.n`` generations per conversation (conversation-major), one request per sample."""
        if sampling.n == 1:
            return self.client.chat(conversations, sampling)
        expanded = [c for c in conversations for _ in range(sampling.n)]
        single = SamplingConfig(**{**_fields(sampling), "n": 1})
        return self.client.chat(expanded, single)

    def count_tokens(self, conversation: Conversation) -> int:
        """The server's token count of the messages' texts plus :data:`TEMPLATE_MARGIN` per message and once more
        (the chat template's own tokens; SmolLM2's adds a default system message): a slight over-count."""
        assert self.server is not None, "the llamacpp backend was closed"
        text = "\n".join(str(m.get("content") or "") for m in conversation)
        root = self.server.base_url.removesuffix("/v1")
        response = httpx.post(f"{root}/extras/tokenize/count", json={"input": text}, timeout=self.client.timeout)
        if response.status_code != 200:
            raise BackendError(
                f"{root}/extras/tokenize/count answered HTTP {response.status_code}: {response.text[:200]}"
            )
        return int(response.json()["count"]) + TEMPLATE_MARGIN * (len(conversation) + 1)

    def close(self) -> None:
        """Stop the server (also done when the process ends)."""
        if self.server is not None:
            self._stop(self.server)
            self.server = None

    def _stop(self, server: RunningServer) -> None:
        stop_server(server, self.config.shutdown_grace)
        os.close(self._watchdog_fd)
        server.log_path.unlink(missing_ok=True)


def _fields(sampling: SamplingConfig) -> dict[str, Any]:
    from dataclasses import fields

    return {f.name: getattr(sampling, f.name) for f in fields(sampling)}
