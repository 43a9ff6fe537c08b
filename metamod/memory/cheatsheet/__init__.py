"""The Bayesian Cheatsheet (seed 004; ``docs/cheatsheet.md``), its pieces by job.

- :mod:`~metamod.memory.cheatsheet.memory`: :class:`Cheatsheet` (``memory: cheatsheet``: behaviours + an organiser,
  static / online / refit / cold start) and :class:`CheatsheetOptions`.
- :mod:`~metamod.memory.cheatsheet.mining`: the three batched mining stages (solve -> reflect -> extract), parsers.
- :mod:`~metamod.memory.cheatsheet.mine`: the ``metamod mine-behaviours`` command (writes the mined corpus).
- :mod:`~metamod.memory.cheatsheet.corpus`: the behaviour corpus, mined and fitted (the one reader / writer).
- :mod:`~metamod.memory.cheatsheet.projector`: PCA to D and the query projector f_theta.
- :mod:`~metamod.memory.cheatsheet.fit`: the ``metamod fit-cheatsheet`` command (PCA, f_theta, the HDP-GMM).
- :mod:`~metamod.memory.cheatsheet.organisers`: the organiser interface and registry, the flat baselines, churn.
- :mod:`~metamod.memory.cheatsheet.kmeans`: the hard / soft k-means organisers.

Below the package and shared with other memories: the HDP-GMM organiser (:mod:`metamod.memory.hdp`), a cluster's
medoid (:mod:`metamod.memory.medoids`; the HDP-GMM's too), embeddings (:mod:`metamod.memory.embed`). The ``dc``
and ``ace`` memories read the mined corpus through :mod:`~metamod.memory.cheatsheet.corpus`.

>>> from metamod.memory.cheatsheet import CheatsheetOptions
>>> CheatsheetOptions().organiser
'hdp'
"""

from metamod.memory.cheatsheet.memory import Cheatsheet, CheatsheetOptions

__all__ = ["Cheatsheet", "CheatsheetOptions"]
