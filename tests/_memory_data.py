"""Questions and a gold-guarding example shared by the memory tests (test_memory.py, test_mca.py)."""

from __future__ import annotations

from metamod.tasks.base import Example

PENS = "A shop packs 12 pens in each box. Mia buys 3 boxes of pens. How many pens does Mia have?"
PENS2 = "A shop packs 12 pens in each box. Mia buys 5 boxes of pens. How many pens does Mia have?"
TRAIN = "A train travels at 60 km per hour for 2 hours. How far does the train go?"
TRAIN2 = "A train travels at 80 km per hour for 3 hours. How far does the train go?"
CAPITAL = "Which city is the capital of France?"


class NoGoldExample(Example):
    """An example whose gold cannot be read: any access fails the test."""

    def __getattribute__(self, name):
        if name == "gold":
            raise AssertionError("a memory read example.gold before the question was answered")
        return super().__getattribute__(name)
