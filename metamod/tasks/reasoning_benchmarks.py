"""The Bayesian Cheatsheet paper's benchmarks (AIME'25, Omni-MATH, PhysReason) and mining corpora (NuminaMath-CoT,
Camel Physics).

Every task reads its hub source on GPU nodes and a local file (``data_files``) offline, like the tasks of
:mod:`metamod.tasks.benchmarks`. Two sources are not plain tables on the hub: PhysReason ships one zip of problem
folders per variant (``PhysReason-full.zip``, ``PhysReason-mini.zip``) and Camel Physics one zip of JSON files
(``physics.zip``); both are read here from the zip (downloaded with ``huggingface_hub`` on GPU nodes), from the
unpacked folder, or from a ``.jsonl``/``.json``/``.parquet`` export of the same records.

Mining corpora may hold rows without a reference answer (Camel Physics never has one; a NuminaMath-CoT solution
may lack a ``\\boxed{...}``). With ``require_gold=False`` such rows are kept with ``gold=""`` and
``meta["has_gold"] = False``: the grader never counts anything correct against an empty gold, so these rows serve
for mining only (a miner records their correctness as unknown). See docs/tasks.md, "Bayesian Cheatsheet tasks".
"""

from __future__ import annotations

import json
import logging
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from metamod.errors import InputError
from metamod.tasks.base import Example
from metamod.tasks.benchmarks import TableTask, as_text, concat_tables
from metamod.tasks.math_values import boxed_contents
from metamod.tasks.sources import Table, load_hub_table, read_table

logger = logging.getLogger(__name__)

_DEGREES_RE = re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|°)\s*$")
_DOLLARS_RE = re.compile(r"^\$+\s*(.*?)\s*\$+$", re.DOTALL)


def last_boxed(text: Any) -> str | None:
    """The contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced; else ``None``.

    An empty last box (``\\boxed{}``) gives ``None``, as if there were no answer.

    >>> last_boxed(r"so $x = \\boxed{\\frac{1}{2}}$, and finally $\\boxed{\\{1, 2\\}}$.")
    '\\\\{1, 2\\\\}'
    >>> last_boxed(r"\\boxed{a_{n}^{2}}"), last_boxed(r"\\boxed{7} then \\boxed{}"), last_boxed("none"), last_boxed(None)
    ('a_{n}^{2}', None, None, None)
    """
    found = boxed_contents(text) if isinstance(text, str) else []
    return (found[-1].strip() or None) if found else None


def latex_gold(value: Any) -> str | None:
    """A LaTeX reference answer as text: whitespace and enclosing ``$...$`` dropped, a fully boxed one unwrapped.

    >>> latex_gold(" $\\\\frac{3}{4}$ "), latex_gold(r"\\boxed{n+1}"), latex_gold("$$ $$"), latex_gold(None)
    ('\\\\frac{3}{4}', 'n+1', None, None)
    """
    text = as_text(value)
    if text is None:
        return None
    match = _DOLLARS_RE.match(text)
    if match:
        text = match.group(1)
    boxed = boxed_contents(text)
    if len(boxed) == 1 and text.startswith(("\\boxed", "\\fbox")) and text.rstrip().endswith("}"):
        text = boxed[0]
    return text.strip() or None


def aime_gold(value: Any) -> str | None:
    """An AIME answer (an integer 0..999) as text; a degree sign written after it is dropped.

    >>> aime_gold("336^\\\\circ"), aime_gold(70), aime_gold(" 016 "), aime_gold("x+1"), aime_gold(None)
    ('336', '70', '16', None, None)
    """
    text = as_text(value)
    if text is None:
        return None
    text = _DEGREES_RE.sub("", latex_gold(text) or "")
    return str(int(text)) if text.isdigit() else None


def hub_file(repo_id: str, filename: str) -> Path:
    """Download one file of a hub dataset repository (or find it in the local cache)."""
    from huggingface_hub import hf_hub_download

    logger.info("Fetching %s from the Hugging Face dataset %s", filename, repo_id)
    try:
        return Path(hf_hub_download(repo_id=repo_id, filename=filename, repo_type="dataset"))
    except Exception as err:  # network, auth, missing file
        raise RuntimeError(
            f"Could not fetch {filename!r} from dataset {repo_id!r}: {err}. Without hub access, pass "
            f"data_files=<the downloaded {filename} or its unpacked folder> instead."
        ) from err


