"""ONE way to build the debaters of a debate, shared by ``metamod rollout`` and ``metamod eval``.

:class:`DebaterSpec` holds what defines an agent's decoding (temperature, top_p, max_tokens, seed, confidence);
:func:`build_debater_groups` turns it, the backends and the number of agents into the ``num_agents`` debater groups
the engine (:func:`metamod.rollout.debate.run_debates`) takes, agent order:

- one generator per distinct backend (a :class:`~metamod.llm.BackendConfig` is loaded once; a
  :class:`LoadedBackend` wraps a generator that is already loaded, e.g. the one eval shares with its single-agent
  baselines);
- seeded: agent ``a`` samples with ``seed + a`` (:func:`agent_seed`) in its own group, so each agent is its own
  batched call per round. Under per-request seeding (vLLM, OpenAI-compatible servers) the same seed on the same
  round-0 prompt gives the same sample, so one shared seed would start every debate in consensus;
- unseeded: agents with the same backend share ONE group, so each round is one batched call for all of them;
- simulated debaters (a :class:`~metamod.rollout.simulated.SimulationConfig` instead of backends): one
  :class:`~metamod.rollout.simulated.SimulatedDebaters` group for every agent (its seed is ``sim_seed``).

Each agent's resolved settings (its seed included) are recorded in traces through ``agent_settings``.

>>> from metamod.llm.base import Generation
>>> class Echo:
...     name, context_length = "echo", None
...     def chat(self, conversations, sampling):
...         return [Generation(f"seed {sampling.seed}") for _ in conversations]
...     def count_tokens(self, conversation):
...         return 0
>>> echo = LoadedBackend("echo", Echo())
>>> seeded = build_debater_groups([echo], DebaterSpec(temperature=1.0, seed=7), num_agents=3)
>>> [g.agent_settings(a)["seed"] for a, g in enumerate(seeded)], len({id(g) for g in seeded})
([7, 8, 9], 3)
>>> unseeded = build_debater_groups([echo], DebaterSpec(), num_agents=3)
>>> len({id(g) for g in unseeded}), unseeded[0].agent_settings(2)["seed"]
(1, None)
>>> from metamod.rollout.simulated import SimulationConfig
>>> sim = build_debater_groups(SimulationConfig(sim_seed=3), DebaterSpec(), num_agents=2)
>>> sim[0] is sim[1], sim[0].simulated
(True, True)
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from metamod.llm import BackendConfig, Generator, SamplingConfig
from metamod.rollout.debaters import DebaterGroup, LLMDebaters
from metamod.rollout.simulated import SimulatedDebaters, SimulationConfig

logger = logging.getLogger(__name__)


def agent_seed(seed: int | None, agent: int) -> int | None:
    """The sampling seed of agent ``agent`` (0-based) when the run's seed is ``seed``: ``seed + agent``.

    >>> agent_seed(10, 0), agent_seed(10, 2), agent_seed(None, 1)
    (10, 12, None)
    """
    return None if seed is None else seed + agent


@dataclass
class DebaterSpec:
    """What defines an LLM debater's decoding; the same for every agent except the seed (see :func:`agent_seed`)."""

    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature (0 = greedy)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass."})
    max_tokens: int = field(default=512, metadata={"help": "Max new tokens per response."})
    seed: int | None = field(
        default=None,
        metadata={
            "help": "Base sampling seed: agent a samples with seed + a in its own batched call (None: unseeded)."
        },
    )
    confidence: bool = field(
        default=False, metadata={"help": "Ask debaters for a confidence estimate (the confidence_instruction prompt)."}
    )
    stop: list[str] | None = field(
        default=None,
        metadata={
            "help": "Strings that end a response, not included (e.g. ['\\nQuestion:'] stops a few-shot prompted "
            "model from writing the next example). None: only the end-of-turn token."
        },
    )

    def __post_init__(self) -> None:
        self.sampling()  # SamplingConfig checks the ranges and says which value is wrong

    def sampling(self, agent: int = 0) -> SamplingConfig:
        """The decoding settings of agent ``agent`` (agent 0 samples with ``seed`` itself).

        >>> DebaterSpec(temperature=1.0, max_tokens=8, seed=5).sampling(1)
        SamplingConfig(temperature=1.0, top_p=1.0, max_tokens=8, n=1, seed=6, stop=None, logprobs=False, top_logprobs=0)
        """
        return SamplingConfig(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=agent_seed(self.seed, agent),
            stop=list(self.stop) if self.stop else None,
        )


