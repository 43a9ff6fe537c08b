"""PhysReason (``zhibei1204/PhysReason``), one of the Bayesian Cheatsheet paper's benchmarks: physics problems with
several sub-questions, one example each. Read from the hub zip on GPU nodes, or offline from the zip, the unpacked
folder of problem folders, or a ``.jsonl``/``.json``/``.parquet`` export (like the tasks of
:mod:`metamod.tasks.reasoning_benchmarks`). See docs/tasks.md, "Bayesian Cheatsheet tasks".
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from metamod.errors import InputError
from metamod.tasks.base import Example
from metamod.tasks.benchmarks import as_text
from metamod.tasks.reasoning_benchmarks import SourcedTableTask, hub_file, json_records, latex_gold
from metamod.tasks.sources import Table, read_table

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------- PhysReason

#: PhysReason variant -> its zip in ``zhibei1204/PhysReason``.
PHYSREASON_FILES = {"full": "PhysReason-full.zip", "mini": "PhysReason-mini.zip"}
#: Which sub-questions of a problem become examples.
PHYSREASON_SUB_QUESTIONS = ("all", "last")


def _sub_questions(structure: dict[str, Any]) -> list[str]:
    """The ``sub_question_<k>`` texts of a ``question_structure``, in order of k."""
    numbered = []
    for key, value in structure.items():
        match = re.fullmatch(r"sub_question_(\d+)", str(key))
        if match:
            numbered.append((int(match.group(1)), as_text(value) or ""))
    return [text for _, text in sorted(numbered)]


def _captions_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        value = "\n".join(str(item).strip() for item in value if as_text(item))
    return as_text(value)


def _decoded(value: Any) -> Any:
    """A JSON-encoded cell (csv/parquet exports) decoded; anything else as is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def physreason_rows(
    problems: Iterable[tuple[str, dict[str, Any], bool]],
    *,
    sub_questions: str = "all",
    include_images: bool = True,
    use_captions: bool = True,
) -> tuple[Table, dict[str, int]]:
    """Expand PhysReason problems into one row per graded sub-question.

    Args:
        problems: ``(problem_id, problem.json record, has_images)`` triples.
        sub_questions: ``all`` (a row per sub-question) or ``last`` (only each problem's last sub-question).
        include_images: keep problems that come with a figure (a problem with ``image_captions`` counts as one).
        use_captions: add the problem's ``image_captions`` after its context.

    Returns:
        The column table (``id``, ``question``, ``answer``, ``problem_id``, ``part``, ``num_parts``, ``difficulty``,
        ``has_images``) and counts ``{"problems", "left_out_images", "mismatched"}`` (``mismatched``: problems whose
        answer list and sub-questions differ in length; only the parts that have both are kept).

    Raises:
        InputError: for a problem without ``question_structure`` (an object) or ``answer`` (a list).

    >>> record = {"question_structure": {"context": "A ball falls from rest from height h.", "sub_question_1":
    ...     "Find the fall time t.", "sub_question_2": "Find the impact speed v."},
    ...     "answer": ["$t=\\\\sqrt{2h/g}$", "$v=\\\\sqrt{2gh}$"], "difficulty": "easy"}
    >>> table, counts = physreason_rows([("p1", record, False)])
    >>> table["id"], table["part"], counts
    (['physreason-p1-1', 'physreason-p1-2'], [1, 2], {'problems': 1, 'left_out_images': 0, 'mismatched': 0})
    >>> print(table["question"][1])
    A ball falls from rest from height h.
    <BLANKLINE>
    Earlier parts of this problem (for context only):
    (1) Find the fall time t.
    <BLANKLINE>
    Answer part (2): Find the impact speed v.
    """
    if sub_questions not in PHYSREASON_SUB_QUESTIONS:
        raise ValueError(
            f"physreason: sub_questions must be one of {', '.join(PHYSREASON_SUB_QUESTIONS)}, got {sub_questions!r}"
        )
    columns = ("id", "question", "answer", "problem_id", "part", "num_parts", "difficulty", "has_images")
    table: Table = {column: [] for column in columns}
    counts = {"problems": 0, "left_out_images": 0, "mismatched": 0}
    for problem_id, record, has_images in problems:
        structure, answers = _decoded(record.get("question_structure")), _decoded(record.get("answer"))
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(structure, dict) or not isinstance(answers, list | tuple):
            raise InputError(
                f"physreason: problem {problem_id!r} needs 'question_structure' (an object with 'context' and "
                f"'sub_question_<k>') and 'answer' (a list with one answer per sub-question)"
            )
        captions = _captions_text(_decoded(record.get("image_captions")))
        has_images = bool(has_images or captions or record.get("has_images"))
        if has_images and not include_images:
            counts["left_out_images"] += 1
            continue
        counts["problems"] += 1
        parts = _sub_questions(structure)
        if len(parts) != len(answers):
            counts["mismatched"] += 1
        num_parts = min(len(parts), len(answers))
        context = as_text(structure.get("context")) or ""
        if use_captions and captions:
            context = f"{context}\n\nFigure description: {captions}".strip()
        wanted = range(num_parts) if sub_questions == "all" else range(max(num_parts - 1, 0), num_parts)
        for k in wanted:
            blocks = [context] if context else []
            if k > 0:
                earlier = "\n".join(f"({j + 1}) {parts[j]}" for j in range(k))
                blocks.append(f"Earlier parts of this problem (for context only):\n{earlier}")
            blocks.append(f"Answer part ({k + 1}): {parts[k]}" if num_parts > 1 else parts[k])
            table["id"].append(f"physreason-{problem_id}-{k + 1}")
            table["question"].append("\n\n".join(blocks))
            table["answer"].append(None if answers[k] is None else str(answers[k]))
            table["problem_id"].append(problem_id)
            table["part"].append(k + 1)
            table["num_parts"].append(num_parts)
            table["difficulty"].append(as_text(record.get("difficulty")))
            table["has_images"].append(has_images)
    return table, counts


