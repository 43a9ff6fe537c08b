"""The one debater factory of rollout and eval: per-agent seeds, groups, shared generators (tiny hf model, CPU)."""

from __future__ import annotations

import json

import pytest

from metamod.evaluate.build import build_debaters as eval_debaters
from metamod.evaluate.build import debater_sampling, debater_spec, layer_context
from metamod.evaluate.config import EvalConfig
from metamod.llm import BackendConfig, SamplingConfig, build_generator
from metamod.rollout.debate import DebateStats, run_debates
from metamod.rollout.debater_factory import DebaterSpec, LoadedBackend, agent_seed, build_debater_groups
from metamod.rollout.debaters import LLMDebaters
from metamod.rollout.run import RolloutConfig
from metamod.rollout.run import build_debaters as rollout_debaters
from metamod.rollout.simulated import SimulatedDebaters, SimulationConfig
from metamod.tasks import load_task

NUM_QUESTIONS = 6


class Counting:
    """Wraps a generator and counts its ``chat`` calls.

    ``per_request=True`` sends each conversation in its own call, so each request is seeded on its own: the
    semantics of vLLM's ``SamplingParams(seed=...)`` (and of OpenAI-compatible servers), reproduced on the hf backend.
    """

    def __init__(self, generator, *, per_request: bool = False) -> None:
        self.generator = generator
        self.per_request = per_request
        self.name = generator.name
        self.context_length = generator.context_length
        self.calls = 0

    def chat(self, conversations, sampling):
        self.calls += 1
        if not self.per_request:
            return self.generator.chat(conversations, sampling)
        return [g for c in conversations for g in self.generator.chat([c], sampling)]

    def count_tokens(self, conversation):
        return self.generator.count_tokens(conversation)


@pytest.fixture(scope="module")
def tiny_dir(tiny_model_dir):
    return tiny_model_dir  # the session's tiny model (tests/conftest.py)


@pytest.fixture(scope="module")
def tiny_gen(tiny_dir):
    return build_generator(BackendConfig(backend="hf", model=str(tiny_dir), device="cpu", batch_size=8))


@pytest.fixture(scope="module")
def questions():
    return list(load_task("arith", num_examples=NUM_QUESTIONS, seed=0, levels=[1]).examples())


def _eval_config(tiny_dir, **overrides) -> EvalConfig:
    options = dict(
        debaters="hf",
        debater_model=str(tiny_dir),
        num_agents=2,
        temperature=1.0,
        max_tokens=8,
        methods=["majority_vote"],
        plots=False,
    )
    options.update(overrides)
    return EvalConfig(**options)


def _round0_texts(groups, questions, stats=None) -> list[list[str]]:
    traces = list(run_debates(questions, groups, max_rounds=1, stats=stats, progress=False, task="arith"))
    return [[r["text"] for r in trace["rounds"][0]["responses"]] for trace in traces]


def _distinct(texts: list[list[str]]) -> int:
    """Number of questions whose agents did not all write the same round-0 text."""
    return sum(len(set(per_agent)) > 1 for per_agent in texts)


# ------------------------------------------------------------------------------------------------ seeds


@pytest.mark.parametrize("per_request", [False, True], ids=["hf", "per-request-seeding"])
def test_seeded_eval_debaters_differ_at_round_0(tiny_dir, tiny_gen, questions, per_request):
    agent = Counting(tiny_gen, per_request=per_request)
    groups = eval_debaters(_eval_config(tiny_dir), seed=0, agent=agent)
    assert [g.sampling.seed for g in groups] == [0, 1] and groups[0] is not groups[1]
    assert groups[0].generator is groups[1].generator is agent
    stats = DebateStats()
    texts = _round0_texts(groups, questions, stats)
    assert _distinct(texts) >= NUM_QUESTIONS - 1, texts
    # distinct groups over one generator: the engine makes one call per group per round, labelled apart
    assert stats.calls == {f"hf:{tiny_dir}": 1, f"hf:{tiny_dir}#1": 1}


def test_one_shared_seed_gave_identical_round_0(tiny_gen, questions):
    """The previous eval construction (one group, one seed for every agent) under per-request seeding (vLLM)."""
    shared = SamplingConfig(temperature=1.0, max_tokens=8, seed=0)
    old = LLMDebaters(Counting(tiny_gen, per_request=True), shared, backend="hf")
    assert _distinct(_round0_texts([old, old], questions)) == 0
    # on hf a seed is applied per chat call: the same seed in two separate calls gives the same samples too
    twins = [LLMDebaters(tiny_gen, shared, backend="hf") for _ in range(2)]
    assert _distinct(_round0_texts(twins, questions)) == 0


