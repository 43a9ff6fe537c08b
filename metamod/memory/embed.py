"""Text embeddings for memories: one ``Embedder.embed(texts) -> np.ndarray`` interface, rows L2-normalised.

Three backends, chosen by name from :data:`EMBEDDERS`:

- ``hashing`` (default, offline): scikit-learn ``HashingVectorizer`` features over word n-grams and character
  n-grams, combined and L2-normalised. It has no fitted state, so a text embeds to the same vector in every
  process and after every save/load, and new texts never change old vectors.
- ``lm`` (:class:`metamod.memory.lm_embedder.LMEmbedder`): mean-pooled last hidden states of a local causal LM,
  by default the embedded SmolLM2-135M-Instruct, so the CPU world has a neural encoder; registered by dotted path,
  so torch is imported only when it is built.
- ``sentence-transformers``: a local sentence-transformers model directory. Used only when the package is
  installed AND a local path is given; it never downloads anything.

**One encoder per evaluation** (:func:`select_embedder`). The memories that retrieve behaviours from a corpus
(``cheatsheet``, ``dc``, ``ace``) take ``embedder`` / ``embedder_model`` from ``memory_options``, which every row of an
evaluation shares, and no memory has a default of its own: unset, a memory embeds with the encoder its corpus was
embedded with (recorded by ``mine-behaviours`` / ``fit-cheatsheet``), else with :data:`DEFAULT_EMBEDDER`. Set, the
encoder must be the corpus's (a corpus is never queried in another space). So every row compares behaviours in one
embedding space, as the Bayesian Cheatsheet paper does (its static DC-RS *is* Metacognitive Reuse).

>>> emb = HashingEmbedder(n_features=256)
>>> vecs = emb.embed(["Tom has 3 apples and buys 4 more.", "Tom has 3 apples and buys 5 more.", "Name a colour."])
>>> vecs.shape, bool(np.allclose(np.linalg.norm(vecs, axis=1), 1.0))
((3, 256), True)
>>> [i for i, _ in cosine_top_k(vecs[0], vecs[1:], k=2)]
[0, 1]
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from metamod.registry import import_dotted, resolve

logger = logging.getLogger(__name__)

_ST_INSTALL = "pip install 'meta-moderator[embeddings]'  (or: pip install 'sentence-transformers>=3')"


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised float32 rows; the same text always gives the same row.

    Attributes:
        name: the registry name of the backend.
    """

    name: str

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` into an array of shape ``(len(texts), dim)`` with unit-norm rows (zero rows stay zero)."""
        ...

    def spec(self) -> dict[str, Any]:
        """The settings that determine the vectors (saved with a memory so a reload can tell if they changed)."""
        ...


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Scale each row to unit L2 norm; all-zero rows (e.g. an empty text) stay zero.

    >>> l2_normalise(np.array([[3.0, 4.0], [0.0, 0.0]])).astype(float).round(3).tolist()
    [[0.6, 0.8], [0.0, 0.0]]
    """
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


class HashingEmbedder:
    """Stateless offline embedder: hashed word n-grams plus hashed character n-grams.

    Args:
        n_features: output dimension (split evenly between the word and the character features).
        word_ngram_range: word n-gram sizes, ``(min, max)``.
        char_ngram_range: character n-gram sizes (within word boundaries), ``(min, max)``.
        char_weight: weight of the character block relative to the word block (each block is normalised first).

    >>> a, b = HashingEmbedder(n_features=128).embed(["same text", "same text"])
    >>> bool(np.array_equal(a, b))
    True
    """

    name = "hashing"

    def __init__(
        self,
        n_features: int = 2048,
        word_ngram_range: tuple[int, int] = (1, 2),
        char_ngram_range: tuple[int, int] = (3, 5),
        char_weight: float = 0.5,
    ) -> None:
        if n_features < 16 or n_features % 2:
            raise ValueError(f"n_features must be an even number >= 16, got {n_features}")
        for label, (lo, hi) in (("word_ngram_range", word_ngram_range), ("char_ngram_range", char_ngram_range)):
            if not 1 <= lo <= hi:
                raise ValueError(f"{label} must be (min, max) with 1 <= min <= max, got {(lo, hi)}")
        if char_weight < 0:
            raise ValueError(f"char_weight must be >= 0, got {char_weight}")
        from sklearn.feature_extraction.text import HashingVectorizer

        self.n_features = int(n_features)
        self.word_ngram_range = (int(word_ngram_range[0]), int(word_ngram_range[1]))
        self.char_ngram_range = (int(char_ngram_range[0]), int(char_ngram_range[1]))
        self.char_weight = float(char_weight)
        half = self.n_features // 2
        common = {"n_features": half, "alternate_sign": False, "norm": "l2", "lowercase": True, "dtype": np.float32}
        self._word = HashingVectorizer(analyzer="word", ngram_range=self.word_ngram_range, **common)
        # scikit-learn's own char_wb n-grams, computed once per distinct word (questions repeat their words: this
        # is ~2x faster and gives the same features as analyzer="char_wb"; tests compare the two)
        self._char_wb = HashingVectorizer(analyzer="char_wb", ngram_range=self.char_ngram_range, **common)
        self._word_grams: dict[str, tuple[str, ...]] = {}
        common_no_case = {k: v for k, v in common.items() if k != "lowercase"}
        self._char = HashingVectorizer(analyzer=self._char_ngrams, **common_no_case)
        self._cache: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` (see :class:`Embedder`).

        Rows are cached per text (a text always embeds to the same row, so the cache changes nothing but time:
        memories re-embed the same questions and lessons every batch); at most :attr:`CACHE_SIZE` texts are kept.
        """
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.n_features), dtype=np.float32)
        new = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if new:
            words = self._word.transform(new).toarray()
            chars = self._char.transform(new).toarray() * self.char_weight
            rows = l2_normalise(np.hstack([words, chars]))
            if len(self._cache) + len(new) > self.CACHE_SIZE:
                self._cache.clear()
            self._cache.update(zip(new, rows, strict=True))
        return np.stack([self._cache[t] for t in texts]).astype(np.float32, copy=True)

    #: most texts whose rows are kept (the cache is cleared when it would grow past this)
    CACHE_SIZE = 50_000

    def _char_ngrams(self, text: str) -> list[str]:
        """The character n-grams (within word boundaries) of ``text``, as ``analyzer="char_wb"`` makes them."""
        out: list[str] = []
        for word in text.lower().split():
            grams = self._word_grams.get(word)
            if grams is None:
                if len(self._word_grams) >= self.CACHE_SIZE:
                    self._word_grams.clear()
                grams = self._word_grams[word] = tuple(self._char_wb._char_wb_ngrams(word))
            out.extend(grams)
        return out

    def spec(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "n_features": self.n_features,
            "word_ngram_range": list(self.word_ngram_range),
            "char_ngram_range": list(self.char_ngram_range),
            "char_weight": self.char_weight,
        }


def is_sentence_transformers_available() -> bool:
    """Whether the optional ``sentence-transformers`` package is importable (checked without importing it)."""
    return importlib.util.find_spec("sentence_transformers") is not None


class SentenceTransformerEmbedder:
    """A local sentence-transformers model (optional dependency; never downloads).

    Args:
        model_path: a local directory holding a saved sentence-transformers model.
        device: torch device for encoding, e.g. ``"cpu"`` or ``"cuda"``.
        batch_size: texts per forward pass.

    Raises:
        ImportError: when ``sentence-transformers`` is not installed (the message has the install command).
        FileNotFoundError: when ``model_path`` is not an existing local directory.
    """

    name = "sentence-transformers"

    def __init__(self, model_path: str | None = None, device: str = "cpu", batch_size: int = 32) -> None:
        if not model_path:
            raise ValueError(
                "The 'sentence-transformers' embedder needs model_path, a local model directory (metamod never "
                "downloads embedding models); set embedder_model: /path/to/model in memory_options, or use "
                "embedder: hashing"
            )
        path = Path(model_path).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(
                f"Embedding model directory not found: {path}. embedder_model must be a local sentence-transformers "
                "folder (metamod never downloads models): copy the model there, or point embedder_model at it"
            )
        if not is_sentence_transformers_available():
            raise ImportError(
                f"The 'sentence-transformers' embedder needs the sentence-transformers package: {_ST_INSTALL}"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        from sentence_transformers import SentenceTransformer

        kwargs: dict[str, Any] = {"device": device}
        if "local_files_only" in inspect.signature(SentenceTransformer.__init__).parameters:
            kwargs["local_files_only"] = True
        self.model_path = str(path)
        self.device = device
        self.batch_size = int(batch_size)
        self._model = SentenceTransformer(self.model_path, **kwargs)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` (see :class:`Embedder`)."""
        texts = check_texts(texts)
        if not texts:
            dim = self._model.get_sentence_embedding_dimension() or 0
            return np.zeros((0, dim), dtype=np.float32)
        vectors = self._model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False)
        return l2_normalise(vectors)

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "model_path": self.model_path}


