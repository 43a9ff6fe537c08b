"""Turning a finished question into short reusable behaviours (``name: instruction``).

Two steps, both free of the gold answer's text:

1. :func:`trace_facts` reduces a debate trace (``docs/contracts.md``) or a single-agent record to a small dict of
   observable facts: answers per round, when the agents first agreed, whether they drifted afterwards, which
   agents held the final answer, plus the outcome's correctness bit and the trace's per-round ``eta`` flags.
2. A distiller maps facts to behaviours: :class:`RuleDistiller` (deterministic, offline, used in the simulated
   world and in tests) or :class:`LLMDistiller` (one batched call to a :class:`metamod.llm.base.Generator` with
   the ``memory_distill_behaviour`` template).

A behaviour is ``(name, instruction, roles)``; ``roles`` lists the roles it is shown to (empty: every role).

>>> trace = {"rounds": [
...     {"round": 0, "eta": 1, "responses": [{"agent": 0, "answer": "7"}, {"agent": 1, "answer": "7"}]},
...     {"round": 1, "eta": 1, "responses": [{"agent": 0, "answer": "7"}, {"agent": 1, "answer": "7"}]}]}
>>> facts = trace_facts(trace, {"correct": True, "final_answer": "7", "method": "debate"})
>>> facts["consensus_round"], facts["drift_after_consensus"]
(0, False)
>>> [b[0] for b in RuleDistiller().distil([facts], ["2+5?"])[0]]
['stop-at-agreement', 'keep-agreed-answer']
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from metamod.llm.base import chat_checked
from metamod.prompts import render

logger = logging.getLogger(__name__)

Behaviour = tuple[str, str, tuple[str, ...]]

#: Role groups used by the rule-based behaviours.
SOLVER_ROLES: tuple[str, ...] = ("debater", "single", "reasoner")
DECIDER_ROLES: tuple[str, ...] = ("moderator", "judge", "controller")
CHECKER_ROLES: tuple[str, ...] = ("debater", "single", "reasoner", "monitor")

#: Longest instruction kept from an LLM distiller's line (longer ones are cut).
MAX_INSTRUCTION_CHARS = 300

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def normalise_answer(answer: Any) -> str | None:
    """Loose normal form used only to tell whether two extracted answers agree (not for grading).

    >>> normalise_answer(" 42. "), normalise_answer("B"), normalise_answer(None), normalise_answer("  ")
    ('42', 'b', None, None)
    """
    if answer is None:
        return None
    text = re.sub(r"\s+", " ", str(answer)).strip().rstrip(".").strip().lower()
    return text or None


def _ordinal(index: int) -> str:
    return _ORDINALS[index] if 0 <= index < len(_ORDINALS) else f"round-{index}"


def trace_facts(trace: Mapping[str, Any], outcome: Mapping[str, Any]) -> dict[str, Any]:
    """Observable facts of a finished question (no gold text; correctness only as flags).

    Args:
        trace: a debate trace dict (non-empty ``rounds``) or a single-agent record (any dict whose ``rounds`` is
            missing or empty, e.g. the harness's ``{"id", "rounds": [], "single": {...}}``).
        outcome: at least ``correct`` (bool), ``final_answer`` (str or None) and ``method``.

    Returns:
        A JSON-serialisable dict; ``kind`` is ``"debate"`` or ``"single"``.
    """
    final = normalise_answer(outcome.get("final_answer"))
    facts: dict[str, Any] = {
        "method": str(outcome.get("method")),
        "correct": bool(outcome.get("correct")),
        "final_unparsable": final is None,
    }
    rounds = trace.get("rounds")
    if not rounds:
        facts["kind"] = "single"
        return facts
    if not isinstance(rounds, Sequence) or isinstance(rounds, str):
        raise ValueError(f"trace {trace.get('id')!r}: 'rounds' must be a list of rounds, got {type(rounds).__name__}")
    answers: list[list[str | None]] = []
    etas: list[int | None] = []
    for t, rnd in enumerate(rounds):
        responses = rnd.get("responses") if isinstance(rnd, Mapping) else None
        if not isinstance(responses, Sequence) or not responses:
            raise ValueError(f"trace {trace.get('id')!r}: round {t} needs a non-empty 'responses' list")
        ordered = sorted(responses, key=lambda r: int(r.get("agent", 0)))
        answers.append([normalise_answer(r.get("answer")) for r in ordered])
        eta = rnd.get("eta")
        etas.append(None if eta is None else int(eta))
    consensus = next(
        (t for t, row in enumerate(answers) if None not in row and len(set(row)) == 1),
        None,
    )
    drift = consensus is not None and any(row != answers[consensus] for row in answers[consensus + 1 :])
    first_correct = next((t for t, eta in enumerate(etas) if eta == 1), None)
    right_at_start: list[int] = []
    if facts["correct"] and final is not None:
        right_at_start = [i for i, ans in enumerate(answers[0]) if ans == final]
    facts.update(
        {
            "kind": "debate",
            "num_rounds": len(answers),
            "num_agents": len(answers[0]),
            "answers": answers,
            "etas": etas,
            "consensus_round": consensus,
            "consensus_correct": None if consensus is None else etas[consensus],
            "drift_after_consensus": bool(drift),
            "first_correct_round": first_correct,
            "split_at_start": len({a for a in answers[0] if a is not None}) > 1,
            "right_at_start": right_at_start,
            "last_round_unparsable": sum(a is None for a in answers[-1]),
            "stop_reason": trace.get("stop_reason"),
        }
    )
    return facts


class RuleDistiller:
    """Deterministic behaviours from trace facts (the offline/simulated world's distiller).

    Each rule reads one pattern of the debate: agreement that held, agreement followed by drift, agreement on a
    wrong answer, a correct answer proposed but lost, no correct candidate, a first-round split that the right
    agent won, an unparsable answer. It writes a behaviour for the solving roles and one for the deciding roles.

    Args:
        max_behaviours: the most behaviours kept per question (in rule order).
    """

    name = "rule"

    def __init__(self, max_behaviours: int = 4) -> None:
        if max_behaviours < 1:
            raise ValueError(f"max_behaviours must be >= 1, got {max_behaviours}")
        self.max_behaviours = max_behaviours

    def distil(self, batch: list[dict[str, Any]], questions: list[str] | None = None) -> list[list[Behaviour]]:
        """Behaviours for each facts dict of ``batch`` (same order); ``questions`` is unused by the rules."""
        return [self._one(facts)[: self.max_behaviours] for facts in batch]

    def _one(self, f: Mapping[str, Any]) -> list[Behaviour]:
        out: list[Behaviour] = []
        if f.get("final_unparsable"):
            out.append(
                (
                    "answer-format",
                    "End every response with exactly one final answer inside <answer></answer> tags; an answer that "
                    "cannot be parsed counts as wrong.",
                    SOLVER_ROLES,
                )
            )
            out.append(
                (
                    "decision-format",
                    "Give the decision as STOP followed by the answer inside <answer></answer> tags; a decision "
                    "without a parsable answer counts as wrong.",
                    DECIDER_ROLES,
                )
            )
        if f.get("kind") == "single":
            out.extend(self._single(f))
        else:
            out.extend(self._debate(f))
        return out

    @staticmethod
    def _single(f: Mapping[str, Any]) -> list[Behaviour]:
        if f["correct"]:
            return [
                (
                    "direct-derivation",
                    "A careful single step-by-step derivation was enough for a question like this; write each "
                    "intermediate result down before the final answer.",
                    SOLVER_ROLES,
                )
            ]
        return [
            (
                "recheck-steps",
                "A single pass got a question like this wrong: recompute every intermediate result and check that "
                "the final answer answers what was asked.",
                CHECKER_ROLES,
            )
        ]

    @staticmethod
    def _debate(f: Mapping[str, Any]) -> list[Behaviour]:
        out: list[Behaviour] = []
        correct = f["correct"]
        c = f.get("consensus_round")
        c_ok = f.get("consensus_correct")
        drift = f.get("drift_after_consensus")
        if c is not None and not drift and correct:
            out.append(
                (
                    "stop-at-agreement",
                    f"The agents agreed by the {_ordinal(c)} round, the answer held and was right; once every agent "
                    "gives the same answer with consistent reasoning, stop rather than debate further.",
                    DECIDER_ROLES,
                )
            )
            out.append(
                (
                    "keep-agreed-answer",
                    "When your own derivation matches the other agents' answer and nobody names a concrete mistake, "
                    "keep it; changing a shared, checked answer only adds risk.",
                    SOLVER_ROLES,
                )
            )
        elif c is not None and drift and c_ok == 1 and not correct:
            out.append(
                (
                    "stop-before-drift",
                    f"The agents agreed on a right answer in the {_ordinal(c)} round and later drifted to a wrong "
                    "one; stop as soon as all agents agree instead of deliberating further.",
                    DECIDER_ROLES,
                )
            )
            out.append(
                (
                    "resist-late-drift",
                    "Do not abandon an answer the whole group already reached unless a peer points to a specific "
                    "wrong step.",
                    SOLVER_ROLES,
                )
            )
        elif c is not None and c_ok == 0 and not correct:
            out.append(
                (
                    "verify-before-stopping",
                    "All agents agreed on a wrong answer on a similar question; check the decisive step of the "
                    "agreed solution before accepting agreement as the answer.",
                    DECIDER_ROLES,
                )
            )
            out.append(
                (
                    "verify-independently",
                    "Re-derive the result yourself before agreeing with the other agents; a unanimous answer was "
                    "wrong on a similar question.",
                    CHECKER_ROLES,
                )
            )
        elif c is not None and c_ok == 0 and correct:
            out.append(
                (
                    "agreement-is-not-proof",
                    f"The agents first agreed on a wrong answer in the {_ordinal(c)} round and corrected it later; "
                    "early agreement alone is not enough reason to stop on questions like this.",
                    DECIDER_ROLES,
                )
            )
        first_ok = f.get("first_correct_round")
        if not correct and first_ok is not None and not (drift and c_ok == 1):
            out.append(
                (
                    "weigh-minority-arguments",
                    f"A correct answer was proposed in the {_ordinal(first_ok)} round but the final answer was "
                    "wrong; judge answers by the soundness of their derivations, not by counting votes.",
                    DECIDER_ROLES,
                )
            )
            out.append(
                (
                    "consider-dissent",
                    "When a peer's answer differs from yours, check its derivation step by step before dismissing it; "
                    "the minority was right on a similar question.",
                    SOLVER_ROLES,
                )
            )
        if not correct and first_ok is None and f.get("etas") and None not in f["etas"] and c is None:
            out.append(
                (
                    "slow-down",
                    "No agent reached the right answer on a similar question; work through every step carefully and "
                    "check the final computation.",
                    CHECKER_ROLES,
                )
            )
        right = f.get("right_at_start") or []
        if correct and f.get("split_at_start") and right:
            # Which agents were right is kept in the facts (and the LLM distiller's summary); the rule text stays
            # generic (minority vs majority) because agent-specific variants would be merged as near-duplicates.
            if 2 * len(right) < f["num_agents"]:
                out.append(
                    (
                        "back-the-derivation",
                        "In a first-round split, a minority of the agents had the right answer and won; prefer the "
                        "answer whose derivation is complete and checkable over the number of votes.",
                        DECIDER_ROLES,
                    )
                )
                out.append(
                    (
                        "argue-with-steps",
                        "When you disagree with the majority, show the full derivation of your answer so that the "
                        "others can check it; a well-argued minority answer was right on a similar question.",
                        SOLVER_ROLES,
                    )
                )
            else:
                out.append(
                    (
                        "let-splits-resolve",
                        "When the agents split in the first round, let the debate continue until the split resolves; "
                        "the first-round majority held the right answer on a similar question.",
                        DECIDER_ROLES,
                    )
                )
        return out


_LINE = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])?\s*`?([A-Za-z][A-Za-z0-9 _\-]{0,60}?)`?\s*:\s*(\S.*)$")


def parse_behaviours(text: str, limit: int) -> list[tuple[str, str]]:
    """Read ``name: instruction`` lines from a distiller's output (other lines are ignored).

    >>> parse_behaviours("Here you go:\\n- Check Units: convert all quantities first.\\n2) plan: outline steps.", 5)
    [('check-units', 'convert all quantities first.'), ('plan', 'outline steps.')]
    """
    found: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        name = re.sub(r"[\s_]+", "-", match.group(1).strip().lower())
        instruction = match.group(2).strip()[:MAX_INSTRUCTION_CHARS]
        if len(instruction.split()) < 2 or name in {"here-you-go", "behaviours", "behaviors", "question", "outcome"}:
            continue
        found.append((name, instruction))
        if len(found) >= limit:
            break
    return found


def scrub_answers(text: str, answers: list[str]) -> str:
    """Replace whole-token occurrences of question-specific answers with ``[answer]`` (behaviours stay generic).

    >>> scrub_answers("Check that 42 divides 420 before answering 42.", ["42"])
    'Check that [answer] divides 420 before answering [answer].'
    """
    for ans in sorted({a for a in answers if a}, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.]){re.escape(ans)}(?![\w])", "[answer]", text, flags=re.IGNORECASE)
    return text


def facts_summary(facts: Mapping[str, Any]) -> str:
    """A short, gold-free account of what happened, for the LLM distiller.

    >>> print(facts_summary({"kind": "single", "correct": False, "final_unparsable": True, "method": "cot"}))
    A single agent (method cot) answered once. Its answer could not be parsed.
    """
    if facts.get("kind") == "single":
        lines = [f"A single agent (method {facts.get('method')}) answered once."]
        if facts.get("final_unparsable"):
            lines.append("Its answer could not be parsed.")
        return " ".join(lines)
    lines = [f"{facts['num_agents']} agents debated for {facts['num_rounds']} round(s) (method {facts.get('method')})."]
    for t, row in enumerate(facts["answers"]):
        shown = "; ".join(f"Agent {i + 1}: {a if a is not None else 'no parsable answer'}" for i, a in enumerate(row))
        lines.append(f"Round {t + 1}: {shown}")
    c = facts.get("consensus_round")
    lines.append("The agents never all agreed." if c is None else f"All agents first agreed in round {c + 1}.")
    if facts.get("drift_after_consensus"):
        lines.append("After agreeing, some agents changed their answers.")
    if facts.get("final_unparsable"):
        lines.append("The final answer could not be parsed.")
    return "\n".join(lines)


class LLMDistiller:
    """Behaviours written by a language model from a gold-free summary (one batched ``Generator.chat`` call).

    Args:
        generator: any :class:`metamod.llm.base.Generator`.
        max_behaviours: the most behaviours kept per question.
        max_tokens: generation budget per question.
    """

    name = "llm"

    def __init__(self, generator: Any, max_behaviours: int = 4, max_tokens: int = 256) -> None:
        if generator is None or not hasattr(generator, "chat"):
            raise ValueError(
                "memory 'behaviour_bank' with distiller=llm needs a memory LLM (memory_model); "
                "or set memory_options distiller: rule"
            )
        if max_behaviours < 1:
            raise ValueError(f"max_behaviours must be >= 1, got {max_behaviours}")
        self.generator = generator
        self.max_behaviours = max_behaviours
        self.max_tokens = max_tokens

    def distil(self, batch: list[dict[str, Any]], questions: list[str]) -> list[list[Behaviour]]:
        """Behaviours for each (facts, question) pair, in order; greedy decoding for determinism."""
        from metamod.llm.base import SamplingConfig

        if not batch:
            return []
        conversations = []
        for facts, question in zip(batch, questions, strict=True):
            solver = "a single agent" if facts.get("kind") == "single" else "a debate between agents"
            prompt = render(
                "memory_distill_behaviour",
                question=question,
                solver=solver,
                summary=facts_summary(facts),
                outcome="correct" if facts["correct"] else "wrong",
                max_behaviours=self.max_behaviours,
            )
            conversations.append([{"role": "user", "content": prompt}])
        sampling = SamplingConfig(temperature=0.0, max_tokens=self.max_tokens, n=1, seed=0)
        generations = chat_checked(self.generator, conversations, sampling, who="distiller generator")
        out: list[list[Behaviour]] = []
        for facts, gen in zip(batch, generations, strict=True):
            answers = [a for row in facts.get("answers", []) for a in row if a]
            parsed = parse_behaviours(gen.text, self.max_behaviours)
            if not parsed:
                logger.warning("LLM distiller output had no 'name: instruction' line: %r", gen.text[:200])
            out.append([(name, scrub_answers(instr, answers), ()) for name, instr in parsed])
        return out
