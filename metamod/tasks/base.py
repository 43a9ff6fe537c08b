"""The example type every task yields, and how a question is shown to a model."""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass, field
from typing import Any

#: Answer kinds understood by :func:`metamod.tasks.grading.is_equivalent`: ``math`` (exact numbers and symbolic
#: answers), ``mc`` (option letters), ``yesno``, ``text`` (normalised exact match), ``approx`` (numbers and lists of
#: numbers within a relative tolerance, TheoremQA's rule), ``game24`` (an arithmetic expression checked against
#: the puzzle's numbers) and the code-reasoning kinds ``code_output`` (deduction), ``code_input`` (abduction) and
#: ``code_function`` (induction), graded by :mod:`metamod.tasks.code.grading`.
ANSWER_KINDS = ("math", "mc", "yesno", "text", "approx", "game24", "code_output", "code_input", "code_function")


class GoldWithheldError(RuntimeError):
    """Raised when code that must not see the gold answer reads it (see :meth:`Example.without_gold`)."""


@dataclass(frozen=True)
class Example:
    """One benchmark item.

    Attributes:
        id: stable identifier, unique within a task (used for resume, sharding and train/validation splits).
        question: the question text, without the options of a multiple-choice item.
        gold: the reference answer (for ``mc``: the option letter, e.g. ``"B"``).
        kind: one of :data:`ANSWER_KINDS`; selects the grader.
        choices: the options of a multiple-choice item, in order (rendered as ``(A) ...``), else ``None``.
        meta: free-form extras (difficulty level, subject, source split, ...).

    >>> ex = Example(id="q1", question="Which is a fruit?", gold="B", kind="mc", choices=("stone", "apple"))
    >>> print(ex.prompt_text())
    Which is a fruit?
    (A) stone
    (B) apple
    """

    id: str
    question: str
    gold: str
    kind: str
    choices: tuple[str, ...] | None = None
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in ANSWER_KINDS:
            raise ValueError(f"Example {self.id!r}: unknown kind {self.kind!r}; expected one of {ANSWER_KINDS}")

    def prompt_text(self) -> str:
        """The question as shown to models: multiple-choice options rendered with letters."""
        if not self.choices:
            return self.question
        options = "\n".join(
            f"({letter}) {text}" for letter, text in zip(string.ascii_uppercase, self.choices, strict=False)
        )
        return f"{self.question}\n{options}"

    def without_gold(self) -> Example:
        """The same question with its gold withheld: reading ``gold`` raises :class:`GoldWithheldError`.

        >>> ex = Example(id="q1", question="1+1?", gold="2", kind="math").without_gold()
        >>> ex.prompt_text(), ex.id
        ('1+1?', 'q1')
        >>> ex.gold
        Traceback (most recent call last):
        ...
        metamod.tasks.base.GoldWithheldError: example 'q1': the gold answer is withheld here (only methods defined to use gold-derived signals see them; docs/memory.md, "Gold")
        """
        return GoldFreeExample(
            id=self.id, question=self.question, gold="", kind=self.kind, choices=self.choices, meta=dict(self.meta)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "gold": self.gold,
            "kind": self.kind,
            "choices": list(self.choices) if self.choices else None,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Example:
        choices = data.get("choices")
        return cls(
            id=str(data["id"]),
            question=data["question"],
            gold=str(data["gold"]),
            kind=data["kind"],
            choices=tuple(choices) if choices else None,
            meta=dict(data.get("meta") or {}),
        )


@dataclass(frozen=True, eq=False, repr=False)
class GoldFreeExample(Example):
    """An :class:`Example` whose gold cannot be read (made by :meth:`Example.without_gold`)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "gold":
            raise GoldWithheldError(
                f"example {object.__getattribute__(self, 'id')!r}: the gold answer is withheld here (only methods "
                'defined to use gold-derived signals see them; docs/memory.md, "Gold")'
            )
        return super().__getattribute__(name)

    def __repr__(self) -> str:
        return f"GoldFreeExample(id={self.id!r}, question={self.question!r}, kind={self.kind!r}, gold=<withheld>)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GoldFreeExample) and (self.id, self.question, self.kind, self.choices) == (
            other.id,
            other.question,
            other.kind,
            other.choices,
        )

    def __hash__(self) -> int:
        return hash((self.id, self.question, self.kind, self.choices))

    def without_gold(self) -> Example:
        return self


#: The two splits a seeded generator (arith, synthetic_code) draws from.
SPLITS = ("train", "test")


def split_of(key: str) -> str:
    """The split a generated item belongs to (a stable hash of its text), which keeps train and test disjoint."""
    return SPLITS[hashlib.sha256(key.encode("utf-8")).digest()[0] % 2]


class GeneratedTask:
    """The length and limit/seed handling shared by the seeded generators (``num_examples``, ``seed``, ``limit``)."""

    num_examples: int
    seed: int
    limit: int | None

    def __len__(self) -> int:
        return self.num_examples if self.limit is None else min(self.num_examples, self.limit)

    def _draw_plan(self, limit: int | None, seed: int | None) -> tuple[int, int]:
        """The seed and the number of examples to yield: the call's overrides, else the task's own."""
        seed = self.seed if seed is None else seed
        limit = limit if limit is not None else self.limit
        return seed, self.num_examples if limit is None else min(limit, self.num_examples)