#: the model of the ``lm`` embedder when none is named (:class:`metamod.memory.lm_embedder.LMEmbedder` reads it here)
DEFAULT_LM_MODEL = "smollm2-135m-instruct"

#: embedder name -> class, or the dotted path of a class imported only when built (``lm`` needs torch);
#: resolved with :func:`build_embedder`.
EMBEDDERS: dict[str, type | str] = {
    "hashing": HashingEmbedder,
    "lm": "metamod.memory.lm_embedder:LMEmbedder",
    "sentence-transformers": SentenceTransformerEmbedder,
}


def build_embedder(name: str = "hashing", **options: Any) -> Embedder:
    """Build an embedder by registry name (or dotted path) with its constructor options.

    Args:
        name: a key of :data:`EMBEDDERS`, or ``package.module:Class``.
        **options: constructor keyword arguments of that embedder.

    Returns:
        The embedder instance.

    >>> build_embedder("hashing", n_features=64).embed(["x"]).shape
    (1, 64)
    >>> build_embedder("bert")
    Traceback (most recent call last):
    ...
    KeyError: "Unknown embedder 'bert'. Valid names: hashing, lm, sentence-transformers (or a dotted path 'package.module:attr')."
    """
    cls = resolve(EMBEDDERS, name, what="embedder")
    if isinstance(cls, str):
        cls = import_dotted(cls)
    return cls(**options)


