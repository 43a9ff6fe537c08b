"""The agents of the code-reasoning methods (MARCO and its ablations, CoT, Chain-of-Code, RHDA), by job.

- :mod:`~metamod.rollout.coding.agents`: :class:`~metamod.rollout.coding.agents.CodeAgent` (one batched ``chat``
  for an LLM or the simulated coder), the problem prompt and the visible-example checks.
- :mod:`~metamod.rollout.coding.simulated`: the seeded simulated coder.
- :mod:`~metamod.rollout.coding.turn`: what one call is (:class:`~metamod.rollout.coding.turn.CodeTurn`) and how a
  code question is read; shared by the two above, which do not import each other.
"""