def json_records(path: Path, is_record: str) -> list[tuple[str, dict[str, Any], bool]]:
    """``(name, record, has_images)`` for each JSON file of a zip archive or a folder tree, sorted by name.

    A file counts when its path ends with ``is_record`` (``"/problem.json"``: one record per problem folder, named
    after the folder, ``has_images`` when the folder has an ``images/`` file) or, for ``is_record=".json"``, for
    every ``.json`` file (named after the file stem). macOS ``__MACOSX`` entries are ignored.
    """
    archive: zipfile.ZipFile | None = None
    if path.is_dir():
        files = {p.relative_to(path).as_posix(): p for p in path.rglob("*") if p.is_file()}
        names = sorted(files)

        def read(name: str) -> bytes:
            return files[name].read_bytes()
    else:
        try:
            archive = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as err:
            raise InputError(f"{path}: not a readable zip archive ({err})") from err
        names = sorted(info.filename for info in archive.infolist() if not info.is_dir())
        read = archive.read
    names = [name for name in names if "__MACOSX" not in name and not Path(name).name.startswith("._")]
    folder_style = is_record.startswith("/")
    records = []
    try:
        for name in names:
            if not (("/" + name).endswith(is_record) if folder_style else name.endswith(is_record)):
                continue
            try:
                record = json.loads(read(name).decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise InputError(f"{path}: {name} is not valid UTF-8 JSON ({err})") from err
            if not isinstance(record, dict):
                raise InputError(f"{path}: {name} holds a {type(record).__name__}, expected a JSON object")
            if not folder_style:
                records.append((Path(name).stem, record, False))
                continue
            folder = name.rsplit("/", 2)[-2] if "/" in name else path.stem
            prefix = name.rsplit("/", 1)[0] + "/images/" if "/" in name else "images/"
            records.append((folder, record, any(other.startswith(prefix) for other in names)))
    finally:
        if archive is not None:
            archive.close()
    if not records:
        raise InputError(f"{path}: no {is_record.lstrip('/')} files found")
    return records


class SourcedTableTask(TableTask):
    """A :class:`~metamod.tasks.benchmarks.TableTask` that overrides ``_read_source`` (its hub source is not one plain
    split: several configs, a zip of JSON files, a huge corpus of which only some columns are needed)."""


# ---------------------------------------------------------------------------------------------------- AIME'25


class AIME25Task(SourcedTableTask):
    """AIME 2025 I and II (30 problems): ``opencompass/AIME2025``, configs ``AIME2025-I`` and ``AIME2025-II``, split
    ``test``, columns ``question`` / ``answer`` (strings; one is written ``336^\\circ`` and read as ``336``).

    ``subset`` names the configs joined with ``+`` (default ``AIME2025-I+AIME2025-II``); ids
    ``aime25-AIME2025-I-<row>`` and ``meta["split"]`` = the config. A local file (e.g. the 30 rows exported as JSONL)
    takes ``question_column``/``answer_column``/``id_column`` as usual.
    """

    name, kind = "aime25", "math"
    hub_path, hub_config, default_split = "opencompass/AIME2025", "AIME2025-I+AIME2025-II", "test"

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        return aime_gold(value)

    def _read_source(self) -> Table:
        if self.data_files is not None or not self.subset or "+" not in self.subset:
            return super()._read_source()
        configs = [part.strip() for part in self.subset.split("+")]
        if not all(configs):
            raise ValueError(f"aime25: subset {self.subset!r} has an empty part; join config names with '+'")
        table, self._origin = concat_tables(
            [load_hub_table(self.hub_path, config, self.split) for config in configs], configs
        )
        return table


# ---------------------------------------------------------------------------------------------------- Omni-MATH


def domain_path(value: Any) -> list[str]:
    """The first Omni-MATH domain split into its levels; ``[]`` when there is none.

    >>> domain_path(["Mathematics -> Algebra -> Algebra -> Equations", "Mathematics -> Geometry"])
    ['Mathematics', 'Algebra', 'Algebra', 'Equations']
    >>> domain_path("Mathematics -> Number Theory"), domain_path('["Mathematics -> Geometry"]'), domain_path(None)
    (['Mathematics', 'Number Theory'], ['Mathematics', 'Geometry'], [])
    """
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)  # a csv export stores the list JSON-encoded
        except json.JSONDecodeError:
            pass
    if isinstance(value, str):
        first: str | None = value
    else:
        first = next((item for item in (value if isinstance(value, Iterable) else ()) if isinstance(item, str)), None)
    return [part.strip() for part in first.split("->") if part.strip()] if first else []