def check_embedder(name: str, model: str | None = None) -> None:
    """Fail with one line when an embedder name is unknown or sentence-transformers has no local model folder.

    ``lm`` needs no model (its default is the embedded SmolLM2); a model it is given is an alias or a folder.

    >>> check_embedder("hashing"), check_embedder("lm")
    (None, None)
    >>> check_embedder("bert")
    Traceback (most recent call last):
    ...
    ValueError: embedder='bert' is not known. Valid names: hashing, lm, sentence-transformers
    >>> check_embedder("sentence-transformers")
    Traceback (most recent call last):
    ...
    ValueError: embedder sentence-transformers needs embedder_model: /local/model/dir (models are never downloaded); or use embedder: hashing
    """
    if name not in EMBEDDERS and "." not in name and ":" not in name:
        raise ValueError(f"embedder={name!r} is not known. Valid names: {', '.join(sorted(EMBEDDERS))}")
    if name == "sentence-transformers" and not model:
        raise ValueError(
            "embedder sentence-transformers needs embedder_model: /local/model/dir (models are never downloaded); "
            "or use embedder: hashing"
        )


def embedder_from(options: Any, extra: dict[str, Any] | None = None) -> Embedder:
    """The embedder named by a memory's options (``embedder``, ``embedder_model``), with extra constructor options.

    >>> from types import SimpleNamespace
    >>> embedder_from(SimpleNamespace(embedder="hashing", embedder_model=None), {"n_features": 32}).embed(["a"]).shape
    (1, 32)
    """
    kwargs = dict(extra or {})
    if getattr(options, "embedder_model", None):
        kwargs["model_path"] = options.embedder_model
    return build_embedder(options.embedder, **kwargs)