@dataclass
class LoadedBackend:
    """An already-loaded generator and the backend name recorded in traces.

    Attributes:
        backend: backend name for traces (``"hf"``, ``"vllm"``, ``"openai"``, ...).
        generator: the loaded :class:`~metamod.llm.base.Generator`.
        settings: extra per-agent settings recorded in traces (e.g. ``{"adapter": ...}``).
    """

    backend: str
    generator: Generator
    settings: dict[str, Any] = field(default_factory=dict)


def _backend_key(backend: BackendConfig | LoadedBackend) -> str:
    if isinstance(backend, LoadedBackend):
        return f"loaded:{id(backend.generator)}:{backend.backend}:{json.dumps(backend.settings, sort_keys=True)}"
    if isinstance(backend, BackendConfig):
        return "config:" + json.dumps(dataclasses.asdict(backend), sort_keys=True, default=str)
    raise TypeError(f"a debater backend is a BackendConfig or a LoadedBackend, got {type(backend).__name__}")


def build_debater_groups(
    backends: SimulationConfig | Sequence[BackendConfig | LoadedBackend],
    spec: DebaterSpec,
    num_agents: int,
    *,
    memory: Any = None,
    load: Callable[[BackendConfig], Generator] | None = None,
) -> list[DebaterGroup]:
    """The ``num_agents`` debater groups of a debate, agent order (the one factory of rollout and eval).

    Args:
        backends: one backend shared by every agent or one per agent, each a :class:`~metamod.llm.BackendConfig`
            (loaded once per distinct config) or a :class:`LoadedBackend`; or a
            :class:`~metamod.rollout.simulated.SimulationConfig` for simulated debaters (``spec`` and ``memory``
            then do not apply).
        spec: decoding settings; with ``spec.seed`` set, agent ``a`` samples with ``spec.seed + a``.
        num_agents: N, the number of debaters (>= 2).
        memory: passed to every LLM debater group (its guidance is prepended to the debater prompts).
        load: builds a generator from a backend config (default :func:`metamod.llm.build_generator`).

    Returns:
        ``num_agents`` groups. Agents with the same backend and the same seed share a group object (one batched
        call per round for all of them); seeded agents each get their own group (their own call), still sharing
        the generator.

    Raises:
        ValueError: ``num_agents < 2`` or a number of backends that is neither 1 nor ``num_agents``.
    """
    if num_agents < 2:
        raise ValueError(f"a debate needs at least 2 debaters, got num_agents={num_agents}")
    if isinstance(backends, SimulationConfig):
        return [SimulatedDebaters(backends)] * num_agents
    backends = list(backends)
    if len(backends) == 1:
        backends = backends * num_agents
    if len(backends) != num_agents:
        raise ValueError(
            f"got {len(backends)} debater backends for num_agents={num_agents}; give one (shared by every agent) or "
            "one per agent"
        )
    if load is None:
        from metamod.llm import build_generator as load
    generators: dict[str, Generator] = {}
    groups: dict[tuple[str, int | None], LLMDebaters] = {}
    out: list[DebaterGroup] = []
    for agent, backend in enumerate(backends):
        key = _backend_key(backend)
        if key not in generators:
            generators[key] = backend.generator if isinstance(backend, LoadedBackend) else load(backend)
        seed = agent_seed(spec.seed, agent)
        if (key, seed) not in groups:
            if isinstance(backend, LoadedBackend):
                name, settings = backend.backend, dict(backend.settings)
            else:
                name, settings = backend.backend, {"adapter": backend.adapter} if backend.adapter else {}
            groups[(key, seed)] = LLMDebaters(
                generators[key],
                spec.sampling(agent),
                backend=name,
                confidence=spec.confidence,
                memory=memory,
                settings=settings or None,
            )
        out.append(groups[(key, seed)])
    logger.debug(
        "%d debaters: %d group(s) over %d generator(s), seeds %s",
        num_agents,
        len(groups),
        len(generators),
        [agent_seed(spec.seed, a) for a in range(num_agents)],
    )
    return out
