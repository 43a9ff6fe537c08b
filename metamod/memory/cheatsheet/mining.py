"""Behaviour mining: solve -> reflect -> extract reusable ``{name: description}`` records (one batched call per stage).

The three stages follow the metacognitive procedure of the Bayesian Cheatsheet paper (appendix D.1), in metamod's
own prompts (``behaviour_solve``, ``behaviour_reflect``, ``behaviour_extract`` in ``metamod/prompts/templates.yaml``):

1. :func:`solve`: the model writes a chain-of-thought solution of each question;
2. :func:`reflect`: it assesses its solution and names the general reasoning steps that solve problems like it,
   whether the solution was right or not (the gold answer is never shown);
3. :func:`extract`: it turns that reflection into ``name: description`` lines, with ``<n>`` in place of the
   problem's numbers; :func:`parse_behaviour_records` reads them (robust to whatever a weak model writes).

:func:`reflect_and_extract` (stages 2 and 3 on ``(question, solution)`` pairs) does not depend on tasks or gold
answers, so a memory can run it online on the solver's own solutions. ``metamod mine-behaviours``
(:mod:`metamod.memory.cheatsheet.mine`) runs all three over task questions and writes the behaviour corpus.

>>> text = '''Behaviours:
... 1. **Track Running Total**: keep a running total of 17 passengers and add each change.
... - `check-units`: convert 3.5 km to metres before adding.
... Note: 12 + 5'''
>>> parse_behaviour_records(text, limit=5)
[('track-running-total', 'keep a running total of <n> passengers and add each change.'), ('check-units', 'convert <n> km to metres before adding.')]
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from metamod.llm.base import Generation, Generator, SamplingConfig, chat_checked
from metamod.prompts import render

logger = logging.getLogger(__name__)

Record = tuple[str, str]

#: longest description kept (longer ones are cut at a word boundary)
MAX_DESCRIPTION_CHARS = 300
#: most words a name may have (more reads as a sentence, not a label)
MAX_NAME_WORDS = 6
#: names that are headers or labels of the output, never behaviours
HEADER_NAMES = frozenset(
    {
        "answer", "assessment", "behavior", "behaviors", "behaviour", "behaviours", "description", "example",
        "explanation", "final-answer", "here-are-the-behaviours", "here-are-the-behaviors", "method", "name",
        "note", "notes", "output", "problem", "question", "reflection", "result", "solution", "step", "summary",
        "the-answer", "total",
    }
)  # fmt: skip
#: words that make a "name" a sentence ("So the answer is", "We need to")
_SENTENCE_WORDS = frozenset({"i", "we", "you", "it", "is", "are", "was", "were", "this", "that", "so", "here", "let's"})
#: stop string of the extract stage (a weak model goes on to invent the next notes block)
EXTRACT_STOP = ["\nNotes:"]

_BULLET = r"(?:[-*\u2022+]|\(?\d{1,2}[.):]|\(?[a-zA-Z][.)])?"
# `name: description` with optional bullet / number, bold or backticks around the name, and ':' or ' - ' after it
_RECORD_LINE = re.compile(
    rf"^\s*{_BULLET}\s*(?P<q>\*\*|__|`|\"|')?(?P<name>[A-Za-z][\w \-'/&<>]{{0,80}}?)(?P=q)?"
    r"\s*(?:(?P=q)?\s*[:\uff1a]|\s[-\u2013\u2014]\s)(?:\*\*|`)?\s*(?P<desc>\S.*)$"
)
_NAME_FIELD = re.compile(r"^\s*(?:[-*]\s*)?\**name\**\s*[:=]\s*(?P<v>.+)$", re.IGNORECASE)
_DESC_FIELD = re.compile(r"^\s*(?:[-*]\s*)?\**(?:description|instruction|desc)\**\s*[:=]\s*(?P<v>.+)$", re.IGNORECASE)
_GENERIC_NAME = re.compile(r"^(?:step|part|stage|behaviou?r|rule|strategy|tip|item|point|method)(?:-n|-\d+)?$")
# a numeric literal: not glued to a letter, digit, underscore, dot or placeholder on its left; ordinals (3rd) kept
_NUMBER = re.compile(
    r"(?<![\w.<])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?(?!\d|st\b|nd\b|rd\b|th\b)"
)


def placeholderise(description: str) -> str:
    """Replace every literal number of ``description`` with ``<n>`` (deterministic; existing ``<x>`` kept).

    Replaced: integers, decimals, thousands-separated numbers and simple fractions (``3/4``) standing on their
    own, with their sign (``-3``); a coefficient glued to a variable keeps the variable (``2x`` -> ``<n>x``).
    Kept: digits inside words and identifiers (``x2``, ``log2``, ``CO2``), ordinals (``3rd``), number words
    (``two``, ``half``: they are usually generic, as in "both sides" or "two cases") and placeholders already
    written (``<n>``, ``<x1>``).

    >>> placeholderise("Add 17 and -12, then take 3/4 of 1,200.5; 2x + 3 = 7 for the 3rd time, x2 stays.")
    'Add <n> and <n>, then take <n> of <n>; <n>x + <n> = <n> for the 3rd time, x2 stays.'
    >>> placeholderise("Split the two halves, then check <n> and <x1>.")
    'Split the two halves, then check <n> and <x1>.'
    """
    return _NUMBER.sub("<n>", description)


def normalise_name(name: str) -> str:
    """A behaviour label as lower-case words joined by hyphens (markdown, quotes and punctuation dropped).

    Digit runs become ``n`` so that problem-specific labels (``add-17-and-12``) collapse onto one another.

    >>> normalise_name("**Check_Units** "), normalise_name("`Add 17 And 12`"), normalise_name("Work backwards!")
    ('check-units', 'add-n-and-n', 'work-backwards')
    """
    text = re.sub(r"[*`\"'\u2018\u2019\u201c\u201d]", "", name).strip().lower()
    text = re.sub(r"<[a-z]\w*>", "n", text)
    text = re.sub(r"\d+", "n", text)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def _clean_description(text: str) -> str:
    text = re.sub(r"\*\*|__|`", "", text)
    text = re.sub(r"\s+", " ", text).strip().strip("\"'").strip()
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[:MAX_DESCRIPTION_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + "..."
    return placeholderise(text)


def _accept(name: str, description: str) -> Record | None:
    """The cleaned record, or ``None`` when it is a header, a sentence, a bare number or an empty description."""
    raw_words = name.split()
    if not raw_words or len(raw_words) > MAX_NAME_WORDS or re.search(r"[.?!,;]\s", name + " "):
        return None
    if any(word.lower().strip("*`'\"") in _SENTENCE_WORDS for word in raw_words):
        return None
    label = normalise_name(name)
    if not label or not re.search(r"[a-z]{2}", label) or label in HEADER_NAMES or _GENERIC_NAME.match(label):
        return None
    desc = _clean_description(description)
    if len(re.findall(r"[A-Za-z]{2,}", desc)) < 2:  # 1-word or all-arithmetic descriptions say nothing reusable
        return None
    return label, desc


def _json_payload(text: str) -> Any:
    """The first JSON object or list in ``text`` (a fenced block or a bare span), or ``None``."""
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if start == -1 or end <= start:
            continue
        try:
            return json.loads(text[start : end + 1])
        except (json.JSONDecodeError, ValueError):
            continue
    return None


def json_records(payload: Any) -> list[tuple[str, str]]:
    """Raw ``(name, description)`` pairs from a JSON payload (a mapping, a list of mappings or of strings)."""
    if isinstance(payload, dict):
        for key in ("behaviours", "behaviors", "records", "items"):
            if isinstance(payload.get(key), list | dict):
                return json_records(payload[key])
        if isinstance(payload.get("name"), str):
            return json_records([payload])
        return [(str(k), v) for k, v in payload.items() if isinstance(v, str)]
    if not isinstance(payload, list):
        return []
    out: list[tuple[str, str]] = []
    for item in payload:
        if isinstance(item, dict):
            name = item.get("name") or item.get("label") or item.get("title")
            desc = item.get("description") or item.get("instruction") or item.get("desc")
            if isinstance(name, str) and isinstance(desc, str):
                out.append((name, desc))
            elif len(item) == 1:
                key, value = next(iter(item.items()))
                if isinstance(value, str):
                    out.append((str(key), value))
        elif isinstance(item, str) and ":" in item:
            name, desc = item.split(":", 1)
            out.append((name, desc))
    return out


def _line_records(text: str) -> list[tuple[str, str]]:
    """Raw pairs from ``name: description`` lines and ``Name: ... / Description: ...`` line pairs."""
    out: list[tuple[str, str]] = []
    pending_name: str | None = None
    for line in text.splitlines():
        field_name = _NAME_FIELD.match(line)
        if field_name:
            pending_name = field_name.group("v")
            continue
        field_desc = _DESC_FIELD.match(line)
        if field_desc and pending_name is not None:
            out.append((pending_name, field_desc.group("v")))
            pending_name = None
            continue
        match = _RECORD_LINE.match(line)
        if match:
            out.append((match.group("name"), match.group("desc")))
    return out


def parse_behaviour_records(text: str | None, limit: int) -> list[Record]:
    """Read behaviour records from a model's extraction output; never raises (garbage gives ``[]``).

    Accepted: a JSON object ``{name: description}`` or ``{"behaviours": [...]}``, a JSON list of
    ``{"name", "description"}`` objects; else ``name: description`` lines (bulleted, numbered, with bold or
    backticks around the name, ``name - description``) and ``Name: ... / Description: ...`` pairs. Dropped:
    headers (``Behaviours:``), empty or one-word descriptions, descriptions without two words, names longer
    than :data:`MAX_NAME_WORDS` words or containing sentence punctuation, generic labels (``step-1``) and
    repeated names (the first wins). Names are normalised (:func:`normalise_name`) and numbers in descriptions
    become ``<n>`` (:func:`placeholderise`).

    Args:
        text: the model output (``None`` is allowed).
        limit: the most records returned.

    Returns:
        ``[(name, description), ...]`` in the order written.

    >>> parse_behaviour_records('{"Work Backwards": "start from the goal 24 and undo each step"}', 3)
    [('work-backwards', 'start from the goal <n> and undo each step')]
    >>> parse_behaviour_records("I feel lucky to help!\\n\\n24", 3), parse_behaviour_records(None, 3)
    ([], [])
    """
    if not text or limit < 1:
        return []
    try:
        payload = _json_payload(text)
        raw = json_records(payload) if payload is not None else []
        if not raw:
            raw = _line_records(text)
        return _first_unique((_accept(str(name), str(description)) for name, description in raw), limit)
    except (RecursionError, ValueError, TypeError) as err:  # defensive: a parser must not end a mining run
        logger.warning("could not parse a behaviour extraction (%s); keeping no records", err)
        return []


def dedupe_by_name(records: Iterable[Any], *, key: Any = None) -> list[Any]:
    """Keep the first record of every name (exact match; the paper's rule), in order.

    Args:
        records: ``(name, description)`` pairs, or any items when ``key`` gives their name.
        key: ``key(item) -> name`` (default: ``item[0]``).

    >>> dedupe_by_name([("a", "x"), ("b", "y"), ("a", "z")])
    [('a', 'x'), ('b', 'y')]
    """
    get = key or (lambda item: item[0])
    seen: set[str] = set()
    out = []
    for item in records:
        name = get(item)
        if name in seen:
            continue
        seen.add(name)
        out.append(item)
    return out


# --------------------------------------------------------------------------------------------- the stages


def _user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def _one_call(generator: Generator, conversations: list, sampling: SamplingConfig, stage: str) -> list[Generation]:
    if not conversations:
        return []
    if sampling.n != 1:
        raise ValueError(f"behaviour mining draws one sample per question; {stage} sampling has n={sampling.n}")
    return chat_checked(generator, conversations, sampling, who=f"{stage}: the generator")


def solve(generator: Generator, sampling: SamplingConfig, questions: Sequence[str]) -> list[Generation]:
    """Stage 1: a chain-of-thought solution per question, in ONE batched ``generator.chat`` call."""
    conversations = [_user(render("behaviour_solve", question=q)) for q in questions]
    return _one_call(generator, conversations, sampling, "solve")


def reflect(generator: Generator, sampling: SamplingConfig, items: Sequence[tuple[str, str]]) -> list[Generation]:
    """Stage 2: assess each ``(question, solution)`` and name its reusable reasoning steps (one batched call)."""
    conversations = [_user(render("behaviour_reflect", question=q, solution=s.strip())) for q, s in items]
    return _one_call(generator, conversations, sampling, "reflect")


def extract(
    generator: Generator, sampling: SamplingConfig, reflections: Sequence[str], *, max_behaviours: int = 5
) -> list[Generation]:
    """Stage 3: ``name: description`` lines from each reflection (one batched call; stops at a new notes block)."""
    conversations = [
        _user(render("behaviour_extract", reflection=r.strip(), max_behaviours=max_behaviours)) for r in reflections
    ]
    if sampling.stop is None:
        sampling = replace(sampling, stop=list(EXTRACT_STOP))
    return _one_call(generator, conversations, sampling, "extract")


@dataclass
class StageOutputs:
    """What the reflect and extract stages produced for one ``(question, solution)`` pair.

    Attributes:
        reflection: the reflect stage's text.
        extraction: the extract stage's text.
        records: the parsed ``(name, description)`` records.
        tokens: ``{"reflect": {"prompt", "completion"}, "extract": {...}}``.
    """

    reflection: str
    extraction: str
    records: list[Record]
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)


def tokens_of(generation: Generation) -> dict[str, int]:
    """``{"prompt": ..., "completion": ...}`` of one generation."""
    return {"prompt": int(generation.prompt_tokens), "completion": int(generation.completion_tokens)}


def complete_lines(generation: Generation) -> str:
    """The text of ``generation`` without a last line cut off by the token budget (``finish_reason == "length"``).

    >>> complete_lines(Generation("a: b c\\nd: the amounts <n> and", finish_reason="length"))
    'a: b c\\n'
    >>> complete_lines(Generation("a: b c", finish_reason="length")), complete_lines(Generation("a: b\\nc: d"))
    ('a: b c', 'a: b\\nc: d')
    """
    text = generation.text
    if generation.finish_reason == "length" and "\n" in text.rstrip("\n"):
        return text[: text.rstrip("\n").rfind("\n") + 1]
    return text


#: where a question's behaviour records come from: the extract stage (the paper), the reflection's own sentences, or both
RECORD_SOURCES = ("extraction", "reflection", "both")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_LEADER = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|step\s*\d+\s*[:.)-]?)\s*", re.IGNORECASE)
_NAME_SKIP = frozenset(
    "a an the to of and or in on for with by is are be it this that these those you your we our its as at from "
    "then so if each every all any one first".split()
)
#: openings of a reflection sentence that judge the solution instead of describing a method
_VERDICTS = (
    "the answer",
    "the final answer",
    "the correct answer",
    "yes",
    "no",
    "false",
    "true",
    "correct",
    "the attempted solution",
    "the solution is",
    "this is correct",
    "it is correct",
)


def reflection_records(text: str | None, limit: int) -> list[Record]:
    """Behaviour records read from a reflection's own sentences (no extract stage): for models that cannot extract.

    Each sentence or list line with at least five words, three of them alphabetic, that is not a verdict
    (``The answer is ...``, ``Yes``) becomes a record: the description is the sentence with numbers as ``<n>``,
    the name its first four content words. Never raises.

    >>> reflection_records("Yes, it is right. 1. Convert both lengths to centimetres before adding 3 and 40.", 3)
    [('convert-both-lengths-centimetres', 'Convert both lengths to centimetres before adding <n> and <n>.')]
    """
    if not text or limit < 1:
        return []
    return _first_unique((_sentence_record(piece) for piece in _SENTENCE_SPLIT.split(text)), limit)


def _sentence_record(piece: str) -> Record | None:
    """One reflection sentence as a record, or None (too short, not words, a verdict)."""
    sentence = _LEADER.sub("", piece).strip().strip('"')
    words = sentence.split()
    if len(words) < 5 or sum(w.isalpha() for w in words) < 3 or len(sentence) > 240:
        return None
    if sentence.lower().startswith(_VERDICTS):
        return None
    content = [w for w in re.findall(r"[A-Za-z]+", sentence) if w.lower() not in _NAME_SKIP]
    name = normalise_name(" ".join(content[:4]))
    return _accept(name, sentence) if name else None


def _first_unique(records: Iterable[Record | None], limit: int) -> list[Record]:
    """The first ``limit`` accepted records with distinct names, in order (``None``: rejected)."""
    found: list[Record] = []
    seen: set[str] = set()
    for record in records:
        if record is None or record[0] in seen:
            continue
        seen.add(record[0])
        found.append(record)
        if len(found) >= limit:
            break
    return found


def records_of(outputs: StageOutputs, source: str, limit: int) -> list[Record]:
    """The records of one question from ``source`` (:data:`RECORD_SOURCES`); ``both``: extraction first."""
    if source not in RECORD_SOURCES:
        raise ValueError(f"records_from must be one of {RECORD_SOURCES}, got {source!r}")
    records: list[Record] = []
    if source in ("extraction", "both"):
        records += list(outputs.records)
    if source in ("reflection", "both"):
        names = {name for name, _ in records}
        records += [r for r in reflection_records(outputs.reflection, limit) if r[0] not in names]
    return records[:limit] if source != "both" else records[: 2 * limit]


def reflect_and_extract_outputs(
    generator: Generator,
    sampling: SamplingConfig,
    items: Sequence[tuple[str, str]],
    *,
    max_behaviours: int = 5,
    extract_sampling: SamplingConfig | None = None,
) -> list[StageOutputs]:
    """Stages 2 and 3 with their raw texts and token counts (two batched calls); see :func:`reflect_and_extract`."""
    if max_behaviours < 1:
        raise ValueError(f"max_behaviours must be >= 1, got {max_behaviours}")
    items = list(items)
    reflections = reflect(generator, sampling, items)
    extractions = extract(
        generator, extract_sampling or sampling, [g.text for g in reflections], max_behaviours=max_behaviours
    )
    return [
        StageOutputs(
            reflection=r.text,
            extraction=e.text,
            records=parse_behaviour_records(complete_lines(e), max_behaviours),
            tokens={"reflect": tokens_of(r), "extract": tokens_of(e)},
        )
        for r, e in zip(reflections, extractions, strict=True)
    ]


def reflect_and_extract(
    generator: Generator,
    sampling: SamplingConfig,
    items: Sequence[tuple[str, str]],
    *,
    max_behaviours: int = 5,
    extract_sampling: SamplingConfig | None = None,
) -> list[list[Record]]:
    """Behaviour records of each ``(question, solution)`` pair: reflect, then extract (two batched calls).

    Independent of tasks and gold answers (the records are mined whether the solution was right or not), so an
    online memory can run it on its solver's own solutions.

    Args:
        generator: the model.
        sampling: decoding settings of the reflect stage (and of the extract stage unless ``extract_sampling``).
        items: ``(question, solution)`` pairs.
        max_behaviours: the most records kept per pair.
        extract_sampling: decoding settings of the extract stage (its ``stop`` defaults to :data:`EXTRACT_STOP`).

    Returns:
        One list of ``(name, description)`` records per pair (possibly empty), in order.
    """
    outputs = reflect_and_extract_outputs(
        generator, sampling, items, max_behaviours=max_behaviours, extract_sampling=extract_sampling
    )
    return [o.records for o in outputs]