#: the encoder of a memory whose options name none and whose corpus records none (or that has no corpus)
DEFAULT_EMBEDDER = "hashing"

_EMBEDDER_CACHE: dict[str, Any] = {}


def _embedder_class(name: str) -> type:
    cls = resolve(EMBEDDERS, name, what="embedder")
    return import_dotted(cls) if isinstance(cls, str) else cls


def shared_embedder(spec: Mapping[str, Any]) -> Embedder:
    """One embedder per spec in a process: the rows of a run (up to ~20 memories) share a loaded encoder.

    ``spec`` is what an embedder's ``spec()`` wrote (a corpus's ``embeddings.json``): the constructor takes the keys
    it knows, and the built embedder's own spec must agree with every saved key (e.g. the model's signature), so a
    corpus is never queried with a different encoder.

    >>> shared_embedder({"name": "hashing", "n_features": 64}) is shared_embedder({"n_features": 64, "name": "hashing"})
    True
    """
    key = json.dumps(dict(spec), sort_keys=True, default=str)
    if key not in _EMBEDDER_CACHE:
        options = dict(spec)
        name = options.pop("name")
        accepted = inspect.signature(_embedder_class(name).__init__).parameters
        embedder = build_embedder(name, **{k: v for k, v in options.items() if k in accepted})
        built = json.loads(json.dumps(embedder.spec(), default=str))
        saved = json.loads(json.dumps(dict(spec), default=str))
        differ = sorted(k for k in saved if k in built and built[k] != saved[k])
        if differ:
            raise ValueError(
                f"embedder {name}: the corpus was embedded with {{{', '.join(f'{k}: {saved[k]!r}' for k in differ)}}} "
                f"but this machine's embedder has {{{', '.join(f'{k}: {built[k]!r}' for k in differ)}}}; "
                "re-embed the corpus (rerun `metamod mine-behaviours`, which rebuilds embeddings.npz)"
            )
        _EMBEDDER_CACHE[key] = embedder
    return _EMBEDDER_CACHE[key]


def _model_of(spec: Mapping[str, Any]) -> str | None:
    model = spec.get("model_path") or spec.get("model")
    return None if model is None else str(model)


