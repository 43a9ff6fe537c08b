"""Embedders: determinism, normalisation, registry, and the optional sentence-transformers path."""

from __future__ import annotations

import numpy as np
import pytest

from metamod.memory.embed import (
    EMBEDDERS,
    Embedder,
    HashingEmbedder,
    SentenceTransformerEmbedder,
    build_embedder,
    cosine_top_k,
    is_sentence_transformers_available,
)

TEXTS = [
    "A shop packs 12 pens in each box. How many pens are in 3 boxes?",
    "A shop packs 12 pencils in each box. How many pencils are in 4 boxes?",
    "Which planet is closest to the Sun?",
    "",
]


def test_hashing_is_deterministic_across_instances_and_batches():
    a = HashingEmbedder(n_features=512).embed(TEXTS)
    b = HashingEmbedder(n_features=512).embed(list(reversed(TEXTS)))[::-1]
    one = np.vstack([HashingEmbedder(n_features=512).embed([t]) for t in TEXTS])
    assert np.array_equal(a, b) and np.array_equal(a, one)
    assert a.dtype == np.float32 and a.shape == (4, 512)


def test_hashing_rows_are_unit_norm_and_empty_text_is_zero():
    vecs = HashingEmbedder().embed(TEXTS)
    norms = np.linalg.norm(vecs, axis=1)
    assert np.allclose(norms[:3], 1.0, atol=1e-5)
    assert norms[3] == 0.0
    assert HashingEmbedder().embed([]).shape == (0, 2048)


def test_hashing_similarity_is_meaningful():
    vecs = HashingEmbedder().embed(TEXTS[:3])
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.2
    assert [i for i, _ in cosine_top_k(vecs[0], vecs[1:], k=2)] == [0, 1]


def test_embedder_input_checks():
    with pytest.raises(TypeError, match="single str"):
        HashingEmbedder().embed("one text")
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        HashingEmbedder().embed(["ok", 3])
    with pytest.raises(ValueError, match="n_features"):
        HashingEmbedder(n_features=7)


def test_cosine_top_k_contract():
    m = np.eye(3, dtype=np.float32)
    assert cosine_top_k(np.array([0, 1, 0]), m, k=5) == [(1, 1.0), (0, 0.0), (2, 0.0)]
    assert cosine_top_k(np.array([0, 1, 0]), m, k=5, min_score=0.5) == [(1, 1.0)]
    assert cosine_top_k(np.array([0, 1, 0]), np.zeros((0, 3)), k=2) == []
    with pytest.raises(ValueError, match="k must be >= 1"):
        cosine_top_k(np.array([0, 1, 0]), m, k=0)
    with pytest.raises(ValueError, match="dimension"):
        cosine_top_k(np.array([0, 1]), m, k=1)


def test_registry():
    assert isinstance(build_embedder("hashing"), Embedder)
    assert set(EMBEDDERS) == {"hashing", "lm", "sentence-transformers"}
    with pytest.raises(KeyError, match="Valid names: hashing, lm, sentence-transformers"):
        build_embedder("openai")


def test_sentence_transformers_absent_raises_install_hint(tmp_path):
    if is_sentence_transformers_available():
        pytest.skip("sentence-transformers is installed; the absent-package path cannot be exercised")
    with pytest.raises(ImportError, match="pip install"):
        SentenceTransformerEmbedder(model_path=str(tmp_path))


def test_sentence_transformers_never_downloads(tmp_path):
    if not is_sentence_transformers_available():
        pytest.skip("sentence-transformers not installed (pip install 'meta-moderator[embeddings]')")
    with pytest.raises(ValueError, match="local model directory"):
        SentenceTransformerEmbedder(model_path=None)
    with pytest.raises(FileNotFoundError, match="not found"):
        SentenceTransformerEmbedder(model_path="sentence-transformers/all-MiniLM-L6-v2")


def test_hashing_char_features_equal_scikit_learns_char_wb():
    """The per-word n-gram cache is a speed-up only: the features are scikit-learn's analyzer="char_wb" ones."""
    import numpy as np

    from metamod.memory.embed import HashingEmbedder

    emb = HashingEmbedder(n_features=512)
    texts = ["Tom has 3 apples  and\\tbuys 4 MORE.", "Ünïcode wörds, punctuation!? and   spaces", "", "x"]
    ours = emb._char.transform(texts).toarray()
    reference = emb._char_wb.transform(texts).toarray()
    assert np.array_equal(ours, reference)
    assert np.array_equal(emb.embed(texts), emb.embed(list(reversed(texts)))[::-1])
