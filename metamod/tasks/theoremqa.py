"""TheoremQA: 800 theorem-driven questions from math, physics, EE&CS and finance, each with a typed answer.

Source: ``TIGER-Lab/TheoremQA`` (split ``test``), or a local file with the same columns: ``Question``, ``Answer``
(a string on the hub, e.g. ``"0.02"``, ``"[1, 1]"``, ``"True"``, ``"(c)"``; native JSON values in the original
``theoremqa_test.json``), ``Answer_type`` and ``Picture`` (an image, or empty). ``theorem``, ``field`` and
``subfield`` are kept in ``meta`` when present; the original JSON's ``id`` column can be used with ``id_column="id"``.

Each example gets the answer kind of its ``Answer_type`` (kept in ``meta["answer_type"]``), so one task mixes kinds
(``task.kind`` is ``"mixed"``); :func:`metamod.tasks.grading.is_equivalent` grades each one:

* ``integer`` -> ``math``: gold ``"5"``, exact (symbolic forms math-verify can compare also count).
* ``float`` -> ``approx``: gold written with a decimal point or exponent (``"0.02"``, ``"924.0"``, ``"1e-05"``),
  matched within 4%.
* ``list of integer`` -> ``approx``: gold ``"[3, 1]"``, element-wise in order, each integer exact.
* ``list of float`` -> ``approx``: gold ``"[0.5, 1.2]"``, element-wise in order, each within 4%.
* ``bool`` -> ``yesno``: gold ``"yes"`` / ``"no"`` (from ``True`` / ``False``).
* ``option`` -> ``mc``: gold ``"C"`` (from ``"(c)"``). ``choices`` stay ``None``: the options are written inline in
  the question, which is kept as it is; ``(c)``, ``c`` and ``C`` all name option C. ``meta["distractors"]`` lists
  the other options found in the question (``(a)``, ``(b)``, ...).

The 4% rule is TheoremQA's own (``within_eps`` in its evaluation code: ``|pred - gold| <= 0.04 * |gold|``). Where
this grader differs from that code: integers must be exact (the original rounds the prediction), lists are
compared in order (the original sorts both lists first, which accepts ``[variance, mean]`` for ``[mean,
variance]``), and an option answer must name one option (the original accepts any text containing ``(c)``).

All 800 questions are kept by default, as the MC2 paper evaluates on all of them: the questions that come with a
picture are asked as text only (the models here read no images; ``meta["has_picture"]`` marks them, and their count
is logged once when the task loads). ``include_images=False`` leaves them out (the count is logged and kept in
``left_out_pictures``).
"""

from __future__ import annotations

import ast
import json
import logging
import math
import re
from typing import Any

from metamod.tasks.base import Example
from metamod.tasks.benchmarks import Table, TableTask, as_text, letter_gold, yesno_gold

logger = logging.getLogger(__name__)

#: ``Answer_type`` -> answer kind of the shared grader.
ANSWER_TYPE_KINDS = {
    "integer": "math",
    "float": "approx",
    "list of integer": "approx",
    "list of float": "approx",
    "bool": "yesno",
    "option": "mc",
}

_OPTION_RE = re.compile(r"\(([a-z])\)")
_MAX_LIST_CHARS = 2000


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    number = _real(value)
    return int(number) if number is not None and number.is_integer() else None


