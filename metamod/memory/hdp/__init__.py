"""The HDP-GMM organiser of the Bayesian Cheatsheet (seed 004, appendix D): one job, its pieces by job.

- :mod:`~metamod.memory.hdp.model`: :class:`HDPGMM`, the collapsed Gibbs sampler (fit, online inserts, queries).
- :mod:`~metamod.memory.hdp.stats`: Normal-Inverse-Wishart sufficient statistics and Student-t predictives.
- :mod:`~metamod.memory.hdp.sweep`: one Gibbs sweep over tables and dishes.
- :mod:`~metamod.memory.hdp.forms`: cached quadratic forms across a sweep's rank-one updates.
- :mod:`~metamod.memory.hdp.online`: test-time inserts; :mod:`~metamod.memory.hdp.query`: retrieval scores.
- :mod:`~metamod.memory.hdp.state`: save / load; :mod:`~metamod.memory.hdp.support`: input checks, BLAS threads.
- :mod:`~metamod.memory.hdp.kernel`: the numba-compiled hot loops (the only implementation of each).

>>> from metamod.memory.hdp import HDPGMM
>>> HDPGMM(sweeps=2, burn_in=1).sweeps
2
"""

from metamod.memory.hdp.model import HDPGMM

__all__ = ["HDPGMM"]
