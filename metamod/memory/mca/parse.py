"""Reading the MetaCognitive Accumulator's writer replies: lessons, rules, composed prompts (no model calls).

The LLM writer of :mod:`metamod.memory.mca.writers` sends prompts; this module turns the replies into items,
leniently and with the reading that worked reported (so fallbacks are counted), and holds the composer's checks
(MC² C.3: every field present, parseable, within budget).

>>> parse_lessons("- **DO:** Check every step.\\nAVOID: skipping the units\\nTags: Checking, units")
([LessonDraft(kind='do', text='Check every step.', tags=['checking', 'units']), LessonDraft(kind='avoid', text='skipping the units', tags=['checking', 'units'])], 'tagged')
>>> parse_rules("Rules:\\n1. Check units.\\n2) Verify the final step.")
['Check units.', 'Verify the final step.']
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Tag of each role's field in the composer's output schema.
ROLE_TAGS: dict[str, str] = {"reasoner": "P_R", "monitor": "P_M", "controller": "P_C"}
KIND_LABEL = {"do": "DO", "avoid": "AVOID"}
MAX_ITEM_CHARS = 300
MAX_TAGS = 5
#: Cosine similarity at or above which the rule consolidator treats two texts as the same rule.
NEAR_DUPLICATE = 0.9

CountTokens = Callable[[str], int]


def word_count(text: str) -> int:
    """Whitespace word count: the budget unit when no LLM tokenizer is at hand.

    >>> word_count("two  words")
    2
    """
    return len(text.split())


@dataclass
class LessonDraft:
    """A parsed lesson item before it gets an id."""

    kind: str
    text: str
    tags: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- parsing helpers
_MARKER = r"(?:[-*+\u2022>]\s*|\d+\s*[.)]\s*)*"
_KEYED = re.compile(
    rf"^\s*{_MARKER}(?:\*\*|__)?\s*(do|avoid|don'?t|tags?)\s*(?:\*\*|__)?\s*[:：]\s*(?:\*\*|__)?\s*(.*)$",
    re.IGNORECASE,
)
_XML = re.compile(r"<\s*(do|avoid|tags?)\s*>(.*?)<\s*/\s*\1\s*>", re.IGNORECASE | re.DOTALL)
_LISTED = re.compile(r"^\s*(?:[-*+\u2022]|\d+\s*[.)]|rule\s*\d+\s*[:.)])\s*(.+)$", re.IGNORECASE)
_NEGATIVE = re.compile(r"^(avoid|do not|don'?t|never)\b", re.IGNORECASE)
_NEGATIVE_ANYWHERE = re.compile(
    r"\b(avoid|do not|don'?t|never|should not(?! only)|shouldn'?t|must not)\b", re.IGNORECASE
)
_SENTENCE_END = re.compile(r"(?<=[.!])\s+|\n+")
#: most lessons read from a plain-prose reply (the last fallback: a weak model answering in sentences)
MAX_SENTENCES = 2


def clean_item(text: str) -> str:
    """One item's text: markdown emphasis dropped, whitespace squeezed, quotes stripped, at most MAX_ITEM_CHARS.

    >>> clean_item('  "**Check**   the  units"  ')
    'Check the units'
    """
    text = re.sub(r"(\*\*|__|`)", "", str(text))
    text = re.sub(r"\s+", " ", text).strip().strip("\"'").strip()
    return text[:MAX_ITEM_CHARS].rstrip()


def _tags(text: str) -> list[str]:
    out: list[str] = []
    for raw in re.split(r"[,;|]", str(text)):
        tag = re.sub(r"\s+", "-", clean_item(raw).lstrip("#").lower())
        if tag and len(tag) <= 30 and tag not in out:
            out.append(tag)
    return out[:MAX_TAGS]


def _kind(key: str) -> str:
    return "do" if key.lower() == "do" else "avoid"


def _json_payload(text: str) -> Any:
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return None
    start = min(starts)
    end = max(text.rfind("}"), text.rfind("]"))
    if end <= start:
        return None
    try:
        return json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None


def _json_lessons(payload: Any) -> list[LessonDraft]:
    drafts: list[LessonDraft] = []
    if isinstance(payload, Mapping):
        shared = _tags(", ".join(map(str, _as_list(payload.get("tags") or payload.get("TAGS")))))
        for key in ("do", "DO", "avoid", "AVOID"):
            for item in _as_list(payload.get(key)):
                drafts.append(LessonDraft(_kind(key), clean_item(item), list(shared)))
        items = payload.get("lessons") or payload.get("items")
        if isinstance(items, list):
            drafts.extend(_json_lessons(items))
    elif isinstance(payload, list):
        for item in payload:
            if isinstance(item, Mapping):
                kind = str(item.get("kind") or item.get("type") or "do").lower()
                text = item.get("text") or item.get("lesson") or item.get("rule") or ""
                tags = _tags(", ".join(map(str, _as_list(item.get("tags")))))
                drafts.append(
                    LessonDraft("avoid" if kind.startswith(("avoid", "don")) else "do", clean_item(text), tags)
                )
    return drafts


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def parse_lessons(text: str) -> tuple[list[LessonDraft], str]:
    """Lesson items from a distiller's reply, and which reading worked (``tagged``, ``json``, ``bullets``,
    ``sentences``, ``empty``).

    ``DO:`` / ``AVOID:`` / ``TAGS:`` lines (any case, after bullets, numbers or bold markers; ``<do>...</do>``
    elements too) are the schema; ``TAGS`` apply to every item of the reply. Else a JSON object (``do``, ``avoid``,
    ``tags``) or list of ``{kind, text, tags}``; else bulleted sentences (``avoid``/``never`` ones are AVOIDs); else
    the first plain sentences of at least four words (``should not``/``never``... ones are AVOIDs), the reading a
    small model's one-sentence answer gets. Empty items are dropped.

    >>> parse_lessons('{"do": ["Plan first."], "avoid": "Guessing.", "tags": ["planning"]}')[1]
    'json'
    >>> parse_lessons("* Never skip the check.")
    ([LessonDraft(kind='avoid', text='Never skip the check.', tags=[])], 'bullets')
    >>> parse_lessons("The student should not repeat the previous mistake.")
    ([LessonDraft(kind='avoid', text='The student should not repeat the previous mistake.', tags=[])], 'sentences')
    >>> parse_lessons("No idea.")
    ([], 'empty')
    """
    text = str(text or "")
    drafts: list[LessonDraft] = []
    tags: list[str] = []
    pairs = [(m.group(1), m.group(2)) for m in _XML.finditer(text)]
    if not pairs:
        pairs = [(m.group(1), m.group(2)) for line in text.splitlines() if (m := _KEYED.match(line))]
    for key, value in pairs:
        if key.lower().startswith("tag"):
            tags.extend(t for t in _tags(value) if t not in tags)
        else:
            drafts.append(LessonDraft(_kind(key), clean_item(value)))
    drafts = [d for d in drafts if d.text]
    if drafts:
        for d in drafts:
            d.tags = list(tags[:MAX_TAGS])
        return drafts, "tagged"
    drafts = [d for d in _json_lessons(_json_payload(text)) if d.text]
    if drafts:
        return drafts, "json"
    for line in text.splitlines():
        m = _LISTED.match(line)
        if m and len(clean_item(m.group(1)).split()) >= 3:
            body = clean_item(m.group(1))
            drafts.append(LessonDraft("avoid" if _NEGATIVE.match(body) else "do", body))
    if drafts:
        return drafts, "bullets"
    for sentence in _SENTENCE_END.split(text.strip()):
        body = clean_item(sentence)
        if len(body.split()) >= 4 and "?" not in body:
            drafts.append(LessonDraft("avoid" if _NEGATIVE_ANYWHERE.search(body) else "do", body))
    return (drafts[:MAX_SENTENCES], "sentences") if drafts else ([], "empty")


def parse_rules(text: str) -> list[str]:
    """Rules from a consolidator's reply: numbered or bulleted lines (``DO:``/``AVOID:`` lines count too), or a JSON
    list of strings / ``{"rules": [...]}``; de-duplicated, empty and one-word items dropped ([] when none).

    >>> parse_rules('```json\\n{"rules": ["Check units.", "check units."]}\\n```')
    ['Check units.']
    >>> parse_rules("- 1. Check the units.\\n- 2. Check the units.")
    ['Check the units.']
    >>> parse_rules("- Tips so far:\\n- Check the units.")
    ['Check the units.']
    >>> parse_rules("no list here")
    []
    """
    text = str(text or "")
    rules: list[str] = []
    for line in text.splitlines():
        m = _LISTED.match(line)
        if m:
            body = m.group(1)
            while (inner := _LISTED.match(body)) is not None:  # "- 1. rule": one marker too many
                body = inner.group(1)
            rules.append(clean_item(body))
        elif k := _KEYED.match(line):
            if not k.group(1).lower().startswith("tag"):
                rules.append(clean_item(f"{KIND_LABEL[_kind(k.group(1))]}: {k.group(2)}"))
    if not rules:
        payload = _json_payload(text)
        if isinstance(payload, Mapping):
            payload = payload.get("rules") or payload.get("knowledge")
        if isinstance(payload, list):
            rules = [clean_item(r) for r in payload if isinstance(r, str)]
    out: list[str] = []
    seen: set[str] = set()
    for rule in rules:
        key = rule.casefold()
        if len(rule.split()) >= 2 and key not in seen and not rule.endswith(":"):  # "Rules so far:" is a header
            seen.add(key)
            out.append(rule)
    return out


def scrub(text: str, answers: Sequence[str]) -> str:
    """Replace whole-token occurrences of the reflections' answers with ``[answer]`` (lessons stay generic).

    >>> scrub("Recheck before answering 42, not 4.2.", ["42"])
    'Recheck before answering [answer], not 4.2.'
    """
    for answer in sorted({a for a in answers if a and a.strip()}, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.]){re.escape(answer.strip())}(?![\w])", "[answer]", text, flags=re.IGNORECASE)
    return text


def remove_question(text: str, question: str) -> str:
    """``text`` with every copy of ``question`` cut out (guidance never restates the question).

    >>> remove_question("Solve: What is 2+2? Check it.", "What is 2+2?")
    'Solve:  Check it.'
    """
    q = (question or "").strip()
    if q:
        text = text.replace(q, "")
    return text.strip()


def fit(lines: Sequence[str], budget: int, count: CountTokens) -> str:
    """Join ``lines`` with newlines, keeping as many as fit in ``budget`` (by ``count``); the first line that does
    not fit is cut to the words that do (when at least three fit), and the rest are dropped.

    >>> fit(["one two three", "four five six seven"], 5, word_count)
    'one two three'
    >>> fit(["one two three four five six"], 4, word_count)
    'one two three four…'
    """
    out: list[str] = []
    for line in lines:
        if count("\n".join([*out, line])) <= budget:
            out.append(line)
            continue
        words = line.split()
        lo, hi = 0, len(words) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count("\n".join([*out, " ".join(words[:mid]) + "…"])) <= budget:
                lo = mid
            else:
                hi = mid - 1
        if lo >= 3:
            out.append(" ".join(words[:lo]) + "…")
        break
    return "\n".join(out)


def check_composed(
    text: str, roles: Sequence[str], question: str, budget: int, count: CountTokens
) -> dict[str, tuple[str | None, str | None]]:
    """The composer's checks (C.3) per role: the field is present, parseable (closed, non-empty once the question is
    cut out, no stray schema tags) and within ``budget``. Returns ``{role: (text, None) or (None, reason)}``.

    >>> out = check_composed("<P_R>Check units.</P_R><P_M>", ["reasoner", "monitor", "controller"], "?", 10, word_count)
    >>> out["reasoner"], out["monitor"][1], out["controller"][1]
    (('Check units.', None), 'unparsable: <P_M> is not closed', 'missing field <P_C>')
    """
    out: dict[str, tuple[str | None, str | None]] = {}
    for role in roles:
        tag = ROLE_TAGS[role]
        if not re.search(rf"<\s*{tag}\s*>", text, re.IGNORECASE):
            out[role] = (None, f"missing field <{tag}>")
            continue
        m = re.search(rf"<\s*{tag}\s*>(.*?)<\s*/\s*{tag}\s*>", text, re.IGNORECASE | re.DOTALL)
        if not m:
            out[role] = (None, f"unparsable: <{tag}> is not closed")
            continue
        body = re.sub(r"\n{3,}", "\n\n", remove_question(m.group(1), question)).strip()
        if not body:
            out[role] = (None, f"unparsable: <{tag}> is empty")
        elif re.search(r"<\s*/?\s*P_[A-Z]+\s*>", body, re.IGNORECASE):
            out[role] = (None, f"unparsable: <{tag}> holds another field's tag")
        elif (n := count(body)) > budget:
            out[role] = (None, f"over budget: {n} > {budget} tokens")
        else:
            out[role] = (body, None)
    return out
