"""Shared pieces of the LLM-curated memories (Dynamic Cheatsheet, ACE): entry parsing, the corpus, records, calls.

``memory: dc`` (:mod:`metamod.memory.dc`) and ``memory: ace`` (:mod:`metamod.memory.ace`) both read curator replies
as ``name: description`` lines (:func:`parse_entries`, which rejects labels a small model echoes), warm-start from
a mined corpus (:func:`load_corpus`, :func:`select_corpus`), keep a gold-free record of each solved question
(:func:`solution_record`) and call the memory LLM greedily in one batch (:func:`chat_texts`); both are a
:class:`CuratedMemory` (options, memory LLM, corpus, embedder, counters, record and config in one place).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from metamod.llm.base import chat_checked
from metamod.memory.base import BaseMemory, Observation
from metamod.memory.bot import trajectory
from metamod.memory.cheatsheet.corpus import corpus_embedder, read_behaviours
from metamod.memory.embed import Embedder, l2_normalise
from metamod.prompts import render

logger = logging.getLogger(__name__)

#: Longest kept entry text, longest entry name (in words), longest solution tail sent to an LLM.
MAX_TEXT_CHARS, MAX_NAME_WORDS, SOLUTION_CHARS = 300, 6, 1500
#: Labels a small model echoes from the prompt; a line with one of these as its name is not an entry.
_LABELS = frozenset(
    "answer cheatsheet current-cheatsheet example final-answer helpful harmful insight lesson name new-problem "
    "new-tips note outcome playbook playbook-tips problem question reflection revise solution solved-problems "
    "step tip tips known-tips tips-shown add".split()
)
_PREFIX = re.compile(r"^\s*(?:[-*\u2022>]+\s*|\d+\s*[.)]\s*)*")
_REVISE = re.compile(r"^revise(?:\s*:\s*|\s+)(.*)$", re.I)
_ENTRY = re.compile(r"^[`*_\"'\[(]*([A-Za-z][A-Za-z0-9 _\-/]{0,79}?)[`*_\"'\])]*\s*:\s*(.+)$")


def needs_llm_message(memory: str) -> str:
    """The one-line error of an LLM-curated memory built without a memory LLM.

    >>> needs_llm_message("dc")
    "memory 'dc' needs a memory LLM: set memory_model (a local folder, served name or embedded alias)"
    """
    return f"memory {memory!r} needs a memory LLM: set memory_model (a local folder, served name or embedded alias)"


# ---------------------------------------------------------------------------------------------- parsing
def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().strip("`*_\"'").strip()


def _name(raw: str) -> str | None:
    """A lower-case hyphenated entry name, or None for a label, a sentence or nothing."""
    words = re.findall(r"[a-z0-9]+", raw.lower())
    name = "-".join(words)
    if not words or len(words) > MAX_NAME_WORDS or name in _LABELS or not name[0].isalpha():
        return None
    return name


def parse_entries(text: str) -> list[tuple[str, str, str]]:
    """The edits in a curator or synthesis reply: ``(op, name, description)`` with op ``add`` or ``revise``.

    A line is ``name: description`` (bullets, numbering and markdown are tolerated) or ``REVISE name:
    description``. A name must be at most six words and not a prompt label; a description needs at least three
    words of letters (it is clipped to 300 characters). Everything else (prose, NONE, echoed labels) is skipped, so garbage gives ``[]``.

    >>> parse_entries("1. **Check Units**: Convert all quantities first.\\nREVISE draw-it: Sketch the setup, then label it.")
    [('add', 'check-units', 'Convert all quantities first.'), ('revise', 'draw-it', 'Sketch the setup, then label it.')]
    >>> parse_entries("NONE\\nThe answer is: 36\\nSolution: 3 * 12 = 36 pens in total\\nSo it is: 3 * 12 = 36")
    []
    """
    edits: list[tuple[str, str, str]] = []
    for line in (text or "").splitlines():
        line = _PREFIX.sub("", line).strip()
        op = "add"
        revise = _REVISE.match(line.strip("*_ "))
        if revise:
            op, line = "revise", _PREFIX.sub("", revise.group(1))
        match = _ENTRY.match(line)
        if not match:
            continue
        name, description = _name(match.group(1)), _clean(match.group(2))
        if name is None or len(re.findall(r"[A-Za-z]{2,}", description)) < 3:
            continue
        edits.append((op, name, description[:MAX_TEXT_CHARS]))
    return edits


# ---------------------------------------------------------------------------------------------- corpus and records
def corpus_file(path: str | Path) -> Path:
    """``behaviours.jsonl`` of a corpus given as its folder or the file itself (one-line error when missing)."""
    path = Path(path).expanduser()
    file = path / "behaviours.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(
            f"corpus {path} has no behaviours.jsonl: expected a folder written by `metamod mine-behaviours` or the file"
        )
    return file


def load_corpus(path: str | Path) -> list[dict[str, Any]]:
    """The behaviours of a mined corpus: ``{id, name, description, domain, question}`` per row, file order; read
    by :func:`metamod.memory.cheatsheet.corpus.read_behaviours` (the one reader), names and descriptions cleaned for
    prompts.

    Raises:
        FileNotFoundError: no behaviours.jsonl there.
        JsonlError: a malformed row or a duplicated id (the message gives file:line).
    """
    return [
        {
            "id": str(row["id"]),
            "name": _name(str(row["name"])) or re.sub(r"\s+", "-", str(row["name"]).strip().lower()),
            "description": _clean(str(row["description"]))[:MAX_TEXT_CHARS],
            "domain": str(row.get("domain") or ""),
            "question": str(row.get("question") or ""),
        }
        for row in read_behaviours(corpus_file(path))
    ]


def corpus_embeddings(path: str | Path, embedder: Embedder, rows: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The corpus's saved ``(behaviours, queries)`` embeddings when they were made by this same embedder."""
    folder = corpus_file(path).parent
    meta, arrays = folder / "embeddings.json", folder / "embeddings.npz"
    if not (meta.is_file() and arrays.is_file()):
        return None
    try:
        info = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, Mapping) or info.get("embedder") != embedder.spec() or info.get("rows") != rows:
        return None
    with np.load(arrays, allow_pickle=False) as data:
        if "behaviours" not in data.files or "queries" not in data.files:
            return None
        return l2_normalise(data["behaviours"]), l2_normalise(data["queries"])