class OmniMathTask(SourcedTableTask):
    """Olympiad problems (``KbsdJames/Omni-MATH``, split ``test``, 4,428 rows): ``problem`` / ``answer`` (LaTeX).

    ``meta`` keeps ``domain`` as given (a list of hierarchical paths such as ``"Mathematics -> Algebra ->
    Intermediate Algebra"``), ``domain_path`` (the first path's levels), ``domain_top`` (its level after
    ``Mathematics``, e.g. ``Algebra``), ``difficulty`` (a float, 1-10) and ``competition`` (the ``source`` column).

    Args:
        min_difficulty / max_difficulty: keep only rows whose difficulty lies in this closed range (rows outside, or
            without a difficulty while a bound is set, are left out and not counted as skipped).
        Other arguments: as :class:`~metamod.tasks.benchmarks.TableTask`; the paper's n=916 is ``limit=916``.
    """

    name, kind = "omni_math", "math"
    hub_path, default_split = "KbsdJames/Omni-MATH", "test"
    question_column, answer_column = "problem", "answer"
    meta_columns = ("domain",)

    def __init__(
        self,
        split: str | None = None,
        data_files: str | None = None,
        question_column: str | None = None,
        answer_column: str | None = None,
        id_column: str | None = None,
        min_difficulty: float | None = None,
        max_difficulty: float | None = None,
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        for option, bound in (("min_difficulty", min_difficulty), ("max_difficulty", max_difficulty)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int | float)):
                raise ValueError(f"omni_math: {option} must be a number or None, got {bound!r}")
        if min_difficulty is not None and max_difficulty is not None and min_difficulty > max_difficulty:
            raise ValueError(f"omni_math: min_difficulty {min_difficulty} is above max_difficulty {max_difficulty}")
        self.min_difficulty, self.max_difficulty = min_difficulty, max_difficulty
        super().__init__(
            split=split,
            data_files=data_files,
            question_column=question_column,
            answer_column=answer_column,
            id_column=id_column,
            limit=limit,
            seed=seed,
        )

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        return latex_gold(value)

    def _cell(self, column: str, index: int) -> Any:
        values = self._table.get(column) if self._table else None
        return values[index] if values is not None else None

    def _difficulty(self, index: int) -> float | None:
        value = self._cell("difficulty", index)
        if value is None or isinstance(value, bool):
            return None
        try:
            return float(value)
        except (TypeError, ValueError):
            return None

    def _keep(self, index: int) -> bool:
        if self.min_difficulty is None and self.max_difficulty is None:
            return True
        difficulty = self._difficulty(index)
        if difficulty is None:
            return False
        low = self.min_difficulty if self.min_difficulty is not None else float("-inf")
        high = self.max_difficulty if self.max_difficulty is not None else float("inf")
        return low <= difficulty <= high

    def _build(self, index: int) -> Example | None:
        example = super()._build(index)
        if example is None:
            return None
        path = domain_path(example.meta.get("domain"))
        if path:
            example.meta["domain_path"] = path
            example.meta["domain_top"] = path[1] if len(path) > 1 and path[0] == "Mathematics" else path[0]
        difficulty = self._difficulty(index)
        if difficulty is not None:
            example.meta["difficulty"] = difficulty
        competition = as_text(self._cell("source", index))
        if competition is not None:
            example.meta["competition"] = competition
        return example


# ---------------------------------------------------------------------------------------------------- mining corpora


class _MiningTask(SourcedTableTask):
    """A table task whose rows may lack a reference answer: ``require_gold=False`` keeps them with ``gold=""``."""

    require_gold = True

    def _build(self, index: int) -> Example | None:
        example = super()._build(index)
        if example is not None:
            example.meta["has_gold"] = True
            return example
        if self.require_gold:
            return None
        question = as_text(self._table[self.question_column][index])
        if question is None:
            return None
        split, row = self._row_origin(index)
        meta: dict[str, Any] = {"source": self.source, "split": split, "row": row, "has_gold": False}
        for column in self.meta_columns:
            if column in self._table and self._table[column][index] is not None:
                meta[column] = self._table[column][index]
        return Example(id=self._row_id(index), question=question, gold="", kind=self.kind, meta=meta)


