"""The Reasoner / Monitor / Controller loop of MC² (seed 000, section 2.1 and appendix D), its pieces by job.

- :mod:`~metamod.rollout.mro.loop`: :func:`run_mro`, the chunked, streaming loop, and :class:`MROStats`.
- :mod:`~metamod.rollout.mro.roles`: the three LLM roles (bundled as :class:`MRORoles`); :mod:`~metamod.rollout.mro.simulated`:
  their seeded simulated counterparts; :mod:`~metamod.rollout.mro.factory`: building them from a config.
- :mod:`~metamod.rollout.mro.parse`: reading the roles' outputs; :mod:`~metamod.rollout.mro.traces`: the MRO trace
  payload; :mod:`~metamod.rollout.mro.snapshots`: controller training rows.
"""

from metamod.rollout.mro.loop import MRORoles, MROStats, run_mro

__all__ = ["MRORoles", "MROStats", "run_mro"]
