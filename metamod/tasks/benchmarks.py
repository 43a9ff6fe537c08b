"""Benchmark loaders: GSM8K, MATH-500, AMC, StrategyQA, MMLU, and ``local`` for any file + column mapping.

Each task reads its rows either from its Hugging Face dataset id + split (GPU nodes with hub access) or from a
local file given as ``data_files`` (jsonl/json/parquet/csv), with optional column renames. Rows without a question
or a usable gold answer are skipped, counted and logged with their ids; they never stop a run. ``limit`` + ``seed``
pick a deterministic random subsample (the paper evaluates on 500 sampled items, or the whole set when smaller),
kept in the file's original order. A hub split may join several splits with ``+`` (``dev+validation``): they are
loaded one by one and concatenated, and each row keeps its own split in its id and ``meta``.
"""

from __future__ import annotations

import json
import logging
import math
import random
import string
from collections.abc import Iterator, Sequence
from typing import Any

from metamod.tasks.base import Example
from metamod.tasks.sources import Table, load_hub_table, read_table, require_columns

logger = logging.getLogger(__name__)

_LOGGED_IDS = 20


def as_text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    return text or None


def number_gold(value: Any) -> str | None:
    """A numeric gold as text; integral floats lose their ``.0`` (``142.0`` -> ``"142"``).

    >>> number_gold(142.0), number_gold("1,000"), number_gold(None), number_gold(" \\\\frac{1}{2} ")
    ('142', '1000', None, '\\\\frac{1}{2}')
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    text = as_text(value)
    if text is None:
        return None
    plain = text.replace(",", "")
    return plain if plain.lstrip("-").replace(".", "", 1).isdigit() else text


def yesno_gold(value: Any) -> str | None:
    """``True``/``"true"``/``"Yes"`` -> ``"yes"``; ``False``/``"false"``/``"no"`` -> ``"no"``; else ``None``.

    >>> yesno_gold(True), yesno_gold("False"), yesno_gold("maybe")
    ('yes', 'no', None)
    """
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = (as_text(value) or "").lower()
    if text in ("yes", "true", "1"):
        return "yes"
    if text in ("no", "false", "0"):
        return "no"
    return None


def letter_gold(value: Any, num_choices: int) -> str | None:
    """An option index (``1``) or letter (``"b"``) as an upper-case letter within ``num_choices``, else ``None``.

    >>> letter_gold(1, 4), letter_gold("c", 4), letter_gold("2", 4), letter_gold(7, 4)
    ('B', 'C', 'C', None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and not (isinstance(value, float) and not value.is_integer()):
        index = int(value)
    else:
        text = (as_text(value) or "").strip("().").upper()
        if text.isdigit():
            index = int(text)
        elif len(text) == 1 and text in string.ascii_uppercase:
            index = string.ascii_uppercase.index(text)
        else:
            return None
    return string.ascii_uppercase[index] if 0 <= index < num_choices else None


def choices_list(value: Any) -> tuple[str, ...] | None:
    """Options as a tuple of strings (a list, or a JSON-encoded list as found in csv files)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if value is None or isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        return None
    options = tuple(str(option) for option in value)
    return options if len(options) >= 2 else None


class TableTask:
    """A benchmark read from a table of rows (hub split or local file). Subclasses set the class attributes.

    Args:
        split: the hub split to load (ignored with ``data_files``, except in example ids); ``a+b`` concatenates
            splits ``a`` and ``b`` (ids ``<task>-a-<row>`` and ``<task>-b-<row>``).
        data_files: a local ``.jsonl``/``.json``/``.parquet``/``.csv`` file used instead of the hub.
        question_column / answer_column / choices_column / id_column: column names, when they differ from the
            dataset's own (``id_column=None`` numbers rows ``<task>-<split>-<row>``).
        subset: the hub config name (e.g. ``main`` for GSM8K, ``all`` for MMLU).
        limit: default sample size (a seeded random subsample; the whole set when it is smaller).
        seed: default subsample seed.
    """

    name = "table"
    kind = "text"
    hub_path: str | None = None
    hub_config: str | None = None
    default_split = "test"
    question_column = "question"
    answer_column = "answer"
    choices_column: str | None = None
    id_column: str | None = None
    meta_columns: tuple[str, ...] = ()

    def __init__(
        self,
        split: str | None = None,
        data_files: str | None = None,
        question_column: str | None = None,
        answer_column: str | None = None,
        choices_column: str | None = None,
        id_column: str | None = None,
        subset: str | None = None,
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ValueError(f"{self.name}: limit must be a positive integer or None, got {limit!r}")
        if data_files is None and self.hub_path is None:
            raise ValueError(f"{self.name}: data_files is required (a .jsonl/.json/.parquet/.csv file)")
        self.split = split or self.default_split
        if not all(part.strip() for part in self.split.split("+")):
            raise ValueError(f"{self.name}: split {self.split!r} has an empty part; join split names with '+'")
        self.data_files = str(data_files) if data_files is not None else None
        self.question_column = question_column or self.question_column
        self.answer_column = answer_column or self.answer_column
        self.choices_column = choices_column or self.choices_column
        self.id_column = id_column or self.id_column
        self.subset = subset or self.hub_config
        self.limit, self.seed = limit, seed
        self.skipped_ids: list[str] = []
        self._table: Table | None = None
        self._valid: list[int] | None = None
        self._origin: list[tuple[str, int]] | None = None  # (split, row in that split) of each row of a joined split
        if self.data_files is not None:  # local files are cheap: validate now, before any expensive work
            self._load()

    @property
    def source(self) -> str:
        return self.data_files or f"{self.hub_path}[{self.subset or 'default'}/{self.split}]"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(source={self.source!r})"

    # -- per-task conversions (overridden by subclasses) ----------------------------------------------------------

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        return as_text(value)

    # -- loading --------------------------------------------------------------------------------------------------

    def _read_source(self) -> Table:
        """The raw column table: the local file, else the hub split(s). Subclasses whose hub source is not one plain
        split (several configs, a zip of JSON files) override this; validation, skipping and sampling stay here."""
        if self.data_files is not None:
            return read_table(self.data_files)
        if "+" in self.split:
            parts = [part.strip() for part in self.split.split("+")]
            table, self._origin = concat_tables(
                [load_hub_table(self.hub_path, self.subset, part) for part in parts], parts
            )
            return table
        return load_hub_table(self.hub_path, self.subset, self.split)

    def _load(self) -> tuple[Table, list[int]]:
        if self._table is None or self._valid is None:
            table = self._read_source()
            require_columns(table, self._required_columns(), self.source)
            self._table = table
            kept = [index for index in range(self._num_rows()) if self._keep(index)]
            self._valid = [index for index in kept if self._build(index) is not None]
            self.skipped_ids = [self._row_id(i) for i in sorted(set(kept) - set(self._valid))]
            if self.skipped_ids:
                shown = ", ".join(self.skipped_ids[:_LOGGED_IDS]) + (
                    " ..." if len(self.skipped_ids) > _LOGGED_IDS else ""
                )
                logger.warning(
                    "%s: skipped %d of %d rows without a question or a usable gold answer (ids: %s)",
                    self.source,
                    len(self.skipped_ids),
                    len(kept),
                    shown,
                )
        return self._table, self._valid

    def _required_columns(self) -> dict[str, str | None]:
        """``{option name: column}`` that a loaded table must have (``None``: not required)."""
        return {
            "question_column": self.question_column,
            "answer_column": self.answer_column,
            "choices_column": self.choices_column,
            "id_column": self.id_column,
        }

    def _keep(self, index: int) -> bool:
        """Whether row ``index`` belongs to the task at all (rows an option leaves out are not counted as skipped)."""
        return True

    def _num_rows(self) -> int:
        return len(self._table[self.question_column]) if self._table else 0

    def _row_origin(self, index: int) -> tuple[str, int]:
        """The split a row comes from and its row number there (a joined split keeps each part's numbering)."""
        return self._origin[index] if self._origin is not None else (self.split, index)

    def _row_id(self, index: int) -> str:
        if self.id_column is not None:
            value = as_text(self._table[self.id_column][index])
            if value is not None:
                return value
        split, row = self._row_origin(index)
        return f"{self.name}-{split}-{row}"

    def _build(self, index: int) -> Example | None:
        table = self._table
        question = as_text(table[self.question_column][index])
        choices = choices_list(table[self.choices_column][index]) if self.choices_column else None
        if question is None or (self.kind == "mc" and choices is None):
            return None
        gold = self.parse_gold(table[self.answer_column][index], choices)
        if gold is None:
            return None
        split, row = self._row_origin(index)
        meta: dict[str, Any] = {"source": self.source, "split": split, "row": row}
        for column in self.meta_columns:
            if column in table and table[column][index] is not None:
                meta[column] = table[column][index]
        return Example(id=self._row_id(index), question=question, gold=gold, kind=self.kind, choices=choices, meta=meta)

    def __len__(self) -> int:
        _, valid = self._load()
        return len(valid) if self.limit is None else min(self.limit, len(valid))

    def examples(self, limit: int | None = None, seed: int | None = None) -> Iterator[Example]:
        """Stream the (optionally subsampled) examples in file order.

        Args:
            limit: sample this many rows at random (default: the task's ``limit``; ``None`` = all rows).
            seed: subsample seed (default: the task's ``seed``).

        Returns:
            An iterator of :class:`~metamod.tasks.base.Example`.
        """
        _, valid = self._load()
        limit = self.limit if limit is None else limit
        seed = self.seed if seed is None else seed
        indices: Sequence[int] = valid
        if limit is not None and limit < len(valid):
            indices = sorted(random.Random(seed).sample(valid, limit))
        for index in indices:
            example = self._build(index)
            if example is not None:
                yield example


def concat_tables(tables: Sequence[Table], names: Sequence[str]) -> tuple[Table, list[tuple[str, int]]]:
    """Concatenate column tables (a column missing from one table is ``None`` there) and say where each row came from.

    >>> table, origin = concat_tables([{"q": ["a", "b"]}, {"q": ["c"], "x": [1]}], ["dev", "validation"])
    >>> table, origin
    ({'q': ['a', 'b', 'c'], 'x': [None, None, 1]}, [('dev', 0), ('dev', 1), ('validation', 0)])
    """
    columns = list(dict.fromkeys(column for table in tables for column in table))
    merged: Table = {column: [] for column in columns}
    origin: list[tuple[str, int]] = []
    for table, name in zip(tables, names, strict=True):
        num_rows = max((len(values) for values in table.values()), default=0)
        for column in columns:
            merged[column].extend(table.get(column, [None] * num_rows))
        origin.extend((name, row) for row in range(num_rows))
    return merged, origin


class GSM8KTask(TableTask):
    """Grade-school math word problems (``openai/gsm8k``, config ``main``); the gold follows ``####``."""

    name, kind = "gsm8k", "math"
    hub_path, hub_config, default_split = "openai/gsm8k", "main", "test"

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        text = as_text(value)
        if text is None:
            return None
        if "####" in text:
            return number_gold(text.rsplit("####", 1)[1])
        gold = number_gold(text)  # a local file may store the bare number
        return gold if gold is not None and gold.lstrip("-").replace(".", "", 1).isdigit() else None


def difficulty_level(value: Any) -> int | None:
    """A MATH difficulty level as an integer: ``3``, ``"3"``, ``3.0`` and ``"Level 3"`` give ``3``; else ``None``.

    >>> difficulty_level(3), difficulty_level("Level 5"), difficulty_level("2"), difficulty_level(4.0)
    (3, 5, 2, 4)
    >>> difficulty_level("Level ?") is None, difficulty_level(None) is None, difficulty_level(True) is None
    (True, True, True)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    text = (as_text(value) or "").lower().removeprefix("level").strip()
    return int(text) if text.isdigit() else None


class Math500Task(TableTask):
    """The 500-problem MATH subset (``HuggingFaceH4/MATH-500``, test): ``problem`` / ``answer`` (LaTeX).

    ``meta["level"]`` is the MATH difficulty level as an integer (1 easiest .. 5 hardest; ``"Level 3"`` and ``"3"``
    are read as ``3``), ``meta["subject"]`` the subject (``Algebra``, ``Precalculus``, ...), and ``meta["type"]`` the
    subject under the original MATH column name, when a file has that column. A row whose level does not read as an
    integer keeps no ``level``.
    """

    name, kind = "math500", "math"
    hub_path, default_split = "HuggingFaceH4/MATH-500", "test"
    question_column, answer_column, id_column = "problem", "answer", "unique_id"
    meta_columns = ("subject", "level", "type")

    def _build(self, index: int) -> Example | None:
        example = super()._build(index)
        if example is not None and "level" in example.meta:
            level = difficulty_level(example.meta.pop("level"))
            if level is not None:
                example.meta["level"] = level
        return example


class AMCTask(TableTask):
    """AMC problems (``AI-MO/aimo-validation-amc``, train, 83 items): ``problem`` / numeric ``answer``."""

    name, kind = "amc", "math"
    hub_path, default_split = "AI-MO/aimo-validation-amc", "train"
    question_column, answer_column, id_column = "problem", "answer", "id"
    meta_columns = ("url",)

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        return number_gold(value)

    def _row_id(self, index: int) -> str:
        row_id = super()._row_id(index)
        return row_id if row_id.startswith(self.name) else f"{self.name}-{row_id}"


class StrategyQATask(TableTask):
    """Yes/no questions needing implicit multi-hop reasoning (``ChilleD/StrategyQA``): boolean ``answer``."""

    name, kind = "strategyqa", "yesno"
    hub_path, default_split = "ChilleD/StrategyQA", "test"
    id_column = "qid"

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        return yesno_gold(value)


class MMLUTask(TableTask):
    """Multiple-choice knowledge questions (``cais/mmlu``, config ``all``): ``choices`` list, ``answer`` index.

    Splits of ``all``: ``test`` (14,042, evaluation), ``validation`` (1,531) and ``dev`` (285, five per subject) are
    MMLU's own questions; training questions come from ``validation`` (or ``dev+validation``). ``auxiliary_train``
    is NOT MMLU (its items come from ARC, MCTest, OBQA and RACE), so using it is logged as a warning.
    """

    name, kind = "mmlu", "mc"
    hub_path, hub_config, default_split = "cais/mmlu", "all", "test"
    choices_column = "choices"
    meta_columns = ("subject",)

    def _load(self) -> tuple[Table, list[int]]:
        if self._table is None and self.data_files is None and "auxiliary_train" in self.split.split("+"):
            logger.warning(
                "mmlu: split auxiliary_train is not MMLU (its items come from ARC, MCTest, OBQA and RACE); "
                "for MMLU training questions use split validation (or dev+validation)"
            )
        return super()._load()

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        return letter_gold(value, len(choices or ()))


class LocalTask(TableTask):
    """Any local file: say which columns hold the question, gold (and options), and the answer ``kind``.

    Args:
        data_files: the file (``.jsonl``/``.json``/``.parquet``/``.csv``).
        kind: ``math``, ``mc`` (needs ``choices_column``; gold as index or letter), ``yesno`` or ``text``.
        name: the task name used in example ids and results.
        Other arguments: as :class:`TableTask`.
    """

    default_split = "local"

    def __init__(
        self,
        data_files: str | None = None,
        kind: str | None = None,
        name: str = "local",
        question_column: str | None = None,
        answer_column: str | None = None,
        choices_column: str | None = None,
        id_column: str | None = None,
        split: str | None = None,
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        from metamod.tasks.base import ANSWER_KINDS

        if data_files is None:
            raise ValueError("local: data_files is required (a .jsonl/.json/.parquet/.csv file)")
        if kind not in ANSWER_KINDS:
            raise ValueError(f"local: kind must be one of {', '.join(ANSWER_KINDS)}, got {kind!r}")
        if kind == "mc" and choices_column is None:
            raise ValueError("local: kind='mc' needs choices_column=<the column holding the list of options>")
        self.name, self.kind = name, kind
        super().__init__(
            split=split,
            data_files=data_files,
            question_column=question_column,
            answer_column=answer_column,
            choices_column=choices_column,
            id_column=id_column,
            limit=limit,
            seed=seed,
        )

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        if self.kind == "mc":
            return letter_gold(value, len(choices or ()))
        if self.kind == "yesno":
            return yesno_gold(value)
        if self.kind == "math":
            return number_gold(value)
        return as_text(value)