class NuminaMathTask(_MiningTask):
    """NuminaMath-CoT (``AI-MO/NuminaMath-CoT``; ``train`` 859,494 rows, ``test`` 100): ``problem`` / ``solution``.

    The gold is the last ``\\boxed{...}`` of ``solution`` (nested braces kept). The dataset's ``source`` column (the
    problem's origin: ``olympiads``, ``amc_aime``, ``cn_k12``, ...) goes to ``meta["origin"]``. From the hub only the
    needed columns are converted (the ``messages`` column repeats problem and solution). The paper mines 20,000
    prompts: ``limit=20000``.

    Args:
        require_gold: ``False`` (default: a mining corpus) keeps solutions without a ``\\boxed{}`` with ``gold=""`` and
            ``meta["has_gold"] = False``; ``True`` skips them (counted in ``skipped_ids``).
        Other arguments: as :class:`~metamod.tasks.benchmarks.TableTask`.
    """

    name, kind = "numina_math", "math"
    hub_path, default_split = "AI-MO/NuminaMath-CoT", "train"
    question_column, answer_column = "problem", "solution"

    def __init__(
        self,
        split: str | None = None,
        data_files: str | None = None,
        question_column: str | None = None,
        answer_column: str | None = None,
        id_column: str | None = None,
        require_gold: bool = False,
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        self.require_gold = bool(require_gold)
        super().__init__(
            split=split,
            data_files=data_files,
            question_column=question_column,
            answer_column=answer_column,
            id_column=id_column,
            limit=limit,
            seed=seed,
        )

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        return last_boxed(value)

    def _read_source(self) -> Table:
        if self.data_files is not None or "+" in self.split:
            return super()._read_source()
        wanted = [self.question_column, self.answer_column, "source"] + ([self.id_column] if self.id_column else [])
        return load_hub_table(self.hub_path, self.subset, self.split, columns=wanted)

    def _build(self, index: int) -> Example | None:
        example = super()._build(index)
        if example is not None and "source" in self._table:
            origin = as_text(self._table["source"][index])
            if origin is not None:
                example.meta["origin"] = origin
        return example


#: The Camel Physics archive in ``camel-ai/physics``.
CAMEL_PHYSICS_FILE = "physics.zip"


class CamelPhysicsTask(_MiningTask):
    """Camel Physics (``camel-ai/physics``, 20,000 GPT-4 problem/solution pairs): ``message_1`` / ``message_2``.

    The hub dataset is one archive, ``physics.zip``, of JSON files with ``role_1``, ``topic``, ``sub_topic``,
    ``message_1`` (the problem) and ``message_2`` (the solution); parquet mirrors of it name the topic column
    ``topic;``, which is read as ``topic``. Solutions are free text without a reliable final answer, so by default
    every row has ``gold=""`` and ``meta["has_gold"] = False`` (mining only); ``meta`` keeps ``topic`` and
    ``sub_topic``. Ids ``camel_physics-<file stem>`` from the archive, ``camel_physics-train-<row>`` from a table.

    Args:
        data_files: ``physics.zip``, its unpacked folder, or a ``.jsonl``/``.json``/``.parquet``/``.csv`` export.
        boxed_gold: take the last ``\\boxed{...}`` of ``message_2`` as the gold where there is one (the others stay
            gold-less, or are skipped with ``require_gold=True``).
        require_gold: skip rows without a gold (only meaningful with ``boxed_gold``).
        limit / seed: a seeded sample (the paper mines 20,000 prompts: the whole set).
    """

    name, kind = "camel_physics", "approx"
    hub_path, default_split = "camel-ai/physics", "train"
    question_column, answer_column = "message_1", "message_2"
    meta_columns = ("topic", "sub_topic")

    def __init__(
        self,
        data_files: str | None = None,
        boxed_gold: bool = False,
        require_gold: bool = False,
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        self.boxed_gold, self.require_gold = bool(boxed_gold), bool(require_gold)
        super().__init__(data_files=data_files, limit=limit, seed=seed)

    @property
    def source(self) -> str:
        return self.data_files or f"{self.hub_path}/{CAMEL_PHYSICS_FILE}"

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        return last_boxed(value) if self.boxed_gold else None

    def _read_source(self) -> Table:
        path = Path(self.data_files) if self.data_files is not None else hub_file(self.hub_path, CAMEL_PHYSICS_FILE)
        if path.is_dir() or path.suffix.lower() == ".zip":
            if not path.exists():
                raise FileNotFoundError(f"Data file not found: {path} (expected physics.zip or its unpacked folder)")
            records = json_records(path, ".json")
            columns = dict.fromkeys(key for _, record, _ in records for key in record)
            table: Table = {column: [record.get(column) for _, record, _ in records] for column in columns}
            table["id"] = [f"{self.name}-{stem}" for stem, _, _ in records]
            self.id_column = "id"
        else:
            table = read_table(path)
        if "topic;" in table and "topic" not in table:
            table["topic"] = table.pop("topic;")
        return table
