"""MC²'s MetaCognitive Accumulator (seed 000, section 2.2 and appendix C), its pieces by job.

- :mod:`~metamod.memory.mca.accumulator`: :class:`MetaCognitiveAccumulator` (the memory: records, windows,
  consolidation, composed role prompts) and its options; :func:`guidance_relevance` (appendix E's measure).
- :mod:`~metamod.memory.mca.reflect`: reflections on a solved trace and the S+ / S- selection (Eq. 9).
- :mod:`~metamod.memory.mca.writers`: the micro-lesson distiller, the consolidator and the composer.
- :mod:`~metamod.memory.mca.parse`: reading and checking what those writers return.

>>> from metamod.memory.mca import MCAOptions
>>> MCAOptions().window >= 1
True
"""

from metamod.memory.mca.accumulator import MCAOptions, MetaCognitiveAccumulator, base_policy, guidance_relevance

__all__ = ["MCAOptions", "MetaCognitiveAccumulator", "base_policy", "guidance_relevance"]
