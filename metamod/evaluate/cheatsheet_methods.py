"""The Bayesian Cheatsheet's method rows: a chain-of-thought solver, each row with its own memory (paper tables 1, 2, 4).

Every row is :class:`~metamod.evaluate.single.SingleCoT` (the same prompt, the same solver) plus a memory of its
own (``memory_name`` / ``memory_defaults``, saved per seed in ``memory-seed<k>-<method>/``), so rows differ only in
how behaviours are organised, retrieved and adapted. ``memory_options`` in the config (e.g. ``corpus``,
``top_k``, ``refit_interval``: g of the rows that refit, ``embedder``) applies to every row's memory, over these
defaults: keep the row-defining keys (``organiser``, ``online``, ``refit``, ``cold_start``, ``curator``) out of it.
No row sets an encoder: every row embeds with ``memory_options``' ``embedder``, else the corpus's
(:func:`metamod.memory.embed.select_embedder`), so all rows compare behaviours in one embedding space.

================================  =====================================================================
row                               memory and its defaults
================================  =====================================================================
``bc_static``                     cheatsheet, HDP-GMM, posterior-predictive top-k' (BC-PP)
``bc_centroids``                  cheatsheet, HDP-GMM, k' nearest component means (BC-centroids)
``bc_online``                     BC-TTT: online mining + soft updates + novelty births, no refit
``bc_refit``                      BC-TTT with a refit every ``refit_interval`` questions (g, default 10)
``bc_cold``                       BC-TTT from an empty memory (cold start, raw space), refits
``dp_online``                     the flat, domain-pooled DP-GMM, online (table 8)
``random_behaviours``             k' random corpus behaviours
``metacognitive_reuse``           flat cosine top-k' in the embedder's space
``direct_retrieval``              flat top-k' in the projected space (projected query)
``kmeans_{hard,soft}_static``     k-means (K = the HDP's K) static, ``_online`` and ``_refit``
``dc_cu_static``                  DC-Cu's warm-start cheatsheet, never curated (table 1's static DC-Cu)
``dc_cu`` / ``dc_rs``             Dynamic Cheatsheet, cumulative / retrieval-synthesis curator (online); static DC-RS
                                  is ``metacognitive_reuse`` (table 1's caption)
``ace``                           ACE: generator / reflector / curator playbook (online)
``dc_cu_cold`` / ``ace_cold``     the same from an empty memory (table 2)
================================  =====================================================================

>>> sorted(CHEATSHEET_METHODS)[:3]
['ace', 'ace_cold', 'bc_centroids']
>>> CHEATSHEET_METHODS["bc_refit"].memory_defaults
{'online': True, 'refit': True}
"""

from __future__ import annotations

from typing import Any

from .single import SingleAgentMethod, SingleCoT

#: row name -> (label, memory name, memory defaults)
ROWS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "bc_static": ("BC-PP (static)", "cheatsheet", {}),
    "bc_centroids": ("BC-centroids (static)", "cheatsheet", {"retrieval": "centroids"}),
    "bc_online": ("BC-TTT (online, no refit)", "cheatsheet", {"online": True}),
    "bc_refit": ("BC-TTT (online, refit)", "cheatsheet", {"online": True, "refit": True}),
    "bc_cold": ("BC-TTT (cold start)", "cheatsheet", {"cold_start": True, "online": True, "refit": True}),
    "dp_online": ("DP-GMM pooled (online)", "cheatsheet", {"organiser": "dp", "online": True}),
    "random_behaviours": ("Random k'", "cheatsheet", {"organiser": "random", "space": "raw"}),
    "metacognitive_reuse": ("Metacognitive Reuse (flat cosine)", "cheatsheet", {"organiser": "flat", "space": "raw"}),
    "direct_retrieval": ("Direct retrieval (projected)", "cheatsheet", {"organiser": "flat", "space": "projected"}),
    "kmeans_hard_static": ("Hard k-means (static)", "cheatsheet", {"organiser": "kmeans_hard"}),
    "kmeans_hard_online": ("Hard k-means (online)", "cheatsheet", {"organiser": "kmeans_hard", "online": True}),
    "kmeans_hard_refit": (
        "Hard k-means (online, refit)",
        "cheatsheet",
        {"organiser": "kmeans_hard", "online": True, "refit": True},
    ),
    "kmeans_soft_static": ("Soft k-means (static)", "cheatsheet", {"organiser": "kmeans_soft"}),
    "kmeans_soft_online": ("Soft k-means (online)", "cheatsheet", {"organiser": "kmeans_soft", "online": True}),
    "kmeans_soft_refit": (
        "Soft k-means (online, refit)",
        "cheatsheet",
        {"organiser": "kmeans_soft", "online": True, "refit": True},
    ),
    "dc_cu_static": ("DC-Cu (static)", "dc", {"curator": "cumulative", "online": False}),
    "dc_cu": ("DC-Cu (online curation)", "dc", {"curator": "cumulative"}),
    "dc_rs": ("DC-RS (online curation)", "dc", {"curator": "retrieval_synthesis"}),
    "ace": ("ACE (online curator)", "ace", {}),
    "dc_cu_cold": ("DC-Cu (cold start)", "dc", {"curator": "cumulative", "cold_start": True}),
    "ace_cold": ("ACE (cold start)", "ace", {"cold_start": True}),
}


def _row_class(name: str, label: str, memory: str, defaults: dict[str, Any]) -> type[SingleAgentMethod]:
    doc = f"{label}: chain of thought with its own ``memory: {memory}`` (defaults {defaults})."
    attrs: dict[str, Any] = {
        "__doc__": doc,
        "__module__": __name__,
        "name": name,
        "label": label,
        "memory_name": memory,
        "memory_defaults": dict(defaults),
    }
    return type(f"CheatsheetRow_{name}", (SingleCoT,), attrs)


#: the rows above as method classes, merged into :data:`metamod.evaluate.decision.DECISION_LAYERS`
CHEATSHEET_METHODS: dict[str, type[SingleAgentMethod]] = {
    name: _row_class(name, label, memory, defaults) for name, (label, memory, defaults) in ROWS.items()
}

__all__ = ["CHEATSHEET_METHODS", "ROWS"]