class PhysReasonTask(SourcedTableTask):
    """PhysReason (``zhibei1204/PhysReason``): physics problems with several sub-questions, one example each.

    The hub dataset is two zips of problem folders, ``PhysReason-full.zip`` (1,200 problems) and
    ``PhysReason-mini.zip`` (200). Each folder (named by the problem id) holds ``problem.json`` --
    ``question_structure`` (``context`` + ``sub_question_1`` .. ``sub_question_n``), ``answer`` (a list, one per
    sub-question), ``difficulty``, ``image_captions``, ``explanation_steps`` -- and, for figure problems, ``images/``.
    Every sub-question becomes an :class:`~metamod.tasks.base.Example` (PhysReason's own answer-level score also
    counts sub-questions): the context, the earlier parts' questions (never their answers), then the part to
    answer; ids ``physreason-<problem id>-<part>``. Kind ``approx``: numeric answers (units allowed) within 4%,
    symbolic ones through math-verify.

    Args:
        variant: ``full`` (default) or ``mini``: the hub file to fetch (with ``data_files`` it only lands in meta).
        data_files: the zip, its unpacked folder, or a ``.jsonl``/``.json``/``.parquet`` file with one problem per
            row (``problem_id``, ``question_structure``, ``answer``, optional ``difficulty``, ``image_captions``,
            ``has_images``).
        sub_questions: ``all`` (default) or ``last`` (one example per problem: its final sub-question).
        include_images: keep problems with a figure (default; a text model reads its caption). ``False`` keeps the
            text-only problems; the count left out is logged and kept in ``left_out_images``.
        use_captions: append a problem's ``image_captions`` to its context (default ``True``).
        limit / seed: a seeded sample of examples (sub-questions), as for every table task.
    """

    name, kind = "physreason", "approx"
    hub_path, default_split = "zhibei1204/PhysReason", "test"
    id_column = "id"
    meta_columns = ("problem_id", "part", "num_parts", "difficulty", "has_images")

    def __init__(
        self,
        variant: str = "full",
        data_files: str | None = None,
        sub_questions: str = "all",
        include_images: bool = True,
        use_captions: bool = True,
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        if variant not in PHYSREASON_FILES:
            raise ValueError(f"physreason: variant must be one of {', '.join(PHYSREASON_FILES)}, got {variant!r}")
        if sub_questions not in PHYSREASON_SUB_QUESTIONS:
            raise ValueError(
                f"physreason: sub_questions must be one of {', '.join(PHYSREASON_SUB_QUESTIONS)}, got {sub_questions!r}"
            )
        self.variant, self.sub_questions = variant, sub_questions
        self.include_images, self.use_captions = bool(include_images), bool(use_captions)
        self.left_out_images = 0
        super().__init__(split=variant, data_files=data_files, limit=limit, seed=seed)

    @property
    def source(self) -> str:
        return self.data_files or f"{self.hub_path}/{PHYSREASON_FILES[self.variant]}"

    def _problems(self) -> list[tuple[str, dict[str, Any], bool]]:
        if self.data_files is None:
            path = hub_file(self.hub_path, PHYSREASON_FILES[self.variant])
        else:
            path = Path(self.data_files)
        if path.is_dir() or path.suffix.lower() == ".zip":
            if not path.exists():
                raise FileNotFoundError(f"Data file not found: {path} (expected the zip or its unpacked folder)")
            return json_records(path, "/problem.json")
        table = read_table(path)
        rows = max((len(values) for values in table.values()), default=0)
        ids = table.get("problem_id") or table.get("id") or [None] * rows
        flags = table.get("has_images") or [False] * rows
        return [
            (as_text(ids[i]) or str(i), {column: values[i] for column, values in table.items()}, bool(flags[i]))
            for i in range(rows)
        ]

    def _read_source(self) -> Table:
        table, counts = physreason_rows(
            self._problems(),
            sub_questions=self.sub_questions,
            include_images=self.include_images,
            use_captions=self.use_captions,
        )
        self.left_out_images = counts["left_out_images"]
        logger.info(
            "%s: %d problems -> %d examples (sub_questions=%s); %d problems with figures left out; %d problems with "
            "a different number of answers and sub-questions",
            self.source,
            counts["problems"],
            len(table["id"]),
            self.sub_questions,
            counts["left_out_images"],
            counts["mismatched"],
        )
        return table

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        return latex_gold(value)

    def _build(self, index: int) -> Example | None:
        example = super()._build(index)
        if example is not None:
            example.meta["variant"] = self.variant
        return example