def test_rollout_and_eval_agree_on_agent_seeds(tiny_dir, tiny_gen):
    backend = json.dumps([{"backend": "hf", "model": str(tiny_dir), "device": "cpu"}])
    rollout = RolloutConfig(debaters=backend, num_agents=3, temperature=1.0, top_p=0.9, max_tokens=8, seed=5)
    via_rollout = rollout_debaters(rollout)
    via_eval = eval_debaters(_eval_config(tiny_dir, num_agents=3, top_p=0.9), seed=5, agent=tiny_gen)
    expected = [agent_seed(5, a) for a in range(3)]
    assert expected == [5, 6, 7]
    for groups in (via_rollout, via_eval):
        assert [g.agent_settings(a)["seed"] for a, g in enumerate(groups)] == expected
        assert len({id(g) for g in groups}) == 3 and len({id(g.generator) for g in groups}) == 1
    assert [g.agent_settings(a) for a, g in enumerate(via_rollout)] == [
        g.agent_settings(a) for a, g in enumerate(via_eval)
    ]
    assert rollout.debater_spec() == DebaterSpec(temperature=1.0, top_p=0.9, max_tokens=8, seed=5)


def test_single_agent_sampling_is_debater_0s(tiny_dir, tiny_gen):
    config = _eval_config(tiny_dir, top_p=0.8)
    assert debater_sampling(config, 4) == debater_spec(config, 4).sampling(0)
    assert debater_sampling(config, 4).seed == 4
    debaters = eval_debaters(config, seed=4, agent=tiny_gen)
    context = layer_context(config, 4, {"agent": tiny_gen}, debaters)
    assert context.agent_sampling == debaters[0].sampling and context.agent is tiny_gen


# ------------------------------------------------------------------------------------------------ groups


def test_unseeded_agents_sharing_a_backend_are_one_call_per_round(tiny_gen, questions):
    agent = Counting(tiny_gen)
    groups = build_debater_groups([LoadedBackend("hf", agent)], DebaterSpec(temperature=1.0, max_tokens=4), 3)
    assert groups[0] is groups[1] is groups[2]
    stats = DebateStats()
    list(run_debates(questions[:2], groups, max_rounds=2, stats=stats, progress=False, task="arith"))
    assert agent.calls == 2 and list(stats.calls.values()) == [2]


def test_generators_are_loaded_once_per_distinct_backend(tiny_dir, tiny_gen):
    loads: list[BackendConfig] = []

    def load(config: BackendConfig):
        loads.append(config)
        return tiny_gen

    a = BackendConfig(backend="hf", model=str(tiny_dir), device="cpu")
    b = BackendConfig(backend="hf", model=str(tiny_dir), device="cpu", adapter="some/adapter")
    unseeded = build_debater_groups([a, a, b], DebaterSpec(), 3, load=load)
    assert len(loads) == 2 and unseeded[0] is unseeded[1] and unseeded[2] is not unseeded[0]
    assert unseeded[2].agent_settings(2)["adapter"] == "some/adapter" and "adapter" not in unseeded[0].extra
    loads.clear()
    seeded = build_debater_groups([a, a, b], DebaterSpec(seed=0), 3, load=load)
    assert len(loads) == 2 and len({id(g) for g in seeded}) == 3
    assert [g.sampling.seed for g in seeded] == [0, 1, 2]


def test_memory_and_confidence_reach_every_group(tiny_dir, tiny_gen):
    memory = object()
    groups = eval_debaters(_eval_config(tiny_dir, num_agents=3), seed=0, agent=tiny_gen, memory=memory)
    assert all(g.memory is memory for g in groups)
    spec = DebaterSpec(seed=1, confidence=True)
    groups = build_debater_groups([LoadedBackend("hf", tiny_gen)], spec, 2, memory=memory)
    assert all(g.confidence and g.memory is memory for g in groups)


def test_simulated_debaters_are_one_group():
    groups = build_debater_groups(SimulationConfig(sim_seed=2), DebaterSpec(seed=9), 3)
    assert isinstance(groups[0], SimulatedDebaters) and groups[0] is groups[1] is groups[2]
    evaluated = eval_debaters(EvalConfig(simulation={"sim_seed": 10}, methods=["majority_vote"]), seed=3)
    assert evaluated[0] is evaluated[1] and evaluated[0].config.sim_seed == 13
    rolled = rollout_debaters(RolloutConfig(num_agents=2, simulation={"sim_seed": 4}))
    assert rolled[0] is rolled[1] and rolled[0].agent_settings(0)["sim_seed"] == 4


def test_bad_arguments_fail_with_the_fix(tiny_gen):
    with pytest.raises(ValueError, match="one per agent"):
        build_debater_groups([LoadedBackend("hf", tiny_gen)] * 2, DebaterSpec(), 3)
    with pytest.raises(ValueError, match="at least 2 debaters"):
        build_debater_groups([LoadedBackend("hf", tiny_gen)], DebaterSpec(), 1)
    with pytest.raises(TypeError, match="BackendConfig or a LoadedBackend"):
        build_debater_groups([tiny_gen], DebaterSpec(), 2)
    with pytest.raises(ValueError, match="temperature"):
        DebaterSpec(temperature=-1.0)
