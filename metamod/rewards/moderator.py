"""The moderator's output protocol and its rewards (Meta-Moderator, section 3.4).

A moderator answers each debate round with exactly one of two outputs:

* ``CONTINUE`` -- alone, nothing else;
* ``STOP`` followed by one ``<answer>...</answer>`` span holding the final answer, nothing else.

:func:`parse_decision` is the ONE parser of that protocol: the rewards below and the evaluation's moderator decision
layers both call it, so training and inference never disagree on what a moderator said. Beside it,
:func:`decision_probability` reads how sure the moderator was: P(STOP) from the top-k log-probs at its decision word
(through :func:`keyword_probabilities`, the one prefix-mass reader, which the MRO Controller's ACTION reader shares).

Parsing rules (all decided here and tested in ``tests/test_rewards.py``):

* Surrounding whitespace is ignored; whitespace (spaces, newlines) between ``STOP`` and ``<answer>`` is optional.
* Keywords and tags are case-sensitive: ``STOP``/``CONTINUE`` in capitals, ``<answer>``/``</answer>`` in lower
  case, exactly as every metamod prompt asks. ``stop <answer>4</answer>`` is not recognised (action ``None``): a
  policy trained on these rewards learns the exact protocol, and inference never guesses.
* ``STOP`` + one non-empty span + nothing else is valid. Text after ``</answer>``, a second span, an empty span or
  unmatched tags make it invalid (``valid=False``) while ``action`` stays ``"STOP"`` and ``answer`` keeps the first
  non-empty span, so a lenient caller can still read it.
* ``STOP`` without a properly delimited, non-empty answer span is the partial case of the paper (format reward
  0.5): ``STOP`` alone (``reason="no_answer_span"``), ``STOP`` + text without tags (``"stop_with_text"``), an
  unclosed tag (``"unclosed_tag"``) or an empty span (``"empty_answer"``). ``STOP`` with a span plus extra text
  is not partial (it has a span; the extra text breaks the protocol: 0).
* The registered ``format_strict`` reward gives the partial credit to ``STOP`` ALONE only: under the paper's rule a
  tiny policy collected 0.5 for ``STOP < < <`` and never learned the span (see docs/training.md); the CPU default
  config uses it, the paper configs use ``format``.
* ``CONTINUE`` must stand alone; ``CONTINUE.`` or ``CONTINUE because ...`` is invalid with action ``"CONTINUE"``.
* A keyword must be a whole word at the very start: ``STOPPED`` or ``I say STOP`` give action ``None``.

Rewards follow TRL's reward contract ``f(completions, **dataset_columns) -> list[float | None]`` and accept
plain-text completions (``["STOP <answer>4</answer>"]``) and conversational ones
(``[[{"role": "assistant", "content": "CONTINUE"}]]``). ``None`` means "not applicable" (TRL ignores it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metamod.tasks.grading import extract_answer, normalize_answer

Action = Literal["STOP", "CONTINUE"]

STOP = "STOP"
CONTINUE = "CONTINUE"
OPEN_TAG = "<answer>"
CLOSE_TAG = "</answer>"

#: top-k alternatives a moderator call asks for to read P(STOP) from the same request (:func:`decision_probability`)
DECISION_TOP_LOGPROBS = 10

_KEYWORD = re.compile(r"^(STOP|CONTINUE)(?![A-Za-z0-9_])")
_SPAN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

#: invalid STOP outputs that lack a properly delimited, non-empty answer span (paper: partial credit)
_PARTIAL_REASONS = frozenset({"no_answer_span", "stop_with_text", "unclosed_tag", "empty_answer"})

#: reason codes carried by :class:`Decision` (``"ok"`` for a valid decision)
REASONS = (
    "ok",
    "empty",
    "unknown_action",
    "continue_with_text",
    "no_answer_span",
    "stop_with_text",
    "empty_answer",
    "unclosed_tag",
    "multiple_answer_spans",
    "text_before_answer",
    "text_after_answer",
)


@dataclass(frozen=True)
class Decision:
    """A parsed moderator output.

    Attributes:
        action: ``"STOP"``, ``"CONTINUE"``, or ``None`` when no keyword opens the output.
        answer: the stripped text of the first non-empty ``<answer>`` span after ``STOP`` (``None`` otherwise).
        valid: ``True`` only for ``CONTINUE`` alone or ``STOP`` + exactly one non-empty span and nothing else.
        reason: ``"ok"`` when valid, else one of :data:`REASONS` saying what was wrong.
    """

    action: Action | None
    answer: str | None
    valid: bool
    reason: str = "ok"

    @property
    def partial(self) -> bool:
        """``STOP`` without a properly delimited, non-empty answer span (the paper's partial-credit case)."""
        return self.action == STOP and self.reason in _PARTIAL_REASONS

    @property
    def bare_stop(self) -> bool:
        """``STOP`` and nothing else (the only partial case under the strict format reward)."""
        return self.action == STOP and self.reason == "no_answer_span"


def parse_decision(text: str | None) -> Decision:
    """Parse one moderator output under the protocol described in this module's docstring.

    Args:
        text: the moderator's raw output (``None`` is treated as empty).

    Returns:
        The :class:`Decision`.

    >>> parse_decision("  STOP <answer> 42 </answer>\\n")
    Decision(action='STOP', answer='42', valid=True, reason='ok')
    >>> parse_decision("CONTINUE")
    Decision(action='CONTINUE', answer=None, valid=True, reason='ok')
    >>> parse_decision("STOP")
    Decision(action='STOP', answer=None, valid=False, reason='no_answer_span')
    >>> parse_decision("STOP <answer>B</answer> because both agree").reason
    'text_after_answer'
    >>> parse_decision("continue").action is None
    True
    """
    stripped = (text or "").strip()
    if not stripped:
        return Decision(None, None, False, "empty")
    match = _KEYWORD.match(stripped)
    if match is None:
        return Decision(None, None, False, "unknown_action")
    action = match.group(1)
    rest = stripped[match.end() :]
    if action == CONTINUE:
        if rest.strip():
            return Decision(CONTINUE, None, False, "continue_with_text")
        return Decision(CONTINUE, None, True)
    # STOP
    if OPEN_TAG not in rest and CLOSE_TAG not in rest:
        if rest.strip():
            return Decision(STOP, None, False, "stop_with_text")
        return Decision(STOP, None, False, "no_answer_span")
    spans = list(_SPAN.finditer(rest))
    first_answer = next((s.group(1).strip() for s in spans if s.group(1).strip()), None)
    if not spans:
        return Decision(STOP, None, False, "unclosed_tag")
    if len(spans) > 1:
        return Decision(STOP, first_answer, False, "multiple_answer_spans")
    span = spans[0]
    if OPEN_TAG in span.group(1):
        return Decision(STOP, None, False, "unclosed_tag")
    if rest[: span.start()].strip():
        return Decision(STOP, first_answer, False, "text_before_answer")
    if rest[span.end() :].strip():
        return Decision(STOP, first_answer, False, "text_after_answer")
    if first_answer is None:
        return Decision(STOP, None, False, "empty_answer")
    return Decision(STOP, first_answer, True)


def _names_keyword(text: str, keyword: str) -> bool:
    """Whether a token's text (leading whitespace stripped) can open ``keyword``: a non-empty prefix of it, or the
    whole keyword followed by a non-word character (``"STOP<"``)."""
    text = text.lstrip()
    if not text:
        return False
    if keyword.startswith(text):
        return True
    return text.startswith(keyword) and not re.match(r"[A-Za-z0-9_]", text[len(keyword) :])


def keyword_probabilities(
    alternatives: Mapping[str, float], keywords: Sequence[str], *, lead: str = "", ignore_case: bool = False
) -> dict[str, float] | None:
    """The distribution over ``keywords`` at ONE generated position, from that position's top-k log-probs.

    The ONE prefix-mass reader: :func:`decision_probability` (the moderator's STOP / CONTINUE) and the prompted MRO
    Controller's ACCEPT / PATCH / RESTART (:func:`metamod.rollout.mro.parse.action_probabilities`) both call it.
    Each alternative token whose text, leading whitespace stripped, can open a keyword (a non-empty prefix of it,
    or the whole keyword followed by a non-word character) adds its probability to that keyword; every other token
    is left out; the masses are normalised over the keywords: ``P(keyword | the text there opens with one of them)``.

    Args:
        alternatives: the position's top-k token texts -> log-prob (one entry of ``Generation.top_logprobs``).
        keywords: the words to tell apart; no two may share their first character (no token counts for two).
        lead: text the chosen token has BEFORE the keyword starts (a token ``": AC"`` where the value starts at
            ``A``): an alternative counts only when it opens with the same text (whitespace ignored), which is then
            dropped before the prefix test.
        ignore_case: compare case-insensitively (``Accept`` counts for ``ACCEPT``).

    Returns:
        keyword -> probability (summing to 1), or ``None`` when no alternative can open any keyword.

    >>> import math
    >>> top = {" AC": math.log(0.5), " PATCH": math.log(0.25), "RE": math.log(0.25), " I": math.log(0.1)}
    >>> keyword_probabilities(top, ("ACCEPT", "PATCH", "RESTART"))
    {'ACCEPT': 0.5, 'PATCH': 0.25, 'RESTART': 0.25}
    >>> keyword_probabilities({": Acc": -1.0, ":": -2.0}, ("ACCEPT", "PATCH"), lead=": ", ignore_case=True)
    {'ACCEPT': 1.0, 'PATCH': 0.0}
    >>> keyword_probabilities({"Hello": -0.1}, ("STOP", "CONTINUE")) is None
    True
    """
    fold = str.upper if ignore_case else str
    words = [fold(k) for k in keywords]
    if len({w[:1] for w in words}) != len(words) or not all(words):
        raise ValueError(f"keywords must be non-empty and start with distinct characters, got {list(keywords)}")
    head = fold(lead.strip())
    mass = dict.fromkeys(keywords, 0.0)
    for text, logprob in alternatives.items():
        text = fold(text).lstrip()
        if head:
            if not text.startswith(head):
                continue
            text = text[len(head) :]
        for keyword, word in zip(keywords, words, strict=True):
            if _names_keyword(text, word):
                mass[keyword] += math.exp(logprob)
                break
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return {k: v / total for k, v in mass.items()}


def decision_probability(
    tokens: Sequence[str] | None, top_logprobs: Sequence[Mapping[str, float]] | None, keyword: str = STOP
) -> float | None:
    """The probability the moderator gave ``keyword`` (``STOP``) against the other decision word, read from the
    top-k log-probs of the SAME generation at the position where its decision word starts.

    That position is the first completion token whose text is not whitespace. Among that position's top-k
    alternatives, the mass of tokens that can open ``STOP`` (leading whitespace stripped: a non-empty prefix of
    ``STOP``, or ``STOP`` followed by a non-word character) is divided by itself plus the mass of those that can
    open ``CONTINUE`` (:func:`keyword_probabilities`; the two words share no first letter, so no token counts for
    both); every other token (``stop``, ``I``, a tag, whitespace) is left out. The result is
    ``P(keyword | the output opens with a decision word)``. For ``keyword=CONTINUE`` it is ``1 - `` the ``STOP``
    value.

    Returns ``None`` when it cannot be read: no top-k log-probs (``None``: the backend was not asked or cannot),
    an output with no non-whitespace token, or a position whose top-k holds neither word (the moderator was not
    answering with a decision word); callers count these (``p_stop_missing``) and never treat them as 0 or 1.

    Args:
        tokens: the text of each completion token (``Generation.tokens``).
        top_logprobs: per completion token, the top-k token texts -> log-prob (``Generation.top_logprobs``).
        keyword: ``STOP`` or ``CONTINUE``.

    >>> import math
    >>> round(decision_probability(["STOP", " <"], [{"STOP": math.log(0.6), "CON": math.log(0.2), "I": -1.0}, {}]), 4)
    0.75
    >>> round(decision_probability([" ", " CONT", "INUE"], [{" ": -0.1}, {" CONT": math.log(0.3), " ST": math.log(0.1)}, {}]), 4)
    0.25
    >>> decision_probability(["Hello"], [{"Hello": -0.1, "Hi": -2.0}]) is None
    True
    >>> decision_probability(["STOP"], None) is None
    True
    """
    if keyword not in (STOP, CONTINUE):
        raise ValueError(f"keyword must be {STOP!r} or {CONTINUE!r}, got {keyword!r}")
    if not tokens or top_logprobs is None:
        return None
    position = next((i for i, token in enumerate(tokens) if token.strip()), None)
    if position is None or position >= len(top_logprobs):
        return None
    distribution = keyword_probabilities(top_logprobs[position], (STOP, CONTINUE))
    return None if distribution is None else distribution[keyword]


def completion_text(completion: Any) -> str:
    """The text of one completion, plain (``str``) or conversational (a list of messages).

    For a conversation the content of the last assistant message is used (content may be a string or a list of
    ``{"type": "text", "text": ...}`` parts).

    >>> completion_text("CONTINUE"), completion_text([{"role": "assistant", "content": "STOP"}])
    ('CONTINUE', 'STOP')
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    messages = [m for m in completion if isinstance(m, dict)]
    assistant = [m for m in messages if m.get("role", "assistant") == "assistant"] or messages
    if not assistant:
        return ""
    content = assistant[-1].get("content", "")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def _flag(values: Sequence[Any] | None, index: int) -> bool:
    return bool(values[index]) if values is not None and values[index] is not None else False


class FormatReward:
    """Callable behind :func:`format_reward` / :func:`get_format_reward` (picklable, stable ``__name__``)."""

    def __init__(self, partial_credit: float = 0.5, strict: bool = False):
        self.partial_credit = float(partial_credit)
        self.strict = bool(strict)
        self.__name__ = "format_strict_reward" if strict else "format_reward"

    def __call__(self, completions: Sequence[Any], is_final_round: Sequence[bool] | None = None, **kwargs: Any):
        rewards: list[float | None] = []
        for i, completion in enumerate(completions):
            decision = parse_decision(completion_text(completion))
            if decision.action == CONTINUE and _flag(is_final_round, i):
                rewards.append(0.0)  # the forced-answer prompt only allows STOP + answer
            elif decision.valid:
                rewards.append(1.0)
            elif decision.bare_stop if self.strict else decision.partial:
                rewards.append(self.partial_credit)
            else:
                rewards.append(0.0)
        return rewards

    def __repr__(self) -> str:
        return f"FormatReward(partial_credit={self.partial_credit}, strict={self.strict})"


def get_format_reward(partial_credit: float = 0.5, strict: bool = False) -> FormatReward:
    """Build a format reward with a chosen credit for ``STOP`` without an answer span (the paper uses 0.5).

    Args:
        partial_credit: reward for the partial case, in ``[0, 1]``.
        strict: give the partial credit to ``STOP`` alone only (``STOP`` + junk gets 0).

    Returns:
        A picklable reward callable named ``format_reward`` (``format_strict_reward`` when strict).

    >>> get_format_reward(0.25)(["STOP", "STOP < <", "CONTINUE", "maybe"])
    [0.25, 0.25, 1.0, 0.0]
    >>> get_format_reward(0.5, strict=True)(["STOP", "STOP < <"])
    [0.5, 0.0]
    """
    if not 0.0 <= partial_credit <= 1.0:
        raise ValueError(f"partial_credit must be in [0, 1], got {partial_credit}; the paper uses 0.5")
    return FormatReward(partial_credit, strict=strict)


def format_reward(
    completions: Sequence[Any], is_final_round: Sequence[bool] | None = None, **kwargs: Any
) -> list[float | None]:
    """R_fmt (paper): 1 for ``CONTINUE`` alone or ``STOP`` + one answer span, 0.5 for ``STOP`` without a span, else 0.

    On a forced-answer row (``is_final_round`` true) ``CONTINUE`` gets 0: that prompt asks for STOP + answer only.

    Args:
        completions: plain or conversational completions.
        is_final_round: optional dataset column, one flag per completion.
        **kwargs: other dataset columns and TRL extras (ignored).

    Returns:
        One float per completion.

    >>> format_reward(["CONTINUE", "STOP <answer>7</answer>", "STOP", "STOP 7", "STOP <answer>7</answer> ok", "yes"])
    [1.0, 1.0, 0.5, 0.5, 0.0, 0.0]
    >>> format_reward([[{"role": "assistant", "content": "CONTINUE"}]], is_final_round=[True])
    [0.0]
    """
    return _DEFAULT_FORMAT(completions, is_final_round=is_final_round)


_DEFAULT_FORMAT = FormatReward(0.5)
_STRICT_FORMAT = FormatReward(0.5, strict=True)


def format_strict_reward(
    completions: Sequence[Any], is_final_round: Sequence[bool] | None = None, **kwargs: Any
) -> list[float | None]:
    """R_fmt with the partial credit for ``STOP`` ALONE only (``STOP`` + text without a span gets 0).

    >>> format_strict_reward(["STOP", "STOP 7", "STOP <answer>7</answer>"])
    [0.5, 0.0, 1.0]
    """
    return _STRICT_FORMAT(completions, is_final_round=is_final_round)


def control_reward(
    completions: Sequence[Any],
    eta: Sequence[int],
    is_final_round: Sequence[bool] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """R_ctrl: 1 for ``STOP`` when ``eta`` is 1, 1 for ``CONTINUE`` when ``eta`` is 0, else 0.

    The action is read by :func:`parse_decision` whatever the format (``STOP`` alone still counts as stopping; the
    format reward judges the format). An output with no recognisable action gets 0. On a forced-answer row
    (``is_final_round`` true) the moderator has no real choice, so the reward is ``None`` and TRL ignores it.

    Args:
        completions: plain or conversational completions.
        eta: dataset column, 1 when some debater's answer at this round matches gold.
        is_final_round: optional dataset column, one flag per completion.
        **kwargs: other dataset columns and TRL extras (ignored).

    Returns:
        One float (or ``None`` on final rounds) per completion.

    >>> control_reward(["STOP <answer>1</answer>", "CONTINUE", "STOP", "CONTINUE", "hmm"], eta=[1, 0, 0, 1, 1])
    [1.0, 1.0, 0.0, 0.0, 0.0]
    >>> control_reward(["STOP <answer>1</answer>"], eta=[1], is_final_round=[True])
    [None]
    """
    if len(eta) != len(completions):
        raise ValueError(f"control_reward got {len(completions)} completions but {len(eta)} eta values")
    rewards: list[float | None] = []
    for i, completion in enumerate(completions):
        if _flag(is_final_round, i):
            rewards.append(None)
            continue
        action = parse_decision(completion_text(completion)).action
        target = STOP if int(eta[i]) == 1 else CONTINUE
        rewards.append(1.0 if action == target else 0.0)
    return rewards


def answer_reward(
    completions: Sequence[Any],
    gold: Sequence[str],
    kind: Sequence[str],
    is_final_round: Sequence[bool] | None = None,
    choices: Sequence[Any] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """Optional adjudication reward: 1 when STOP's answer matches gold under the shared grader, else 0.

    Grading is :func:`metamod.tasks.grading.is_equivalent` (the same grader that computes ``eta`` and the
    evaluation accuracy). ``CONTINUE`` on a non-final row gets ``None`` (no answer was given, nothing to grade);
    ``CONTINUE`` on a forced-answer row, ``STOP`` without an answer and unparsable outputs get 0 (an unparsable
    answer is never correct). An answer in an invalid format (e.g. text after ``</answer>``) is still graded:
    the format reward penalises the format.

    Args:
        completions: plain or conversational completions.
        gold: dataset column, the gold answer per row.
        kind: dataset column, the answer kind per row (``"math"``, ``"mc"``, ``"yesno"``, ``"text"``).
        is_final_round: optional dataset column, one flag per completion.
        choices: optional dataset column with multiple-choice options per row.
        **kwargs: other dataset columns and TRL extras (ignored).

    Returns:
        One float (or ``None``) per completion.
    """
    from metamod.tasks.grading import is_equivalent

    rewards: list[float | None] = []
    for i, completion in enumerate(completions):
        decision = parse_decision(completion_text(completion))
        if decision.action == CONTINUE and not _flag(is_final_round, i):
            rewards.append(None)
        elif decision.action == STOP and decision.answer is not None:
            row_choices = choices[i] if choices is not None else None
            rewards.append(1.0 if is_equivalent(decision.answer, str(gold[i]), str(kind[i]), row_choices) else 0.0)
        else:
            rewards.append(0.0)
    return rewards


# --------------------------------------------------------------------------------------------- parse policy

_ANSWER_MARKER_RE = re.compile(r"</?answer\b|\\(?:boxed|fbox)\b", re.IGNORECASE)
_LEADING_STOP_RE = re.compile(r"^STOP\b[\s:]*", re.IGNORECASE)
_PLAIN_NUMBER_RE = re.compile(r"[-+]?\d+(?:/\d+)?")
_OPTION_LETTER_RE = re.compile(r"\([A-Za-z]\)|[A-Z]")


def _bare_answer(text: str) -> str | None:
    """The whole output as an answer when it is one token naming a plain number, an option letter or yes/no."""
    bare = _LEADING_STOP_RE.sub("", text.strip(), count=1).strip().strip("*").strip()
    bare = bare[:-1].rstrip() if bare.endswith(".") else bare
    if not bare or not re.fullmatch(r"\S+", bare):
        return None
    number = normalize_answer(bare, "math")
    if number is not None and _PLAIN_NUMBER_RE.fullmatch(number):
        return bare
    if _OPTION_LETTER_RE.fullmatch(bare) or normalize_answer(bare, "yesno") is not None:
        return bare
    return None


def final_answer(text: str | None) -> str | None:
    """The answer of a forced final output (moderator at ``T_max``, or the judge), read leniently.

    The ONE parse policy for final answers: every moderator layer's forced answer and the judge use it. Format
    validity is not its concern (that stays :func:`parse_decision`'s strict verdict). It lives beside
    :func:`parse_decision` so that every loop (debate layers, the judge, the MRO controller) reads it from here.

    Precedence:

    1. a format-valid ``STOP <answer>x</answer>`` gives ``x`` (a valid ``CONTINUE`` gives ``None``);
    2. else :func:`metamod.tasks.grading.extract_answer`: the LAST ``<answer>`` span whatever surrounds it (with or
       without ``STOP``, text or a period after it), else ``\\boxed{}``, ``Final Answer:``, ``the answer is ...``;
    3. else, when the output has no answer marker at all, a bare answer: the whole output (a leading ``STOP`` and a
       trailing period dropped) if it is ONE whitespace-free token that is a plain number (``42``, ``$5``,
       ``1,000``, ``\\frac{1}{2}``), an option letter (``B``, ``(b)``) or yes/no/true/false.

    Anything else (prose, junk, ``CONTINUE``, ``STOP`` alone, an empty span, a bare non-numeric expression such as
    ``x=5``) gives ``None``, which is graded wrong.

    Args:
        text: the raw output (``None`` is treated as empty).

    Returns:
        The answer text, stripped, or ``None``.

    >>> [final_answer(t) for t in ["STOP <answer>7</answer>", "STOP <answer>7</answer>.", "<answer>7</answer>"]]
    ['7', '7', '7']
    >>> [final_answer(t) for t in ["The final answer is 7", "42", "STOP 42.", "(B)", "Yes", "Agents: <answer>B</answer>"]]
    ['7', '42', '42', '(B)', 'Yes', 'B']
    >>> [final_answer(t) for t in ["I cannot tell", "CONTINUE", "STOP", "STOP <answer></answer>", "memememe", None]]
    [None, None, None, None, None, None]
    """
    parsed = parse_decision(text)
    if parsed.valid:
        return parsed.answer
    answer = extract_answer(text)
    if answer is not None or not text or _ANSWER_MARKER_RE.search(text):
        return answer
    return _bare_answer(text)
