"""An offline, seeded stream of multi-step arithmetic word problems (the task that needs no download).

Each problem is a running quantity in a small story (a fruit stand, a train, a farm, a savings jar, ...) that
changes over a few steps. Higher difficulty levels use more steps, bigger numbers and more kinds of operation.
Every example records its worked steps (``meta["steps"]``) and three plausible wrong final answers produced by
realistic slips (``meta["distractors"]``), which the simulated debaters use to write right and wrong solutions.

Problems are generated lazily from ``(seed, draw number)``, so a stream of any length costs constant memory, and
the train/test streams are disjoint by construction (a problem belongs to the split picked by a hash of its text).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from metamod.tasks.base import SPLITS, Example, GeneratedTask, split_of

logger = logging.getLogger(__name__)

#: the story-problem levels (the default mix)
LEVELS = (1, 2, 3, 4, 5)
#: level 0: one-step direct arithmetic ("What is 6 * 7?"), the level a 135M model can partly solve
DIRECT_LEVEL = 0
VALID_LEVELS = (DIRECT_LEVEL, *LEVELS)


@dataclass(frozen=True)
class LevelSpec:
    """How hard one level is: number of story events, number ranges and allowed operations."""

    events: int
    start: tuple[int, int]
    operand: tuple[int, int]
    factor: tuple[int, int]
    ops: tuple[str, ...]


LEVEL_SPECS = {
    1: LevelSpec(events=2, start=(5, 20), operand=(2, 12), factor=(2, 3), ops=("add", "sub")),
    2: LevelSpec(events=3, start=(10, 50), operand=(3, 30), factor=(2, 4), ops=("add", "sub", "mul")),
    3: LevelSpec(
        events=4, start=(20, 100), operand=(5, 60), factor=(2, 6), ops=("add", "sub", "mul", "div", "add_groups")
    ),
    4: LevelSpec(
        events=5,
        start=(50, 300),
        operand=(10, 150),
        factor=(2, 9),
        ops=("add", "sub", "mul", "div", "add_groups", "sub_groups"),
    ),
    5: LevelSpec(
        events=6,
        start=(100, 1000),
        operand=(20, 400),
        factor=(2, 12),
        ops=("add", "sub", "mul", "div", "add_groups", "sub_groups"),
    ),
}

NAMES = ("Maya", "Tomas", "Aiko", "Farid", "Lena", "Owen", "Priya", "Diego", "Nora", "Kwame", "Ines", "Hugo")

# One story per setting. Placeholders: {name}, {n} (operand), {a}/{b} (groups of b, a of them), {unit}.
SCENARIOS: tuple[dict[str, tuple[str, ...] | str], ...] = (
    {
        "unit": "apples",
        "start": ("{name}'s fruit stand opens the day with {n} apples.",),
        "add": ("A farmer drops off another {n} apples.", "{name} brings {n} more apples from the storeroom."),
        "sub": ("Shoppers buy {n} apples before noon.", "{name} throws away {n} apples that went soft."),
        "mul": ("A big delivery leaves the stand with {n} times as many apples as before.",),
        "div": ("{name} splits the apples evenly into {n} crates and sends all but one crate to a school.",),
        "add_groups": ("{name} buys {a} bags holding {b} apples each and adds them to the stand.",),
        "sub_groups": ("A cafe orders {a} boxes of {b} apples each, and {name} fills the order.",),
        "question": "How many apples are on the stand at closing time?",
    },
    {
        "unit": "passengers",
        "start": ("A train leaves the first station carrying {n} passengers.",),
        "add": ("At the next stop {n} passengers get on.", "{n} more people board at the market town."),
        "sub": ("{n} passengers get off at the river crossing.", "At the university stop, {n} students step off."),
        "mul": ("For the festival, the number of riders grows to {n} times what it was.",),
        "div": ("The train splits into {n} equal sections and only the front section continues.",),
        "add_groups": ("{a} tour groups of {b} people each climb aboard.",),
        "sub_groups": ("{a} school classes of {b} children each leave the train for a museum visit.",),
        "question": "How many passengers are on the train when it reaches the last station?",
    },
    {
        "unit": "eggs",
        "start": ("On Monday morning {name}'s farm has {n} eggs in the cool room.",),
        "add": ("The hens lay {n} more eggs by evening.", "{name} collects another {n} eggs from the barn."),
        "sub": ("{n} eggs crack while being washed.", "{name} uses {n} eggs to bake for the village fair."),
        "mul": ("After a very good week, the stock of eggs is {n} times as large.",),
        "div": ("{name} packs the eggs evenly into {n} trays and sells every tray except one.",),
        "add_groups": ("A neighbour brings over {a} cartons with {b} eggs in each.",),
        "sub_groups": ("A bakery collects {a} cartons holding {b} eggs each.",),
        "question": "How many eggs are left in the cool room?",
    },
    {
        "unit": "dollars",
        "start": ("{name} has {n} dollars in a savings jar.",),
        "add": ("{name} earns {n} dollars walking dogs and saves all of it.", "A birthday card brings in {n} dollars."),
        "sub": ("{name} spends {n} dollars on a new bike lamp.", "{name} pays {n} dollars for a concert ticket."),
        "mul": ("A generous relative matches the savings so that the jar holds {n} times as much as before.",),
        "div": ("{name} divides the savings equally among {n} envelopes and donates all but one envelope.",),
        "add_groups": ("{name} mows {a} lawns and is paid {b} dollars for each one.",),
        "sub_groups": ("{name} buys {a} books that cost {b} dollars each.",),
        "question": "How many dollars are in the savings jar now?",
    },
    {
        "unit": "books",
        "start": ("The school library owns {n} books.",),
        "add": ("A local author donates {n} books.", "The library buys {n} new books at a fair."),
        "sub": ("{n} books are too damaged to keep and are recycled.", "{n} books are lost and written off."),
        "mul": ("After merging with a bigger collection, the library has {n} times as many books.",),
        "div": ("The books are shared equally among {n} branch libraries, and the school keeps one share.",),
        "add_groups": ("{a} boxes of {b} books each arrive from a closing bookstore.",),
        "sub_groups": ("The library lends {a} classrooms {b} books each for the whole year.",),
        "question": "How many books are on the library shelves now?",
    },
    {
        "unit": "cupcakes",
        "start": ("{name}'s bakery bakes {n} cupcakes at dawn.",),
        "add": ("Later, {name} bakes a batch of {n} more cupcakes.", "An assistant frosts {n} extra cupcakes."),
        "sub": ("The morning rush sells {n} cupcakes.", "{n} cupcakes are given away as free samples."),
        "mul": ("A wedding order means the bakery ends up with {n} times as many cupcakes.",),
        "div": ("{name} arranges the cupcakes equally on {n} trays and delivers every tray but one.",),
        "add_groups": ("{name} bakes {a} more trays with {b} cupcakes on each.",),
        "sub_groups": ("An office buys {a} boxes of {b} cupcakes each.",),
        "question": "How many cupcakes are left in the bakery?",
    },
    {
        "unit": "cars",
        "start": ("A parking garage has {n} cars inside at 8 a.m.",),
        "add": ("During the next hour {n} cars drive in.", "{n} more cars arrive for a concert."),
        "sub": ("{n} cars leave before lunch.", "At noon, {n} drivers pick up their cars."),
        "mul": ("On the day of the big game the garage fills to {n} times as many cars.",),
        "div": ("The cars are spread evenly over {n} levels, and every level except the ground floor is emptied.",),
        "add_groups": ("{a} tour companies each park {b} cars in the garage.",),
        "sub_groups": ("{a} families leave, each taking {b} cars with them.",),
        "question": "How many cars are in the garage at the end?",
    },
    {
        "unit": "seedlings",
        "start": ("{name}'s greenhouse holds {n} seedlings.",),
        "add": ("{name} sprouts {n} more seedlings.", "A gardening club gifts {n} seedlings."),
        "sub": ("{n} seedlings wilt during a heat wave.", "{name} plants {n} seedlings out in the field."),
        "mul": ("After taking cuttings, {name} has {n} times as many seedlings.",),
        "div": ("{name} divides the seedlings evenly among {n} benches and sells all benches but one.",),
        "add_groups": ("{name} fills {a} new trays with {b} seedlings each.",),
        "sub_groups": ("A school buys {a} flats of {b} seedlings each.",),
        "question": "How many seedlings are in the greenhouse now?",
    },
)

_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "add_groups": "+", "sub_groups": "-"}


@dataclass(frozen=True)
class Step:
    """One event of a problem: ``op`` applied with ``operand``; group ops add/subtract ``groups[0] * groups[1]``."""

    op: str  # "+", "-", "*", "/"
    operand: int
    groups: tuple[int, int] | None = None


def apply(value: int, op: str, operand: int) -> int | None:
    """``value op operand`` when it stays a non-negative integer, else ``None``.

    >>> apply(12, "*", 3), apply(7, "/", 2), apply(3, "-", 5)
    (36, None, None)
    """
    if op == "+":
        return value + operand
    if op == "-":
        return value - operand if operand <= value else None
    if op == "*":
        return value * operand
    if op == "/":
        return value // operand if operand and value % operand == 0 else None
    raise ValueError(f"Unknown operation {op!r}")


def solve(start: int, steps: Sequence[Step], slip: tuple[int, int] | None = None) -> tuple[int, list[str]] | None:
    """Run the steps from ``start``; return the final value and the human-readable step strings.

    Args:
        start: the starting quantity.
        steps: the events, in order.
        slip: ``(event index, delta)`` to add an arithmetic mistake to that event's result (carried forward).

    Returns:
        ``(final value, step strings)``, or ``None`` when a step leaves the integers or goes negative.

    >>> solve(10, [Step("+", 5), Step("*", 3, None)])
    (45, ['10 + 5 = 15', '15 * 3 = 45'])
    >>> solve(10, [Step("-", 4, (2, 2))])
    (6, ['2 * 2 = 4', '10 - 4 = 6'])
    """
    value, lines = start, []
    for index, step in enumerate(steps):
        if step.groups is not None:
            lines.append(f"{step.groups[0]} * {step.groups[1]} = {step.operand}")
        result = apply(value, step.op, step.operand)
        if result is None:
            return None
        if slip is not None and slip[0] == index:
            result += slip[1]
            if result < 0:
                return None
        lines.append(f"{value} {step.op} {step.operand} = {result}")
        value = result
    return value, lines


_WRONG_OP = {"+": "-", "-": "+", "*": "+", "/": "*"}


def make_distractors(
    start: int, steps: Sequence[Step], gold: int, rng: random.Random
) -> list[tuple[str, int, list[str]]]:
    """Three distinct wrong final answers from realistic slips: a wrong operation, an off-by-one, a skipped step.

    Returns:
        ``[(slip kind, wrong answer, wrong step strings), ...]`` (exactly three, all different from ``gold``).
    """
    found: list[tuple[str, int, list[str]]] = []
    seen = {gold}

    def add(kind: str, outcome: tuple[int, list[str]] | None) -> bool:
        if outcome is None or outcome[0] in seen:
            return False
        seen.add(outcome[0])
        found.append((kind, outcome[0], outcome[1]))
        return True

    order = list(range(len(steps)))
    rng.shuffle(order)
    for index in order:  # one step done with the wrong operation
        step = steps[index]
        wrong = Step(_WRONG_OP[step.op], step.operand, step.groups)
        if add("wrong_op", solve(start, [*steps[:index], wrong, *steps[index + 1 :]])):
            break
    for index in order:  # an off-by-one (or off-by-ten carry) slip in one step's result, carried forward
        delta = rng.choice((-1, 1, 10, -10) if gold >= 20 else (-1, 1))
        if add("arithmetic_slip", solve(start, steps, slip=(index, delta))):
            break
    if len(steps) > 1:
        for index in order:  # one event forgotten altogether
            if add("skipped_step", solve(start, [*steps[:index], *steps[index + 1 :]])):
                break
    for delta in (1, -1, 2, 10, -2, -10, 3, 5):  # last resort: a slip in the final line
        if len(found) >= 3:
            break
        add("final_slip", (gold + delta, [f"{gold} + {delta} = {gold + delta}"]) if gold + delta >= 0 else None)
    return found[:3]


def _draw_steps(rng: random.Random, spec: LevelSpec) -> tuple[int, list[Step]]:
    value = rng.randint(*spec.start)
    start, steps = value, []
    while len(steps) < spec.events:
        op = rng.choice(spec.ops)
        if op == "add":
            step = Step("+", rng.randint(*spec.operand))
        elif op == "sub":
            if value < 3:
                continue
            step = Step("-", rng.randint(1, min(value - 1, spec.operand[1])))
        elif op == "mul":
            if value * spec.factor[1] > 1_000_000:
                continue
            step = Step("*", rng.randint(*spec.factor))
        elif op == "div":
            divisors = [d for d in range(spec.factor[0], spec.factor[1] + 1) if value % d == 0 and value // d > 1]
            if not divisors:
                continue
            step = Step("/", rng.choice(divisors))
        else:
            a = rng.randint(2, spec.factor[1])
            b = rng.randint(2, max(3, spec.operand[1] // a))
            if op == "sub_groups" and a * b >= value:
                continue
            step = Step("+" if op == "add_groups" else "-", a * b, (a, b))
        steps.append(step)
        value = apply(value, step.op, step.operand)
    return start, steps


def _op_name(step: Step) -> str:
    if step.groups is not None:
        return "add_groups" if step.op == "+" else "sub_groups"
    return {"+": "add", "-": "sub", "*": "mul", "/": "div"}[step.op]


def _render(rng: random.Random, start: int, steps: Sequence[Step]) -> str:
    scenario = rng.choice(SCENARIOS)
    name = rng.choice(NAMES)
    unit = scenario["unit"]
    sentences = [rng.choice(scenario["start"]).format(name=name, n=start, unit=unit)]
    used: set[str] = set()
    for step in steps:
        options = scenario[_op_name(step)]
        fresh = [template for template in options if template not in used]
        template = rng.choice(fresh or options)
        if template in used:  # the story repeats an event: say so instead of repeating the sentence verbatim
            template = "Once again, " + template[0].lower() + template[1:]
        else:
            used.add(template)
        a, b = step.groups or (0, 0)
        sentences.append(template.format(name=name, n=step.operand, a=a, b=b, unit=unit))
    sentences.append(scenario["question"])
    text = " ".join(sentences)
    return text[0].upper() + text[1:]


# Level 0 phrasings, per operation: {a} and {b} are the operands.
DIRECT_PHRASINGS: dict[str, tuple[str, ...]] = {
    "*": (
        "What is {a} * {b}?",
        "What is {a} times {b}?",
        "Compute {a} * {b}.",
        "How much is {a} multiplied by {b}?",
        "What do you get when you multiply {a} by {b}?",
    ),
    "+": (
        "What is {a} + {b}?",
        "What is {a} plus {b}?",
        "Compute {a} + {b}.",
        "How much is {a} added to {b}?",
        "What is the sum of {a} and {b}?",
    ),
}


def _draw_direct(rng: random.Random) -> tuple[int, list[Step], str]:
    """A one-step question: a product of two single digits (2/3 of them) or a two-digit plus a one-digit number.

    Subtraction is left out: SmolLM2-135M-Instruct got 0-6% of "a - b" questions right (benchmarks/README.md).
    """
    op = rng.choice(("*", "*", "+"))
    if op == "*":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
    else:
        a, b = rng.randint(11, 39), rng.randint(2, 9)
    question = rng.choice(DIRECT_PHRASINGS[op]).format(a=a, b=b)
    return a, [Step(op, b)], question


def generate_problem(rng: random.Random, level: int) -> tuple[str, int, dict]:
    """Draw one problem at ``level``: ``(question, gold, meta)``."""
    if level == DIRECT_LEVEL:
        start, steps, question = _draw_direct(rng)
        gold, lines = solve(start, steps)
        return question, gold, _meta(level, start, steps, gold, lines, rng)
    start, steps = _draw_steps(rng, LEVEL_SPECS[level])
    gold, lines = solve(start, steps)
    meta = _meta(level, start, steps, gold, lines, rng)
    return _render(rng, start, steps), gold, meta


def _meta(level: int, start: int, steps: Sequence[Step], gold: int, lines: list[str], rng: random.Random) -> dict:
    distractors = make_distractors(start, steps, gold, rng)
    return {
        "level": level,
        "steps": lines,
        "distractors": [str(value) for _, value, _ in distractors],
        "distractor_kinds": [kind for kind, _, _ in distractors],
        "distractor_steps": [wrong_lines for _, _, wrong_lines in distractors],
    }


class ArithTask(GeneratedTask):
    """Seeded multi-step arithmetic word problems, generated on the fly.

    Args:
        num_examples: length of the stream.
        seed: generator seed; the same seed gives the same problems in the same order.
        levels: difficulty levels to draw from (uniformly), a subset of 1..5.
        split: ``"train"`` or ``"test"``; the two streams never share a question.
        limit: default cap on the number of examples (``examples(limit=...)`` overrides it).

    >>> task = ArithTask(num_examples=3, seed=7, levels=[1])
    >>> [ex.id for ex in task.examples()]
    ['arith-7-0', 'arith-7-1', 'arith-7-2']
    >>> ex = next(ArithTask(seed=7, levels=[2]).examples())
    >>> ex.kind, ex.meta["level"], ex.meta["steps"][-1].endswith("= " + ex.gold), len(set(ex.meta["distractors"]))
    ('math', 2, True, 3)
    >>> direct = next(ArithTask(seed=3, levels=[0]).examples())
    >>> len(direct.question) < 60, direct.meta["level"], len(direct.meta["steps"]), len(direct.meta["distractors"])
    (True, 0, 1, 3)
    """

    name = "arith"
    kind = "math"

    def __init__(
        self,
        num_examples: int = 1000,
        seed: int = 0,
        levels: Sequence[int] | None = None,
        split: str = "train",
        limit: int | None = None,
    ) -> None:
        if not isinstance(num_examples, int) or num_examples < 1:
            raise ValueError(f"arith: num_examples must be a positive integer, got {num_examples!r}")
        levels = tuple(LEVELS if levels is None else (int(level) for level in levels))
        bad = [level for level in levels if level not in VALID_LEVELS]
        if bad or not levels:
            raise ValueError(
                f"arith: levels must be a non-empty subset of {list(VALID_LEVELS)} (0: direct one-step questions), "
                f"got {list(levels)}"
            )
        if split not in SPLITS:
            raise ValueError(f"arith: split must be one of {SPLITS}, got {split!r}")
        if limit is not None and limit < 1:
            raise ValueError(f"arith: limit must be a positive integer or None, got {limit!r}")
        self.num_examples, self.seed, self.levels, self.split, self.limit = num_examples, seed, levels, split, limit

    def __repr__(self) -> str:
        return f"ArithTask(num_examples={self.num_examples}, seed={self.seed}, levels={list(self.levels)}, split={self.split!r})"

    def examples(self, limit: int | None = None, seed: int | None = None) -> Iterator[Example]:
        """Stream examples lazily.

        Args:
            limit: at most this many (default: the task's ``limit``, else ``num_examples``).
            seed: overrides the task's generator seed.

        Returns:
            An iterator of :class:`~metamod.tasks.base.Example`.
        """
        seed, total = self._draw_plan(limit, seed)
        prefix = f"arith-{seed}" if self.split == "train" else f"arith-test-{seed}"
        count, draw = 0, 0
        while count < total:
            rng = random.Random(f"metamod-arith/{seed}/{draw}")
            draw += 1
            level = rng.choice(self.levels)
            question, gold, meta = generate_problem(rng, level)
            if split_of(question) != self.split:
                continue
            meta["split"] = self.split
            yield Example(id=f"{prefix}-{count}", question=question, gold=str(gold), kind="math", meta=meta)
            count += 1