def select_corpus(rows: Sequence[Mapping[str, Any]], limit: int) -> list[Mapping[str, Any]]:
    """At most ``limit`` rows taken round-robin over the domains (domains in first-seen order, rows in file order).

    >>> rows = [{"id": i, "domain": d} for i, d in enumerate("aaab")]
    >>> [r["id"] for r in select_corpus(rows, 3)]
    [0, 3, 1]
    """
    by_domain: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_domain.setdefault(str(row.get("domain") or ""), []).append(row)
    out: list[Mapping[str, Any]] = []
    depth = 0
    while len(out) < min(limit, len(rows)):
        out += [group[depth] for group in by_domain.values() if depth < len(group)][: limit - len(out)]
        depth += 1
    return out


def solution_record(observation: Observation) -> dict[str, Any]:
    """The gold-free record LLM-curated memories queue: question, the model's solution (tail), flags, served ids."""
    ex, outcome = observation.example, observation.outcome
    _, text, _ = trajectory(observation.trace, outcome["final_answer"])
    return {
        "id": ex.id,
        "question": ex.prompt_text(),
        "kind": ex.kind,
        "method": str(outcome["method"]),
        "solution": text.strip()[-SOLUTION_CHARS:],
        "correct": outcome["correct"],  # None unless use_correctness (then the harness passes the grading)
        "answered": outcome["final_answer"] is not None,
        "served": list(observation.served),
    }


def outcome_text(record: Mapping[str, Any], use_correctness: bool) -> str:
    """``dc_outcome`` for a record when correctness may be shown, else ""."""
    return render("dc_outcome", verdict="correct" if record["correct"] else "wrong") if use_correctness else ""


def chat_texts(llm: Any, sampling: Any, prompts: list[str], max_tokens: int) -> list[str]:
    """One batched call of the memory LLM (none for no prompts); one reply text per prompt."""
    if not prompts:
        return []
    sampling = dataclasses.replace(sampling, n=1, max_tokens=max_tokens)
    generations = chat_checked(llm, [[{"role": "user", "content": p}] for p in prompts], sampling, who="memory LLM")
    return [str(g.text or "") for g in generations]


def lines(items: Sequence[tuple[str, str]]) -> str:
    """Guidance body: one ``- name: description`` line per item."""
    return "\n".join(f"- {name}: {text}" for name, text in items)


# ---------------------------------------------------------------------------------------------- the memory frame
class CuratedMemory(BaseMemory):
    """The frame ACE and DC share: options of ``options_class``, the memory LLM and its greedy sampling, the warm-start
    corpus (``corpus`` unless ``cold_start``), the retrieval embedder, the ``counter_names`` counters and the
    gold-free record of each solved question.

    Raises:
        TypeError: options of another class.
        ValueError: no ``llm`` while ``needs_llm`` (the message names memory_model).
    """

    uses_llm: ClassVar[bool] = True
    #: The LLM role shown whether each solution was correct under ``use_correctness`` (named by :meth:`gold_use`).
    gold_reader: ClassVar[str] = "curator"
    counter_names: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def gold_use(cls, options: Any) -> str | None:
        """``use_correctness`` shows the ``gold_reader`` whether each solution was graded correct."""
        if options is not None and options.use_correctness:
            return f"tells the {cls.gold_reader} whether each solution was graded correct (use_correctness)"
        return None

    def __init__(
        self, options: Any, *, llm: Any, llm_sampling: Any, seed: int, embedder: Embedder | None, needs_llm: bool
    ) -> None:
        super().__init__()
        self.options = self._checked_options(options)
        if llm is None and needs_llm:
            raise ValueError(needs_llm_message(self.name))
        self._set_llm(llm, llm_sampling, seed)
        self.counters: dict[str, int] = dict.fromkeys(self.counter_names, 0)
        self.corpus: list[dict[str, Any]] = (
            load_corpus(self.options.corpus) if self.options.corpus and not self.options.cold_start else []
        )
        self.embedder: Embedder = corpus_embedder(self.options, embedder)

    def record(self, observation: Observation) -> dict[str, Any]:
        return solution_record(observation)

    def config_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self.options), "embedder": self.embedder.spec(), "corpus_rows": len(self.corpus)}

    def saved_counters(self, state: Mapping[str, Any]) -> dict[str, int]:
        """The counters with a saved state's ``counters`` laid over them (a malformed count raises ValueError)."""
        return {**self.counters, **{str(k): int(v) for k, v in (state.get("counters") or {}).items()}}
