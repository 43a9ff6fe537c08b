"""The training ``samples.jsonl``: a few of the latest completions, with their per-reward scores, every N steps.

:class:`SampleLogger` is a ``transformers`` callback (``metamod train`` adds it when ``sample_log_steps > 0``).
Rows are ``{"step", "completion", "rewards": {name: score or null}}``, written through
:class:`metamod.files.JsonlWriter`. A fresh run starts the file over; a resumed run drops the rows logged after
the checkpoint it resumes from and appends, so every step appears once.

>>> _finite(float("nan")), _finite(0.5)
(None, 0.5)
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class SampleLogger(TrainerCallback):
    """Writes a few of the latest completions (with their per-reward scores) to ``samples.jsonl``.

    Lines go through :class:`metamod.files.JsonlWriter` (flushed per line, synced per logging step). A fresh run
    (``resume=False``) starts the file over; a resumed one appends, after dropping the rows logged past the
    checkpoint it resumes from (those steps run, and are logged, again), so no step is logged twice.
    """

    def __init__(self, trainer: Any, path: Path, *, every: int, count: int, resume: bool = False):
        self.trainer, self.path, self.every, self.count, self.resume = trainer, Path(path), every, count, resume
        self._last_step = -1
        self._writer: Any = None

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._open(state.global_step)

    def _open(self, step: int) -> None:
        from metamod.files import JsonlWriter, atomic_write_text, iter_jsonl, repair_torn_tail

        if self._writer is not None:
            return
        if self.resume and self.path.is_file():
            repair_torn_tail(self.path)
            rows = [row for _, row in iter_jsonl(self.path)]
            kept = [row for row in rows if not isinstance(row, dict) or (row.get("step") or 0) <= step]
            if len(kept) < len(rows):
                logger.info("%s: dropping %d sample(s) logged after step %d", self.path, len(rows) - len(kept), step)
                atomic_write_text(self.path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in kept))
        self._writer = JsonlWriter(self.path, resume=self.resume)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not self.every or state.global_step % self.every:
            return
        if state.global_step == self._last_step:
            return
        self._last_step = state.global_step
        self._open(state.global_step)
        store = getattr(self.trainer, "_logs", None) or {}
        completions = list(store.get("completion", []))[-self.count :]
        rewards = {name: list(values)[-len(completions) :] for name, values in store.get("rewards", {}).items()}
        from metamod.rewards import completion_text

        for i, completion in enumerate(completions):
            text = completion_text(completion)
            scores = {name: _finite(values[i]) for name, values in rewards.items() if i < len(values)}
            self._writer.write({"step": state.global_step, "completion": text, "rewards": scores})
            logger.info("sample @%d: %r %s", state.global_step, text[:120], scores)
        self._writer.sync()

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _finite(value: float) -> float | None:
    return None if value is None or value != value else float(value)
