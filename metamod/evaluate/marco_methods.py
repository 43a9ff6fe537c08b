"""MARCO evaluation methods: the M x T code-reasoning loop (:mod:`metamod.rollout.marco`) and its ablations as rows.

==============  ================================================================================================
``marco``       meta-reflection (``memory: marco``, condenser every ``T_c`` problems) + cross-referencing.
``marco_v1``    no meta-reflection: cross-referencing only (no memory, no takeaways).
``marco_v2``    meta-reflection without the condenser: the raw bank of takeaways is the guidance.
``marco_v3``    no cross-referencing: meta-reflection + condenser, each agent sees only its own history.
==============  ================================================================================================

Settings: ``method_options: {marco: {agents: 2, iterations: 2, feedback: binary, ...}}``
(:class:`~metamod.rollout.marco.MarcoSettings`); the memory's (``condense_every``, ``condenser``,
``max_knowledge``, ...) go in ``memory_options`` (:class:`~metamod.memory.marco.MarcoOptions`). An ablation's
switch cannot be turned back on in its options (``marco_v3`` with ``cross_reference: true`` is refused).

The agents are the debater model (one model shared by the M agents, as in the paper); in the simulated world the
simulated coder (:mod:`metamod.rollout.coding.simulated`, ``code_simulation`` settings). Each samples row carries
``details["marco"]``: iterations used, whether the problem stopped early on a passing proposal, per-iteration
``eta`` (some proposal right) and visible passes, the final agent and the takeaways written.
"""

from __future__ import annotations

from typing import Any

from metamod.config import ConfigError
from metamod.rollout.coding.agents import CodeAgent
from metamod.rollout.marco import MarcoSettings, run_marco
from metamod.tasks.base import Example

from .baselines._common import read_options
from .single import SingleAgentMethod, SingleOutcome


def marco_details(trace: dict[str, Any]) -> dict[str, Any]:
    """The compact per-question record kept in a samples row (``details["marco"]``)."""
    return {
        "iterations": trace["num_iterations"],
        "max_iterations": trace["settings"]["iterations"],
        "agents": trace["settings"]["agents"],
        "stopped_early": trace["stopped_early"],
        "passed_visible": trace["passed_visible"],
        "eta": [it["eta"] for it in trace["iterations"]],
        "passes": [sum(p["feedback"]["passed"] for p in it["proposals"]) for it in trace["iterations"]],
        "final_agent": trace["final_agent"],
        "guidance_items": trace["guidance_items"],
        "takeaways": [t["text"][:200] for t in trace["takeaways"]],
        "tokens": trace["tokens"],
        "simulated": trace["simulated"],
    }


class Marco(SingleAgentMethod):
    """MARCO (its own ``memory: marco``) and its ablations, which are rows of the method table with settings the
    row fixes (``settings["forced"]``: v1 no meta-reflection, v3 no cross-referencing) or memory defaults a user
    may not override (v2: ``condense: false``)."""

    def __init__(self, context: Any, spec: Any):
        self.context, self.spec, self.name = context, spec, spec.name
        self.agent = CodeAgent.from_context(context, self.name, role="debater")
        raw = dict((context.method_options or {}).get(self.name) or {})
        forced = dict(spec.settings.get("forced") or {})
        for key, value in forced.items():
            if key in raw and raw[key] != value:
                raise ConfigError(
                    f"method_options[{self.name!r}]: {key}={raw[key]!r} contradicts the ablation ({key} is "
                    f"{value!r} in {self.name}); use method marco instead"
                )
        self.settings = read_options(MarcoSettings, self.name, {self.name: {**raw, **forced}})
        options = getattr(context.memory, "options", None)
        for key, value in spec.memory_defaults.items():
            if options is not None and getattr(options, key, value) != value:
                raise ConfigError(
                    f"{self.name} is MARCO with {key}: {value!r}, but memory_options sets {key}: "
                    f"{getattr(options, key)!r}; leave {key} out of memory_options (it applies to every method with "
                    "a memory)"
                )

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        traces = run_marco(examples, self.agent, self.settings, memory=self.context.memory, method=self.name)
        outcomes = []
        for trace in traces:
            proposals = [p for it in trace["iterations"] for p in it["proposals"]]
            tokens = trace["tokens"]
            outcomes.append(
                SingleOutcome(
                    answer=trace["final_answer"],
                    answers=[p["answer"] for p in proposals],
                    texts=[p["text"] for p in proposals],
                    prompt_tokens=sum(t["prompt"] for t in tokens.values()),
                    completion_tokens=sum(t["completion"] for t in tokens.values()),
                    details={"marco": marco_details(trace)},
                    trace=trace,
                )
            )
        return outcomes
