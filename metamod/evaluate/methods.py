"""Every evaluation method as one row of ONE table: ``name -> MethodSpec``.

A row says what a method is (its table label, the loop it runs in, the generators it needs, the memory it brings
and that memory's defaults, the EvalConfig keys its results depend on, the answer kinds it can solve) and which
class runs it (``runner``, imported on first use, so reading the table imports no method code: ``metamod eval
--help`` and config checks stay fast). Rows that differ only in data share one runner: the 22 Bayesian Cheatsheet
rows are all chain of thought (``single:SingleAgentMethod``) with a memory of their own, MC², Micro-update and the
MRO loop share one runner, the MARCO ablations are MARCO with fixed settings.

``loop`` is ``"debate"`` for the decision layers replayed over the shared debate transcripts (they implement
``decide(round_index, debates)``); every other loop runs itself (``run(examples)``): ``"single"`` (one agent,
its own prompts), ``"mro"`` (the Reasoner / Monitor / Controller loop) and ``"marco"`` (the MARCO loop).

A method of your own is a :class:`MethodSpec` in your package, named in the config by its dotted path
(``methods: [my_pkg.methods:MY_METHOD]``); its ``runner`` is the dotted path of its class.

>>> spec = method_spec("mc2")
>>> spec.label, spec.loop, spec.memory, spec.knobs
('MC² (MRO + MCA)', 'mro', 'mca', ('max_iterations', 'mro_simulation'))
>>> method_spec("bc_refit").memory_defaults
{'online': True, 'refit': True}
>>> sorted(name for name, s in METHODS.items() if s.loop == "debate")[:3]
['adjudication_only', 'consensus', 'gate_agree_majority']
>>> method_spec("majority")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
KeyError: "Unknown evaluation method 'majority'. Valid names: ace, ace_cold, adjudication_only, ..."
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from metamod.errors import ConfigError
from metamod.registry import import_dotted, resolve

#: the loops a method can run in (see the module docstring)
LOOPS = ("debate", "single", "mro", "marco")
#: the answer kinds of the code-reasoning tasks (the only ones the code methods solve)
CODE_KINDS = ("code_output", "code_input", "code_function")


@dataclass(frozen=True)
class MethodSpec:
    """One evaluation method (a row of :data:`METHODS`).

    Attributes:
        name: the name configs use (``methods: [...]``).
        label: the row name in tables and plots.
        runner: ``package.module:Class`` of the class that runs it, called as ``Class(context, spec)``.
        loop: one of :data:`LOOPS`.
        needs: the :class:`~metamod.evaluate.decision.LayerContext` generators it calls besides the agent
            (``moderator``, ``moderator_base``, ``judge``); a moderator-type method calls ``needs[0]``. A debate
            row that also samples the debater model lists ``agent`` (a self-consistency gate; simulated debaters
            stand in for it).
        memory: a memory it brings itself (a :data:`metamod.memory.MEMORIES` name), saved per seed and method.
        memory_defaults: that memory's option defaults for this method (under ``memory_options``; a row-defining
            default a method checks, like MARCO v2's ``condense: false``, must not be overridden).
        knobs: the EvalConfig keys its results depend on besides its generators' (resume fingerprints).
        answer_kinds: the only answer kinds it can solve (empty: any), checked before any model loads.
        settings: fixed settings its runner reads (``template``: the single agent's prompt; ``forced``: MARCO
            settings an ablation fixes).
    """

    name: str
    label: str
    runner: str
    loop: str = "single"
    needs: tuple[str, ...] = ()
    memory: str | None = None
    memory_defaults: Mapping[str, Any] = field(default_factory=dict)
    knobs: tuple[str, ...] = ()
    answer_kinds: tuple[str, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.loop not in LOOPS:
            raise ValueError(f"method {self.name!r}: loop must be one of {LOOPS}, got {self.loop!r}")

    @property
    def replays_debates(self) -> bool:
        """Whether it decides over the shared debate transcripts (``decide``) rather than running itself."""
        return self.loop == "debate"

    def build(self, context: Any) -> Any:
        """The runner object for ``context`` (imports the runner's module on first use)."""
        return import_dotted(self.runner)(context, self)


_D, _S = "metamod.evaluate.decision:", "metamod.evaluate.single:"
_MRO, _MARCO = "metamod.evaluate.mro.methods:", "metamod.evaluate.marco_methods:"
_CODE, _BASE = "metamod.evaluate.code_baselines:", "metamod.evaluate.baselines."
_COT = _S + "SingleAgentMethod"
_MRO_KNOBS = ("max_iterations", "mro_simulation")


def _debate(name: str, label: str, runner: str, **kw: Any) -> MethodSpec:
    return MethodSpec(name, label, _D + runner, loop="debate", **kw)


def _cheatsheet(name: str, label: str, memory: str, defaults: dict[str, Any]) -> MethodSpec:
    """A Bayesian Cheatsheet row: chain of thought with a memory of its own (paper tables 1, 2, 4; docs/cheatsheet.md)."""
    return MethodSpec(name, label, _COT, memory=memory, memory_defaults=defaults)


def _code(name: str, label: str, runner: str, **kw: Any) -> MethodSpec:
    return MethodSpec(name, label, runner, answer_kinds=CODE_KINDS, knobs=("code_simulation",), **kw)


_ROWS: tuple[MethodSpec, ...] = (
    # ---- Meta-Moderator: decision layers over the shared debates (docs/evaluation.md)
    _debate("majority_vote", "MAD (Majority Voting)", "MajorityVote"),
    _debate("consensus", "MAD (Consensus)", "Consensus"),
    _debate("judge", "MAD (LLM-as-a-Judge)", "Judge", needs=("judge",)),
    _debate("moderator_prompted", "Meta-Moderator* (untrained)", "Moderator", needs=("moderator_base",)),
    _debate("moderator", "Meta-Moderator", "Moderator", needs=("moderator",)),
    MethodSpec(
        "moderator_threshold",
        "Meta-Moderator (P(STOP) >= tau)",
        "metamod.evaluate.stopping:ModeratorThreshold",
        loop="debate",
        needs=("moderator",),
    ),
    _debate(
        "adjudication_only", "Adjudication-only", "AdjudicationOnly", needs=("moderator",), knobs=("fixed_rounds",)
    ),
    _debate("stopping_only", "Stopping-only", "StoppingOnly", needs=("moderator",)),
    # ---- single-agent baselines
    MethodSpec("single_naive", "Single (Naive)", _COT, settings={"template": "single_naive"}),
    MethodSpec("single_cot", "Single (CoT)", _COT),
    MethodSpec("single_reflection", "Single (Reflection)", _S + "SingleReflection"),
    MethodSpec("single_cot_sc", "Single (CoT-SC)", _S + "SingleCoTSC", knobs=("sc_samples",)),
    MethodSpec("bot", "Buffer-of-Thought", _COT, memory="bot"),
    # ---- MC²: the MRO loop and its ablations (docs/mc2.md), meta-reasoning baselines (MC² appendix B)
    MethodSpec("reasoner_only", "Reasoner only", _MRO + "ReasonerOnly", loop="mro", knobs=("mro_simulation",)),
    MethodSpec("mro", "MRO (R+M+C)", _MRO + "MRO", loop="mro", knobs=_MRO_KNOBS),
    MethodSpec(
        "mro_trained_controller",
        "MRO + trained Controller",
        _MRO + "MROTrainedController",
        loop="mro",
        needs=("moderator",),
        knobs=_MRO_KNOBS,
    ),
    MethodSpec(
        "mro_prompted_moderator",
        "MRO + prompted moderator",
        _MRO + "MROTrainedController",
        loop="mro",
        needs=("moderator_base",),
        knobs=_MRO_KNOBS,
    ),
    MethodSpec("mc2", "MC² (MRO + MCA)", _MRO + "MRO", loop="mro", memory="mca", knobs=_MRO_KNOBS),
    MethodSpec(
        "mro_micro",
        "R+M+C + Micro-update",
        _MRO + "MRO",
        loop="mro",
        memory="mca",
        memory_defaults={"consolidate": False},
        knobs=_MRO_KNOBS,
    ),
    MethodSpec(
        "reasoner_updates",
        "Reasoner + Updates",
        _MRO + "ReasonerOnly",
        loop="mro",
        memory="mca",
        memory_defaults={"roles": ["reasoner"]},
        knobs=("mro_simulation",),
    ),
    MethodSpec("tot", "ToT (BFS)", _BASE + "tree_of_thought:TreeOfThought"),
    MethodSpec("meta_prompting", "Meta-Prompting", _BASE + "meta_prompting:MetaPrompting"),
    MethodSpec("meta_reasoner", "Meta-Reasoner", _BASE + "meta_reasoner:MetaReasoner", knobs=("sc_samples",)),
    MethodSpec("ttpi", "TTPI (PPL)", _BASE + "ttpi:TTPI"),
    # ---- MARCO and its ablations, code-reasoning baselines (docs/marco.md)
    _code("marco", "MARCO", _MARCO + "Marco", loop="marco", memory="marco"),
    _code(
        "marco_v1",
        "MARCO v1 (no meta-reflection)",
        _MARCO + "Marco",
        loop="marco",
        settings={"forced": {"meta_reflection": False}},
    ),
    _code(
        "marco_v2",
        "MARCO v2 (no condenser)",
        _MARCO + "Marco",
        loop="marco",
        memory="marco",
        memory_defaults={"condense": False},
    ),
    _code(
        "marco_v3",
        "MARCO v3 (no cross-referencing)",
        _MARCO + "Marco",
        loop="marco",
        memory="marco",
        settings={"forced": {"cross_reference": False}},
    ),
    _code("cot", "CoT", _CODE + "CodeCoT"),
    _code("chain_of_code", "Chain-of-Code", _CODE + "ChainOfCode"),
    _code("rhda", "RHDA", _CODE + "RHDA"),
    # ---- the Bayesian Cheatsheet's rows (docs/cheatsheet.md section 3)
    _cheatsheet("bc_static", "BC-PP (static)", "cheatsheet", {}),
    _cheatsheet("bc_centroids", "BC-centroids (static)", "cheatsheet", {"retrieval": "centroids"}),
    _cheatsheet("bc_online", "BC-TTT (online, no refit)", "cheatsheet", {"online": True}),
    _cheatsheet("bc_refit", "BC-TTT (online, refit)", "cheatsheet", {"online": True, "refit": True}),
    _cheatsheet("bc_cold", "BC-TTT (cold start)", "cheatsheet", {"cold_start": True, "online": True, "refit": True}),
    _cheatsheet("dp_online", "DP-GMM pooled (online)", "cheatsheet", {"organiser": "dp", "online": True}),
    _cheatsheet("random_behaviours", "Random k'", "cheatsheet", {"organiser": "random", "space": "raw"}),
    _cheatsheet(
        "metacognitive_reuse", "Metacognitive Reuse (flat cosine)", "cheatsheet", {"organiser": "flat", "space": "raw"}
    ),
    _cheatsheet(
        "direct_retrieval", "Direct retrieval (projected)", "cheatsheet", {"organiser": "flat", "space": "projected"}
    ),
    _cheatsheet("kmeans_hard_static", "Hard k-means (static)", "cheatsheet", {"organiser": "kmeans_hard"}),
    _cheatsheet(
        "kmeans_hard_online", "Hard k-means (online)", "cheatsheet", {"organiser": "kmeans_hard", "online": True}
    ),
    _cheatsheet(
        "kmeans_hard_refit",
        "Hard k-means (online, refit)",
        "cheatsheet",
        {"organiser": "kmeans_hard", "online": True, "refit": True},
    ),
    _cheatsheet("kmeans_soft_static", "Soft k-means (static)", "cheatsheet", {"organiser": "kmeans_soft"}),
    _cheatsheet(
        "kmeans_soft_online", "Soft k-means (online)", "cheatsheet", {"organiser": "kmeans_soft", "online": True}
    ),
    _cheatsheet(
        "kmeans_soft_refit",
        "Soft k-means (online, refit)",
        "cheatsheet",
        {"organiser": "kmeans_soft", "online": True, "refit": True},
    ),
    _cheatsheet("dc_cu_static", "DC-Cu (static)", "dc", {"curator": "cumulative", "online": False}),
    _cheatsheet("dc_cu", "DC-Cu (online curation)", "dc", {"curator": "cumulative"}),
    _cheatsheet("dc_rs", "DC-RS (online curation)", "dc", {"curator": "retrieval_synthesis"}),
    _cheatsheet("ace", "ACE (online curator)", "ace", {}),
    _cheatsheet("dc_cu_cold", "DC-Cu (cold start)", "dc", {"curator": "cumulative", "cold_start": True}),
    _cheatsheet("ace_cold", "ACE (cold start)", "ace", {"cold_start": True}),
)

#: the gate baseline's round-0 signals (:mod:`metamod.evaluate.gate`), as its rows' labels name them
GATE_SIGNALS = {
    "agree": "round-0 agreement",
    "vote_share": "round-0 vote share",
    "self_consistency": "self-consistency",
}


def gate_row(name: str, signal: str, then: str) -> MethodSpec:
    """A gate row: ``signal`` at round 0, the debate row ``then`` after; needs and knobs follow ``then`` (plus the
    agent and ``sc_samples`` for ``self_consistency``).

    >>> row = gate_row("my_gate", "agree", "stopping_only")
    >>> row.label, row.needs, row.settings["then"]
    ('Gate (round-0 agreement) -> Stopping-only', ('moderator',), 'stopping_only')
    """
    if signal not in GATE_SIGNALS:
        raise ConfigError(f"gate row {name!r}: signal must be one of {sorted(GATE_SIGNALS)}, got {signal!r}")
    delegate = _BY_NAME.get(then)
    if delegate is None or not delegate.replays_debates:
        debate_rows = sorted(n for n, s in _BY_NAME.items() if s.replays_debates)
        raise ConfigError(f"gate row {name!r}: then must be one of the debate rows {debate_rows}, got {then!r}")
    sampled = signal == "self_consistency"  # samples the debater model: the agent (simulated: the debaters)
    knobs = delegate.knobs + (("sc_samples",) if sampled else ())
    label = f"Gate ({GATE_SIGNALS[signal]}) -> {delegate.label}"
    settings = {"signal": signal, "then": then}
    return MethodSpec(
        name,
        label,
        "metamod.evaluate.gate:Gate",
        "debate",
        delegate.needs + (("agent",) if sampled else ()),
        knobs=knobs,
        settings=settings,
    )


_BY_NAME = {spec.name: spec for spec in _ROWS}
#: the gate rows (docs/evaluation.md, "Gate baseline"): each signal before majority vote, consensus and Meta-Moderator
_GATES = tuple(
    gate_row(f"gate_{short}_{then_short}", signal, then)
    for then_short, then in (("majority", "majority_vote"), ("consensus", "consensus"), ("moderator", "moderator"))
    for short, signal in (("agree", "agree"), ("share", "vote_share"), ("sc", "self_consistency"))
    if (signal, then) != ("agree", "consensus")  # consensus already stops on round-0 agreement: that row IS consensus
)

#: every evaluation method: the ONE table
METHODS: dict[str, MethodSpec] = {spec.name: spec for spec in (*_ROWS, *_GATES)}


def method_spec(name: str) -> MethodSpec:
    """The row of ``name``, or the :class:`MethodSpec` a dotted path ``package.module:ATTR`` names.

    Raises:
        KeyError: for an unknown name (the message lists the valid ones) or a dotted path that is not a spec.
    """
    spec = resolve(METHODS, name, what="evaluation method")
    if not isinstance(spec, MethodSpec):
        raise KeyError(f"evaluation method {name!r} must name a metamod.evaluate.methods.MethodSpec, got {spec!r}")
    return spec


def build_method(name: str, context: Any) -> Any:
    """The object that runs method ``name`` with ``context`` (a decision layer or a method that runs itself).

    >>> from metamod.evaluate.decision import LayerContext
    >>> layer = build_method("consensus", LayerContext(max_rounds=3))
    >>> type(layer).__name__, layer.name, layer.spec.label
    ('Consensus', 'consensus', 'MAD (Consensus)')
    """
    return method_spec(name).build(context)


def check_method_kinds(methods: Sequence[str], examples: Mapping[str, Sequence[Any]]) -> None:
    """Refuse, before any model loads, a method that only handles some answer kinds on a task of another kind.

    >>> from metamod.tasks.base import Example
    >>> check_method_kinds(["marco"], {"arith": [Example(id="q", question="1+1?", gold="2", kind="math")]})
    Traceback (most recent call last):
    ...
    metamod.errors.ConfigError: method 'marco' needs tasks of answer kind code_output, code_input or code_function (code-reasoning tasks, docs/tasks.md); task 'arith' has kind 'math'
    """
    for method in methods:
        kinds = method_spec(method).answer_kinds
        if not kinds:
            continue
        for task, exs in examples.items():
            bad = sorted({ex.kind for ex in exs} - set(kinds))
            if bad:
                raise ConfigError(
                    f"method {method!r} needs tasks of answer kind {', '.join(kinds[:-1])} or {kinds[-1]} "
                    f"(code-reasoning tasks, docs/tasks.md); task {task!r} has kind {bad[0]!r}"
                )
