"""What the MRO roles say: their prompts (built here, by name, from ``templates.yaml``) and the parsers of their outputs.

Role outputs are tagged fields, one per line (``FIELD: value``; a value runs until the next known field), or a JSON
object with the same keys in lower case. Both are parsed without ``eval``. What happens with malformed output is
decided here, once, and recorded in the ``parse`` field of each role record (the results count them):

=============  ===============  ================================================================================
role           ``parse``        meaning / fallback
=============  ===============  ================================================================================
reasoner       ``ok``           an answer was found (``<answer>`` tags, ``\\boxed``, "the answer is", ...)
reasoner       ``no_answer``    none found: the candidate answer is ``None`` (graded wrong); the loop goes on
monitor        ``tagged``       ``ERROR_FOUND`` read from the tagged fields
monitor        ``json``         read from a JSON object
monitor        ``unparsed``     no verdict: ``error_found`` is ``None``; the raw text is the report
controller     ``tagged`` /     ``ACTION`` read from the fields
               ``json``
controller     ``keyword``      no ``ACTION`` field: the first of ACCEPT / PATCH / RESTART anywhere in the text
controller     ``default``      no action word at all: RESTART when the monitor found an error (or gave no
                                verdict), else ACCEPT
controller     ``patch_no_      PATCH without a final answer: treated as RESTART (nothing to patch with); its
               answer``         corrected reasoning, if any, becomes the Reasoner's feedback
=============  ===============  ================================================================================

Action codes follow the MC² trace schema: Accept = 1, Patch = 2, Restart = 3.

>>> report = parse_monitor("ERROR_FOUND: yes\\nERROR_STEP: 2\\nERROR: 3 * 4 is 12, not 14\\nEXPLANATION: slip")
>>> report.error_found, report.error_step, report.error, report.parse
(True, '2', '3 * 4 is 12, not 14', 'tagged')
>>> decision = parse_controller("ACTION: PATCH\\nJUSTIFICATION: one slip\\nFINAL_ANSWER: 17", error_found=True)
>>> decision.action, decision.answer, decision.parse
(2, '17', 'tagged')
>>> parse_controller("I would restart this.", error_found=True).action
3
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from metamod.prompts import render
from metamod.rewards.moderator import keyword_probabilities
from metamod.tasks.grading import extract_answer

ACCEPT, PATCH, RESTART = 1, 2, 3
ACTION_NAMES = {ACCEPT: "accept", PATCH: "patch", RESTART: "restart"}
ACTION_CODES = {name: code for code, name in ACTION_NAMES.items()}

MONITOR_FIELDS = ("ERROR_FOUND", "ERROR_STEP", "ERROR", "EXPLANATION")
CONTROLLER_FIELDS = ("ACTION", "JUSTIFICATION", "SUGGESTIONS", "CORRECTED_REASONING", "FINAL_ANSWER")
_NONE_WORDS = {"", "none", "n/a", "na", "null", "-", "no error", "nothing"}
_YES = {"yes", "true", "y", "1"}
_NO = {"no", "false", "n", "0"}
_ACTION_WORD = re.compile(r"\b(ACCEPT|PATCH|RESTART)\b", re.IGNORECASE)
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def _field_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """A field name at the start of a line, optionally bolded, then ``:`` and the spaces before its value."""
    alternatives = "|".join(sorted((re.escape(n) for n in names), key=len, reverse=True))
    return re.compile(rf"^[ \t>*#-]*(?:\*\*)?({alternatives})(?:\*\*)?[ \t]*[:：](?:\*\*)?[ \t]*", re.I | re.M)


def tagged_fields(text: str, names: tuple[str, ...]) -> dict[str, str]:
    """``FIELD: value`` pairs of ``text`` for the given field names (a value runs to the next known field).

    Field names are matched case-insensitively at the start of a line, optionally bolded (``**ERROR:**``); the
    first occurrence of a field wins.

    >>> tagged_fields("ACTION: RESTART\\nSUGGESTIONS: redo step 2\\nand check it", ("ACTION", "SUGGESTIONS"))
    {'ACTION': 'RESTART', 'SUGGESTIONS': 'redo step 2\\nand check it'}
    """
    matches = list(_field_pattern(names).finditer(text or ""))
    fields: dict[str, str] = {}
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        name = match.group(1).upper()
        if name not in fields:
            fields[name] = text[match.end() : end].strip()
    return fields


def _json_fields(text: str, names: tuple[str, ...]) -> dict[str, str] | None:
    match = _JSON_OBJECT.search(text or "")
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    lowered = {str(k).lower(): v for k, v in data.items()}
    found = {n: lowered[n.lower()] for n in names if n.lower() in lowered}
    if not found:
        return None
    return {
        k: ("" if v is None else str(v).lower() if isinstance(v, bool) else str(v)).strip() for k, v in found.items()
    }


def _optional(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value.lower().rstrip(".") in _NONE_WORDS else value


# --------------------------------------------------------------------------------------------- monitor


@dataclass(frozen=True)
class MonitorReport:
    """A parsed Monitor output (the MC² audit record).

    Attributes:
        error_found: whether the Monitor found an error that could change the answer (``None``: no verdict).
        error_step: where the first major error is (a step number or text), ``None`` when none.
        error: a short description of the error, ``None`` when none.
        explanation: the Monitor's justification (``""`` when absent).
        parse: how it was read: ``tagged``, ``json`` or ``unparsed``.
    """

    error_found: bool | None
    error_step: str | None
    error: str | None
    explanation: str
    parse: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _verdict(value: str | None) -> bool | None:
    if value is None:
        return None
    word = value.strip().lower().strip(".*")
    first = word.split()[0] if word.split() else ""
    if first in _YES:
        return True
    if first in _NO:
        return False
    return None


def parse_monitor(text: str) -> MonitorReport:
    """Parse a Monitor output (tagged fields, else JSON, else no verdict).

    >>> parse_monitor('{"error_found": false, "error_step": null, "explanation": "all steps hold"}').error_found
    False
    >>> parse_monitor("Looks fine to me.").parse
    'unparsed'
    """
    fields, how = tagged_fields(text, MONITOR_FIELDS), "tagged"
    if _verdict(fields.get("ERROR_FOUND")) is None:
        from_json = _json_fields(text, MONITOR_FIELDS)
        if from_json is not None and _verdict(from_json.get("ERROR_FOUND")) is not None:
            fields, how = from_json, "json"
    verdict = _verdict(fields.get("ERROR_FOUND"))
    if verdict is None:
        return MonitorReport(None, None, None, (text or "").strip(), "unparsed")
    return MonitorReport(
        error_found=verdict,
        error_step=_optional(fields.get("ERROR_STEP")) if verdict else None,
        error=_optional(fields.get("ERROR")) if verdict else None,
        explanation=(fields.get("EXPLANATION") or "").strip(),
        parse=how,
    )


# --------------------------------------------------------------------------------------------- controller


@dataclass(frozen=True)
class ControllerDecision:
    """A parsed Controller output.

    Attributes:
        action: 1 (Accept), 2 (Patch) or 3 (Restart).
        answer: the accepted or patched final answer (``None`` for Restart; for Accept without a
            ``FINAL_ANSWER`` field the caller uses the candidate's answer).
        justification: why the action was chosen.
        suggestions: for Restart, what the Reasoner should do next (``None`` when not given).
        corrected_reasoning: for Patch, the corrected reasoning (``None`` when not given); also kept for a Patch
            without a final answer that runs as a Restart (``patch_no_answer``), where it becomes the feedback.
        parse: how the action was read (see the module table).
    """

    action: int
    answer: str | None
    justification: str
    suggestions: str | None
    corrected_reasoning: str | None
    parse: str

    @property
    def action_name(self) -> str:
        return ACTION_NAMES[self.action]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "action_name": self.action_name}


def _answer_of(value: str | None) -> str | None:
    value = _optional(value)
    if value is None:
        return None
    return extract_answer(value) or value.strip().strip(".").strip() or None


def parse_controller(text: str, *, error_found: bool | None) -> ControllerDecision:
    """Parse a Controller output; ``error_found`` (the Monitor's verdict) picks the default action.

    >>> parse_controller("ACTION: ACCEPT\\nJUSTIFICATION: the audit found nothing", error_found=False).answer is None
    True
    >>> parse_controller("ACTION: PATCH\\nJUSTIFICATION: fix", error_found=True).parse
    'patch_no_answer'
    >>> parse_controller("", error_found=False).action, parse_controller("", error_found=None).action
    (1, 3)
    """
    fields, how = tagged_fields(text, CONTROLLER_FIELDS), "tagged"
    word = _ACTION_WORD.search(fields.get("ACTION", ""))
    if word is None:
        from_json = _json_fields(text, CONTROLLER_FIELDS)
        if from_json is not None and _ACTION_WORD.search(from_json.get("ACTION", "")):
            fields, how = from_json, "json"
            word = _ACTION_WORD.search(fields["ACTION"])
    if word is None:
        word = _ACTION_WORD.search(text or "")
        how = "keyword"
    if word is None:
        action, how = (ACCEPT if error_found is False else RESTART), "default"
    else:
        action = ACTION_CODES[word.group(1).lower()]
    answer = _answer_of(fields.get("FINAL_ANSWER"))
    if how in ("keyword", "default") and answer is None:
        answer = extract_answer(text or "")
    if action == PATCH and answer is None:
        action, how = RESTART, "patch_no_answer"
    return ControllerDecision(
        action=action,
        answer=answer if action != RESTART else None,
        justification=(fields.get("JUSTIFICATION") or "").strip(),
        suggestions=_optional(fields.get("SUGGESTIONS")) if action == RESTART else None,
        corrected_reasoning=(
            _optional(fields.get("CORRECTED_REASONING")) if action == PATCH or how == "patch_no_answer" else None
        ),
        parse=how,
    )


#: the Controller's action words, in action-code order (the keywords of :func:`action_probabilities`)
ACTION_WORDS = ("ACCEPT", "PATCH", "RESTART")
#: characters skipped between the ``ACTION:`` field name and its value's first letter (markdown, quotes)
_VALUE_LEAD = " \t*_\"'`["


def action_probabilities(
    tokens: Sequence[str] | None, top_logprobs: Sequence[Mapping[str, float]] | None
) -> dict[str, float] | None:
    """The prompted Controller's distribution over ACCEPT / PATCH / RESTART, read from the top-k log-probs of the SAME
    generation at the token where its ``ACTION`` value starts.

    The position is found in the completion's own tokens (``Generation.tokens``, joined): the first ``ACTION:``
    field as :func:`tagged_fields` finds it (start of a line, any case, optionally bolded), then its value's first
    character after spaces, markdown and quotes; the token holding that character is the decision position (a value
    split as ``" AC"`` + ``"CEPT"`` is read at ``" AC"``). :func:`~metamod.rewards.moderator.keyword_probabilities`
    (the one prefix-mass reader, shared with the moderator's P(STOP)) sums, per word, the probability of the
    alternatives that can open it (case-insensitively, as :func:`parse_controller` reads the action) and normalises
    over the three; text the chosen token has before the value (``": AC"``) must open the alternatives too.

    Returns ``None`` (counted by the evaluation, never read as 0 or 1) when there are no top-k log-probs, no
    ``ACTION`` field in the completion, no value after it, or no alternative there that can open an action word.
    Only the tagged field is read: an action found by the JSON or keyword fallbacks has no probability.

    Args:
        tokens: the text of each completion token.
        top_logprobs: per completion token, the top-k token texts -> log-prob.

    Returns:
        ``{"accept": p, "patch": p, "restart": p}`` summing to 1, or ``None``.

    >>> import math
    >>> toks = ["ACTION", ":", " AC", "CEPT", "\\n"]
    >>> top = [{}, {}, {" AC": math.log(0.6), " PATCH": math.log(0.2), " RE": math.log(0.2), " I": -1.0}, {}, {}]
    >>> {k: round(v, 3) for k, v in action_probabilities(toks, top).items()}
    {'accept': 0.6, 'patch': 0.2, 'restart': 0.2}
    >>> action_probabilities(["I", " think", " so"], [{}, {}, {}]) is None
    True
    """
    if not tokens or top_logprobs is None:
        return None
    joined = "".join(tokens)
    field = next(
        (m for m in _field_pattern(CONTROLLER_FIELDS).finditer(joined) if m.group(1).upper() == "ACTION"), None
    )
    if field is None:
        return None
    start = field.end()
    while start < len(joined) and joined[start] in _VALUE_LEAD:
        start += 1
    if start >= len(joined) or joined[start] in "\r\n":
        return None
    position, offset = 0, 0
    while offset + len(tokens[position]) <= start:  # the token holding the value's first character
        offset += len(tokens[position])
        position += 1
    if position >= len(top_logprobs):
        return None
    distribution = keyword_probabilities(
        top_logprobs[position], ACTION_WORDS, lead=joined[offset:start], ignore_case=True
    )
    return None if distribution is None else {word.lower(): p for word, p in distribution.items()}


# --------------------------------------------------------------------------------------------- prompts


def report_text(report: MonitorReport, raw: str) -> str:
    """The audit as the Controller reads it: the structured summary when parsed, else the raw text.

    >>> print(report_text(parse_monitor("ERROR_FOUND: no\\nEXPLANATION: fine"), "raw"))
    ERROR_FOUND: no
    EXPLANATION: fine
    """
    if report.parse == "unparsed":
        return raw.strip() or "(no report)"
    lines = [f"ERROR_FOUND: {'yes' if report.error_found else 'no'}"]
    if report.error_found:
        lines.append(f"ERROR_STEP: {report.error_step or 'NONE'}")
        lines.append(f"ERROR: {report.error or 'NONE'}")
    if report.explanation:
        lines.append(f"EXPLANATION: {report.explanation}")
    return "\n".join(lines)


def role_policy(role: str) -> str:
    """The MRO role's own policy prompt ``P_i`` (template ``mro_policy_<role>``): what fills ``{policy}`` in its prompt
    unless a composed policy replaces it.

    >>> role_policy("monitor").startswith("Check the solution one step at a time")
    True
    """
    return render(f"mro_policy_{role}").strip()


def _policy(role: str, policy: str | None) -> str:
    text = (policy or "").strip()
    return text or role_policy(role)


def reasoner_messages(
    question: str, *, feedback: str | None = None, previous: str | None = None, policy: str | None = None
) -> list[dict]:
    """The Reasoner's conversation: the first attempt, or a retry after a Restart.

    MC² Eq. 4 conditions the Reasoner on the problem and the Controller's feedback only, ``R(x, u^{k-1})``: a retry
    (``feedback`` given) renders ``mro_reasoner_retry``, which shows the feedback and never the rejected attempt.
    Only when ``previous`` (the rejected attempt) is passed as well, which the engine does with its
    ``retry_with_attempt`` option, is ``mro_reasoner_retry_with_attempt`` used.

    Args:
        question: the problem text.
        feedback: ``u^{k-1}``, what the Restart asked for (``None`` at the first attempt).
        previous: the rejected attempt, shown only under ``retry_with_attempt`` (``None``: not shown).
        policy: the policy prompt ``P_R`` for this call (a composed one, MC² Eq. 13); ``None`` or blank: the role's
            own (:func:`role_policy`). It fills ``{policy}`` only: the problem and the answer format stay.

    >>> reasoner_messages("2+2?")[0]["content"].endswith("Problem: 2+2?")
    True
    >>> retry = reasoner_messages("2+2?", feedback="redo it")[0]["content"]
    >>> "redo it" in retry, "earlier attempt:" in retry.lower()
    (True, False)
    >>> "Step 1: 2+2=5" in reasoner_messages("2+2?", feedback="redo it", previous="Step 1: 2+2=5")[0]["content"]
    True
    >>> composed = reasoner_messages("2+2?", policy="Count on your fingers.")[0]["content"]
    >>> "Count on your fingers." in composed, role_policy("reasoner") in composed, "<answer>" in composed
    (True, False, True)
    """
    values = {"question": question, "policy": _policy("reasoner", policy)}
    if previous is not None:
        content = render(
            "mro_reasoner_retry_with_attempt", **values, previous=previous.strip(), feedback=feedback or ""
        )
    elif feedback is not None:
        content = render("mro_reasoner_retry", **values, feedback=feedback)
    else:
        content = render("mro_reasoner", **values)
    return [{"role": "user", "content": content}]


def monitor_messages(question: str, solution: str, answer: str | None, *, policy: str | None = None) -> list[dict]:
    """The Monitor's conversation: the problem, the solution under audit and its extracted answer.

    ``policy`` (a composed ``P_M``; ``None``: :func:`role_policy`) fills ``{policy}`` only; the report format stays.
    """
    content = render(
        "mro_monitor",
        question=question,
        solution=solution.strip(),
        answer=answer or "(none given)",
        policy=_policy("monitor", policy),
    )
    return [{"role": "user", "content": content}]


def controller_prompt_messages(
    question: str, solution: str, answer: str | None, report: str, *, policy: str | None = None
) -> list[dict]:
    """The prompted Controller's conversation (ACCEPT / PATCH / RESTART in tagged fields).

    ``policy`` (a composed ``P_C``; ``None``: :func:`role_policy`) fills ``{policy}`` only; the action list and the
    reply format stay.
    """
    content = render(
        "mro_controller",
        question=question,
        solution=solution.strip(),
        answer=answer or "(none given)",
        report=report,
        policy=_policy("controller", policy),
    )
    return [{"role": "user", "content": content}]


def restart_feedback(decision: ControllerDecision, report: MonitorReport) -> str:
    """``u^k``, what a Restart passes to the next Reasoner call (MC² Eq. 4 and 6), never the rejected attempt itself.

    In order: the Controller's suggestions; for a PATCH without a final answer (run as a Restart, parse
    ``patch_no_answer``), its unfinished corrected reasoning (``mro_feedback_from_patch``: the Controller's own
    text); else the Monitor's error (``mro_feedback_from_report``), for a Controller that gave no feedback of its
    own (a bare RESTART, a parse default, a moderator's CONTINUE).

    >>> d = parse_controller("ACTION: RESTART", error_found=True)
    >>> restart_feedback(d, parse_monitor("ERROR_FOUND: yes\\nERROR: step 2 adds wrongly"))
    'The reviewer found a problem: step 2 adds wrongly Check your work carefully at that point.'
    >>> p = parse_controller("ACTION: PATCH\\nCORRECTED_REASONING: 2 + 3 is 5, so", error_found=True)
    >>> p.action, restart_feedback(p, parse_monitor("ERROR_FOUND: yes"))
    (3, 'The reviewer began a correction but did not finish it: 2 + 3 is 5, so Build on it where it holds.')
    """
    if decision.suggestions:
        return decision.suggestions
    if decision.parse == "patch_no_answer" and decision.corrected_reasoning:
        return render("mro_feedback_from_patch", correction=decision.corrected_reasoning)
    error = report.error or report.explanation or "the answer could not be confirmed."
    return render("mro_feedback_from_report", error=error)
