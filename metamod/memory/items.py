"""Bookkeeping shared by the memories that keep a list of items (ACE bullets, DC entries, BoT templates).

One implementation each of: the ``integer >= 1`` option check, the "embedder_model needs embedder" check, the
zero-row embedding of source questions (an empty question never matches) and the eviction of the items that sort
lowest under a memory's own key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from metamod.memory.embed import Embedder, check_embedder

T = TypeVar("T")


def check_positive(name: str, value: Any) -> None:
    """Raise unless ``value`` is an integer >= 1 (a bool is not).

    >>> check_positive("top_k", 0)
    Traceback (most recent call last):
    ...
    ValueError: top_k must be an integer >= 1, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def check_embedder_options(embedder: str | None, embedder_model: str | None) -> None:
    """Validate a memory's ``embedder`` / ``embedder_model`` options (a model folder needs an embedder name)."""
    if embedder is not None:
        check_embedder(embedder, embedder_model)
    elif embedder_model:
        raise ValueError(f"embedder_model={embedder_model!r} is set without embedder; name the embedder too")


def embed_keys(embedder: Embedder, questions: Sequence[str]) -> np.ndarray:
    """Embeddings of source questions; an empty question gets a zero row (it never matches)."""
    vecs = embedder.embed([q or "" for q in questions])
    vecs[[i for i, q in enumerate(questions) if not q.strip()]] = 0.0
    return vecs


def evict_lowest(items: list[T], excess: int, key: Callable[[int], Any]) -> list[T]:
    """``items`` without the ``excess`` ones whose ``key(index)`` sorts lowest (order kept; none when excess <= 0).

    >>> evict_lowest(["a", "b", "c"], 1, lambda i: -i)
    ['a', 'b']
    """
    if excess <= 0:
        return items
    dropped = set(sorted(range(len(items)), key=key)[:excess])
    return [item for i, item in enumerate(items) if i not in dropped]


def best_scores(query: np.ndarray, text_vecs: np.ndarray, key_vecs: np.ndarray) -> np.ndarray:
    """Per item ``max(cos(query, text), cos(query, key))`` (a zero key row scores 0)."""
    return np.maximum(text_vecs @ query, key_vecs @ query)


class ItemVectors:
    """Cached embeddings of a memory's items: each item's text and its source question (a retrieval key).

    Items are ``(id, text, question)`` triples; an entry is re-embedded when any of the three changes. Never saved:
    the embedder is deterministic.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    @staticmethod
    def _key(item: tuple[str, str, str]) -> str:
        return "\0".join(item)

    def update(self, items: Sequence[tuple[str, str, str]]) -> None:
        """Embed the items not cached yet (texts, then questions, in one call each) and forget the others."""
        todo = [item for item in items if self._key(item) not in self._cache]
        if todo:
            texts = self.embedder.embed([text for _, text, _ in todo])
            keys = embed_keys(self.embedder, [question for _, _, question in todo])
            self._cache.update({self._key(item): (texts[i], keys[i]) for i, item in enumerate(todo)})
        live = {self._key(item) for item in items}
        self._cache = {k: v for k, v in self._cache.items() if k in live}

    def matrices(self, items: Sequence[tuple[str, str, str]]) -> tuple[np.ndarray, np.ndarray]:
        """The text and question embeddings of ``items`` (all cached), one row each."""
        rows = [self._cache[self._key(item)] for item in items]
        return np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])

    def scores(self, items: Sequence[tuple[str, str, str]], query: str) -> np.ndarray:
        """Per item ``max(cos(query, text), cos(query, question))`` (an empty question scores 0)."""
        texts, keys = self.matrices(items)
        return best_scores(self.embedder.embed([query])[0], texts, keys)