def _real(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    else:
        text = (as_text(value) or "").replace(",", "")
        try:
            number = float(text)
        except ValueError:
            return None
    return number if math.isfinite(number) else None


def _items(value: Any) -> list[Any] | None:
    if isinstance(value, list | tuple):
        return list(value)
    text = as_text(value)
    if text is None or len(text) > _MAX_LIST_CHARS:
        return None
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    return list(parsed) if isinstance(parsed, list | tuple) else None


def theoremqa_gold(value: Any, answer_type: str) -> str | None:
    """The gold string of a TheoremQA answer for its ``Answer_type``, or ``None`` when it does not read as that type.

    Floats keep a decimal point (``924.0``), which tells the ``approx`` grader to apply the 4% tolerance; integers
    are written without one and must match exactly.

    Args:
        value: the ``Answer`` cell (a native value, or its string form as on the hub).
        answer_type: one of :data:`ANSWER_TYPE_KINDS`.

    Returns:
        The gold answer for the shared grader.

    >>> theoremqa_gold("924.0", "float"), theoremqa_gold(0.02, "float"), theoremqa_gold(5, "integer")
    ('924.0', '0.02', '5')
    >>> theoremqa_gold("[1, 1]", "list of integer"), theoremqa_gold([0.5, 3], "list of float")
    ('[1, 1]', '[0.5, 3.0]')
    >>> theoremqa_gold(True, "bool"), theoremqa_gold("False", "bool"), theoremqa_gold("(c)", "option")
    ('yes', 'no', 'C')
    >>> theoremqa_gold("about 5", "integer") is None, theoremqa_gold("3", "essay") is None
    (True, True)
    """
    if answer_type == "bool":
        return yesno_gold(value)
    if answer_type == "option":
        return letter_gold(value, 26)
    if answer_type == "integer":
        number = _integer(value)
        return None if number is None else str(number)
    if answer_type == "float":
        real = _real(value)
        return None if real is None else repr(real)
    if answer_type in ("list of integer", "list of float"):
        items = _items(value)
        if not items:
            return None
        read = _integer if answer_type == "list of integer" else _real
        numbers = [read(item) for item in items]
        return None if None in numbers else "[" + ", ".join(map(repr, numbers)) + "]"
    return None


def _has_picture(value: Any) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return not (isinstance(value, str | bytes) and not value.strip())


class TheoremQATask(TableTask):
    """TheoremQA (``TIGER-Lab/TheoremQA``, test): typed answers, each example graded by the kind of its type.

    Args:
        split: the hub split (default ``test``, the only one).
        data_files: a local ``.jsonl``/``.json``/``.parquet``/``.csv`` file with the hub's columns.
        question_column / answer_column / id_column: column names when they differ (default ``Question``,
            ``Answer``; ids ``theoremqa-<split>-<row>``, or e.g. ``id_column="id"`` for the original JSON).
        answer_type_column: the column holding the answer type (default ``Answer_type``).
        include_images: keep the questions that come with a picture, asked as text only (default ``True``: all
            800 questions, as the paper counts them; ``meta["has_picture"]`` marks them). ``False`` leaves them out.
            Either way the number of picture questions is logged once when the task loads.
        limit / seed: a seeded random subsample, as for every table task.
    """

    name, kind = "theoremqa", "mixed"
    hub_path, default_split = "TIGER-Lab/TheoremQA", "test"
    question_column, answer_column = "Question", "Answer"
    answer_type_column = "Answer_type"
    picture_column = "Picture"
    meta_columns = ("theorem", "field", "subfield")

    def __init__(
        self,
        split: str | None = None,
        data_files: str | None = None,
        question_column: str | None = None,
        answer_column: str | None = None,
        id_column: str | None = None,
        answer_type_column: str | None = None,
        include_images: bool = True,
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        if not isinstance(include_images, bool):
            raise ValueError(f"theoremqa: include_images must be true or false, got {include_images!r}")
        self.include_images = include_images
        self.answer_type_column = answer_type_column or type(self).answer_type_column
        self.left_out_pictures = 0
        self.picture_questions = 0
        super().__init__(
            split=split,
            data_files=data_files,
            question_column=question_column,
            answer_column=answer_column,
            id_column=id_column,
            limit=limit,
            seed=seed,
        )

    def _required_columns(self) -> dict[str, str | None]:
        return {**super()._required_columns(), "answer_type_column": self.answer_type_column}

    def _picture(self, index: int) -> bool:
        column = self._table.get(self.picture_column) if self._table else None
        return column is not None and _has_picture(column[index])

    def _keep(self, index: int) -> bool:
        return self.include_images or not self._picture(index)

    def _load(self) -> tuple[Table, list[int]]:
        first = self._table is None
        table, valid = super()._load()
        if first:
            self.picture_questions = sum(1 for index in range(self._num_rows()) if self._picture(index))
            if self.picture_questions and self.include_images:
                logger.info(
                    "%s: %d of %d questions come with a picture; they are asked as text only (include_images=False "
                    "leaves them out)",
                    self.source,
                    self.picture_questions,
                    self._num_rows(),
                )
            elif self.picture_questions:
                self.left_out_pictures = self.picture_questions
                logger.info(
                    "%s: left out %d of %d questions that come with a picture (include_images=True keeps them, as "
                    "text only)",
                    self.source,
                    self.left_out_pictures,
                    self._num_rows(),
                )
        return table, valid

    def _build(self, index: int) -> Example | None:
        table = self._table
        question = as_text(table[self.question_column][index])
        answer_type = (as_text(table[self.answer_type_column][index]) or "").lower()
        if question is None or answer_type not in ANSWER_TYPE_KINDS:
            return None
        gold = theoremqa_gold(table[self.answer_column][index], answer_type)
        if gold is None:
            return None
        split, row = self._row_origin(index)
        meta: dict[str, Any] = {"source": self.source, "split": split, "row": row, "answer_type": answer_type}
        for column in self.meta_columns:
            value = table[column][index] if column in table else None
            if as_text(value) is not None:
                meta[column] = value
        if self._picture(index):
            meta["has_picture"] = True
        if answer_type == "option":
            letters = list(dict.fromkeys(_OPTION_RE.findall(question)))
            if gold.lower() in letters and len(letters) >= 2:
                meta["distractors"] = [f"({letter})" for letter in letters if letter != gold.lower()]
        return Example(
            id=self._row_id(index), question=question, gold=gold, kind=ANSWER_TYPE_KINDS[answer_type], meta=meta
        )