def _same_model(a: str, b: str) -> bool:
    return a == b or Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def select_embedder(
    embedder: str | None,
    embedder_model: str | None = None,
    recorded: Mapping[str, Any] | None = None,
    *,
    source: str = "the corpus",
) -> Embedder:
    """The encoder of a memory: the one named in its options, else the one its corpus records, else the default.

    Args:
        embedder: the options' ``embedder`` (None: not set).
        embedder_model: the options' ``embedder_model`` (a local folder, or the ``lm`` embedder's alias).
        recorded: the spec the memory's corpus was embedded with
            (:func:`metamod.memory.cheatsheet.corpus.recorded_embedder`; None: no corpus, or one that records no
            encoder).
        source: how to name the corpus in errors.

    Returns:
        A shared instance (:func:`shared_embedder`): memories with the same encoder hold the same object.

    Raises:
        ValueError: ``embedder`` is set and is not the encoder ``recorded`` names (another name or model folder):
            the corpus's vectors and this memory's would live in different spaces.

    >>> select_embedder(None, None, {"name": "hashing", "n_features": 32}).spec()["n_features"]  # the corpus's
    32
    >>> select_embedder("hashing", None, {"name": "hashing", "n_features": 32}).spec()["n_features"]  # the same
    32
    >>> select_embedder(None).name == DEFAULT_EMBEDDER
    True
    >>> select_embedder("lm", None, {"name": "hashing", "n_features": 32}, source="corpus runs/bc")
    Traceback (most recent call last):
    ...
    ValueError: embedder: lm is not the encoder corpus runs/bc was embedded with (hashing); every memory of an evaluation embeds with one encoder, the corpus's: drop embedder / embedder_model from memory_options (the corpus's encoder is then used), set them to the corpus's encoder, or re-mine the corpus with this one
    """
    if embedder is None:
        if embedder_model:
            raise ValueError(f"embedder_model={embedder_model!r} is set without embedder; name the embedder too")
        return shared_embedder(dict(recorded) if recorded else {"name": DEFAULT_EMBEDDER})
    if not recorded:
        return shared_embedder({"name": embedder, **({"model_path": embedder_model} if embedder_model else {})})
    wanted = embedder_model
    if wanted is None and embedder == "lm":
        wanted = DEFAULT_LM_MODEL
    have = _model_of(recorded)
    same = recorded.get("name") == embedder and (wanted is None or (have is not None and _same_model(wanted, have)))
    if not same:
        mine = embedder + (f" {embedder_model}" if embedder_model else "")
        theirs = str(recorded.get("name")) + (f" {have}" if have else "")
        raise ValueError(
            f"embedder: {mine} is not the encoder {source} was embedded with ({theirs}); every memory of an "
            "evaluation embeds with one encoder, the corpus's: drop embedder / embedder_model from memory_options "
            "(the corpus's encoder is then used), set them to the corpus's encoder, or re-mine the corpus with this one"
        )
    return shared_embedder(recorded)


def cosine_top_k(
    query: np.ndarray, matrix: np.ndarray, k: int, *, min_score: float | None = None
) -> list[tuple[int, float]]:
    """Rows of ``matrix`` most similar to ``query`` (both L2-normalised), best first, ties by lower index.

    Args:
        query: one vector of shape ``(dim,)``.
        matrix: candidate rows, shape ``(n, dim)``.
        k: the most rows to return.
        min_score: drop rows whose cosine similarity is below this value.

    Returns:
        ``[(row_index, score), ...]`` with at most ``k`` items.

    >>> m = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    >>> cosine_top_k(np.array([1.0, 0.0]), m, k=2)
    [(0, 1.0), (2, 0.6)]
    >>> cosine_top_k(np.array([1.0, 0.0]), m, k=3, min_score=0.5)
    [(0, 1.0), (2, 0.6)]
    """
    matrix = np.asarray(matrix, dtype=np.float32)
    if len(matrix) == 0:
        return top_k_scores(np.zeros(0, dtype=np.float32), k, min_score=min_score)
    query = np.asarray(query, dtype=np.float32).reshape(-1)
    if matrix.ndim != 2 or query.shape[0] != matrix.shape[1]:
        raise ValueError(f"query has dimension {query.shape[0]} but the matrix has shape {matrix.shape}")
    return top_k_scores(matrix @ query, k, min_score=min_score)


def top_k_scores(scores: np.ndarray, k: int, *, min_score: float | None = None) -> list[tuple[int, float]]:
    """Indices of the ``k`` highest scores, best first, ties broken by lower index (deterministic).

    Scores are rounded to 6 decimals first so that float noise never reorders near-ties.

    >>> top_k_scores(np.array([0.2, 0.9, 0.9, -np.inf]), k=3, min_score=0.1)
    [(1, 0.9), (2, 0.9), (0, 0.2)]
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    scores = np.round(np.asarray(scores, dtype=np.float64), 6)
    order = np.argsort(-scores, kind="stable")
    out: list[tuple[int, float]] = []
    for idx in order[:k]:
        score = float(scores[idx])
        if not np.isfinite(score) or (min_score is not None and score < min_score):
            break
        out.append((int(idx), score))
    return out


def check_texts(texts: list[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("embed() takes a list of texts, got a single str; wrap it in a list")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"embed() texts[{i}] must be a str, got {type(text).__name__}")
    return texts
