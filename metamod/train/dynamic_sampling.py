"""Dynamic sampling (DAPO): drop constant-reward GRPO groups from the update and refill the batch from other prompts.

A group whose ``num_generations`` completions all get the same total reward has advantage 0 everywhere: it adds
nothing to the policy gradient but still counts in the loss normaliser (TRL's default ``loss_type: dapo`` divides
by every completion token of the batch), so it dilutes the groups that do carry signal. DAPO (Yu et al., 2025,
"dynamic sampling") keeps generating until the batch holds only groups with reward variance.

:class:`DynamicSamplingGRPOTrainer` does this through TRL's public method structure, without a copy of its code:
it overrides ``_generate_and_score_completions`` by calling ``super()`` (once for the batch, then once per refill
call) and merges the tensors of the kept groups; it overrides ``_calculate_rewards`` only to read the rewards
``super()`` computed. Per step:

1. Generate and score the batch as TRL does. A group is *constant* when its total (weighted) reward varies by at
   most ``constant_reward_tolerance`` (float noise: 1.0 against 1.0000001 would otherwise get an advantage of the
   noise's sign, scaled up by the group std under ``scale_rewards: group``); a group of unscorable completions
   (every reward ``None``) is constant too.
2. While constant groups remain and fewer than ``max_refill_batches`` refill calls were made: draw as many other
   prompts as there are constant groups from the train set (a seeded permutation, walked with a cursor that
   persists over steps; never a prompt of this batch, none twice in one call), generate and score their groups,
   and keep the non-constant ones in place of the constant ones.
3. Groups still constant after that stay in the batch (it keeps its size) with advantage 0 and ``completion_mask``
   0, so they neither move the policy nor count in the per-token normaliser (``num_items_in_batch`` is recounted).

Advantages are TRL's, computed per call (per group under ``scale_rewards: group``; under ``batch`` a kept group
keeps the std of the call that generated it). Logged per step through the trainer's metrics: ``refill/dropped_groups`` (constant groups of the batch),
``refill/calls`` (extra generation calls) and ``refill/still_constant`` (groups masked out). TRL's own metrics
(``reward``, ``frac_reward_zero_std``, ...) average over every generation call of the step, refills included.

Multi-process: each process decides on its own groups (the per-process generation batch must hold whole groups,
checked by the config), but every process makes the same number of refill calls (the need is gathered and the
maximum taken: ``super()`` gathers across processes) and draws the same prompts, taking its own slice of them.
Both paths are tested (two CPU processes under ``accelerate launch``: tests/test_train_dynamic_sampling.py). The
refill cursor restarts when a run is resumed from a checkpoint.

>>> import torch
>>> constant_groups(torch.tensor([1.0, 1.0000001, 0.0, 1.0]), num_generations=2, tolerance=1e-6).tolist()
[True, False]
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from trl import GRPOTrainer

logger = logging.getLogger(__name__)

#: per-row tensors padded on the left (prompt side), with their padding value ("pad": the tokenizer's pad id)
LEFT_PADDED: dict[str, Any] = {"prompt_ids": "pad", "prompt_mask": 0}
#: per-row tensors padded on the right (completion side), with their padding value
RIGHT_PADDED: dict[str, Any] = {
    "completion_ids": "pad",
    "completion_mask": 0,
    "tool_mask": 1,  # TRL pads it with 1
    "old_per_token_logps": 0.0,
    "sampling_per_token_logps": 0.0,
    "ref_per_token_logps": 0.0,
    "importance_sampling_ratio": 1.0,  # (B, T) per token or (B, 1) per sequence
    "advantages": 0.0,  # (B,) in TRL; (B, T) from a subclass
}
#: recounted after the merge (it spans the merged batch)
RECOUNTED = ("num_items_in_batch",)


def total_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The weighted total reward per completion, as TRL sums it (``NaN`` where every reward was ``None``).

    >>> total_rewards(torch.tensor([[1.0, float("nan")], [float("nan")] * 2]), torch.tensor([1.0, 2.0])).tolist()
    [1.0, nan]
    """
    weights = weights.to(rewards_per_func.device)
    total = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return total


def constant_groups(rewards: torch.Tensor, *, num_generations: int, tolerance: float) -> torch.Tensor:
    """Which groups (consecutive runs of ``num_generations`` rewards) are constant within ``tolerance``.

    ``NaN`` (unscorable) rewards are ignored; a group with no finite reward is constant.

    Returns:
        A bool tensor with one entry per group.
    """
    if rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not form whole groups of num_generations={num_generations}")
    grouped = rewards.view(-1, num_generations)
    finite = ~torch.isnan(grouped)
    high = torch.where(finite, grouped, torch.full_like(grouped, -torch.inf)).max(dim=1).values
    low = torch.where(finite, grouped, torch.full_like(grouped, torch.inf)).min(dim=1).values
    spread = torch.where(finite.any(dim=1), high - low, torch.zeros_like(high))
    return spread <= tolerance


def _pad(tensor: torch.Tensor, width: int, value: float, *, left: bool) -> torch.Tensor:
    missing = width - tensor.size(1)
    if missing <= 0:
        return tensor
    filler = torch.full((tensor.size(0), missing, *tensor.shape[2:]), value, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([filler, tensor] if left else [tensor, filler], dim=1)


def merge_rows(parts: Sequence[tuple[Mapping[str, Any], Sequence[int]]], *, pad_token_id: int) -> dict[str, Any]:
    """Concatenate chosen rows of several ``_generate_and_score_completions`` outputs into one batch.

    Prompt-side tensors are re-padded on the left and completion-side ones on the right (as TRL pads them) to the
    widest part; ``num_items_in_batch`` is left out (the caller recounts it over the merged batch).

    Args:
        parts: ``(output, row indices to keep)`` per generation call.
        pad_token_id: the tokenizer's pad id (padding of ``prompt_ids`` / ``completion_ids``).

    Returns:
        The merged dict (every key of the outputs except ``num_items_in_batch``).

    Raises:
        ValueError: an output carries a key this merge does not know (multimodal inputs, a newer TRL), or the parts
            disagree on their keys: failing is safer than mis-aligning rows.

    >>> a = {"prompt_ids": torch.tensor([[5, 6]]), "prompt_mask": torch.tensor([[1, 1]]),
    ...      "completion_ids": torch.tensor([[7]]), "completion_mask": torch.tensor([[1]]),
    ...      "advantages": torch.tensor([0.5]), "num_items_in_batch": torch.tensor(1)}
    >>> b = {"prompt_ids": torch.tensor([[8]]), "prompt_mask": torch.tensor([[1]]),
    ...      "completion_ids": torch.tensor([[9, 9]]), "completion_mask": torch.tensor([[1, 1]]),
    ...      "advantages": torch.tensor([-1.0]), "num_items_in_batch": torch.tensor(2)}
    >>> m = merge_rows([(a, [0]), (b, [0])], pad_token_id=0)
    >>> m["prompt_ids"].tolist(), m["completion_mask"].tolist(), m["advantages"].tolist()
    ([[5, 6], [0, 8]], [[1, 0], [1, 1]], [0.5, -1.0])
    """
    keys = [k for k in parts[0][0] if k not in RECOUNTED]
    for output, _ in parts:
        if sorted(k for k in output if k not in RECOUNTED) != sorted(keys):
            raise ValueError(f"generation outputs disagree on their keys: {sorted(keys)} vs {sorted(output)}")
    unknown = [k for k in keys if k not in LEFT_PADDED and k not in RIGHT_PADDED]
    if unknown:
        raise ValueError(
            f"drop_constant_groups cannot merge output key(s) {unknown} of GRPOTrainer._generate_and_score_completions "
            f"(it knows {sorted({**LEFT_PADDED, **RIGHT_PADDED, **dict.fromkeys(RECOUNTED)})}: text-only TRL 1.16); "
            "set drop_constant_groups: false"
        )
    merged: dict[str, Any] = {}
    for key in keys:
        left = key in LEFT_PADDED
        value = (LEFT_PADDED if left else RIGHT_PADDED)[key]
        value = pad_token_id if value == "pad" else value
        chosen = []
        for output, rows in parts:
            if len(rows):
                tensor = output[key]
                chosen.append(tensor[torch.as_tensor(list(rows), dtype=torch.long, device=tensor.device)])
        if chosen[0].dim() == 1:
            merged[key] = torch.cat(chosen)
            continue
        width = max(t.size(1) for t in chosen)
        merged[key] = torch.cat([_pad(t, width, value, left=left) for t in chosen])
    return merged


def group_rows(groups: Sequence[int], num_generations: int) -> list[int]:
    """Row indices of whole groups.

    >>> group_rows([0, 2], 2)
    [0, 1, 4, 5]
    """
    return [g * num_generations + j for g in groups for j in range(num_generations)]


def prompt_key(row: Mapping[str, Any]) -> str:
    """A prompt's identity (its messages), so that refills never repeat a prompt of the batch."""
    return json.dumps(row.get("prompt"), sort_keys=True, ensure_ascii=False)


class RefillPrompts:
    """Other prompts of the train set for refills: a seeded permutation walked with a persistent cursor.

    Each pass over the data is a fresh permutation (``torch.randperm`` seeded ``seed + pass``); prompts in
    ``exclude`` (the batch's own) and prompts already drawn in the same call are skipped. When a whole pass finds
    nothing more, fewer prompts than asked come back.

    >>> rows = [{"prompt": p} for p in "abcde"]
    >>> refill = RefillPrompts(rows, seed=0)
    >>> first = refill.draw(2, exclude={prompt_key({"prompt": "a"})})
    >>> len(first), any(r["prompt"] == "a" for r in first)
    (2, False)
    >>> len(refill.draw(9, exclude=set()))  # no prompt twice in one call
    5
    """

    def __init__(self, dataset: Any, *, seed: int):
        self.dataset, self.seed = dataset, seed
        self._order: list[int] = []
        self._cursor = 0
        self._pass = -1

    def _next_index(self) -> int:
        if self._cursor >= len(self._order):
            self._pass += 1
            generator = torch.Generator().manual_seed(self.seed + self._pass)
            self._order = torch.randperm(len(self.dataset), generator=generator).tolist()
            self._cursor = 0
        index = self._order[self._cursor]
        self._cursor += 1
        return index

    def draw(self, count: int, *, exclude: set[str]) -> list[dict[str, Any]]:
        """Up to ``count`` rows whose prompts are not in ``exclude`` and are all different."""
        rows: list[dict[str, Any]] = []
        seen = set(exclude)
        misses = 0
        while len(rows) < count and misses < len(self.dataset):
            row = dict(self.dataset[self._next_index()])
            key = prompt_key(row)
            if key in seen:
                misses += 1
                continue
            misses = 0
            seen.add(key)
            rows.append(row)
        return rows


class DynamicSamplingGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` that drops constant-reward groups and refills the batch (module docstring).

    Args:
        constant_reward_tolerance: a group whose total rewards span at most this is constant.
        max_refill_batches: extra generation calls per step at most.
        *args, **kwargs: passed to ``GRPOTrainer``.
    """

    def __init__(self, *args: Any, constant_reward_tolerance: float, max_refill_batches: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.constant_reward_tolerance = float(constant_reward_tolerance)
        self.max_refill_batches = int(max_refill_batches)
        self._refill = RefillPrompts(self.train_dataset, seed=self.args.seed)
        self._last_rewards_per_func: torch.Tensor | None = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards  # gathered over processes, as TRL computes advantages from it
        return rewards

    def _local_constant_groups(self, batch_size: int) -> torch.Tensor:
        """Constant flags of this process's groups in the last scored call."""
        start = self.accelerator.process_index * batch_size
        local = self._last_rewards_per_func[start : start + batch_size]
        totals = total_rewards(local, self.reward_weights)
        return constant_groups(totals, num_generations=self.num_generations, tolerance=self.constant_reward_tolerance)

    def _score_batch(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """One generation + scoring call, exactly TRL's."""
        return super()._generate_and_score_completions(inputs)

    def _generate_and_score_completions(self, inputs):
        output = self._score_batch(inputs)
        if not self.model.training:
            return output
        return self._refill_constant_groups(inputs, output)

    def _max_over_processes(self, value: int) -> int:
        device = self.accelerator.device
        return int(self.accelerator.gather(torch.tensor([value], device=device)).max().item())

    def _refill_constant_groups(self, inputs: list[dict[str, Any]], output: dict[str, Any]) -> dict[str, Any]:
        from accelerate.utils import gather_object

        size, group = len(inputs), self.num_generations
        constant = self._local_constant_groups(size).tolist()
        dropped = [g for g, flag in enumerate(constant) if flag]
        parts: list[tuple[Mapping[str, Any], list[int]]] = [
            (output, group_rows([g for g, flag in enumerate(constant) if not flag], group))
        ]
        need, calls = len(dropped), 0
        exclude = set(gather_object([prompt_key(row) for row in inputs[::group]]))
        while calls < self.max_refill_batches:
            want = self._max_over_processes(need)
            if want == 0:
                break
            processes, rank = self.accelerator.num_processes, self.accelerator.process_index
            drawn = self._refill.draw(want * processes, exclude=exclude)
            if len(drawn) < want * processes:  # the same on every process: the same cursor and exclusions
                logger.warning("Refill: only %d other prompts left for %d groups", len(drawn), want * processes)
                if len(drawn) < processes:
                    break
                want = len(drawn) // processes
            exclude.update(prompt_key(row) for row in drawn)
            mine = drawn[rank * want : (rank + 1) * want]
            refill_inputs = [dict(row) for row in mine for _ in range(group)]
            refill = self._score_batch(refill_inputs)
            calls += 1
            refill_constant = self._local_constant_groups(len(refill_inputs)).tolist()
            useful = [g for g, flag in enumerate(refill_constant) if not flag][:need]
            if useful:
                parts.append((refill, group_rows(useful, group)))
                need -= len(useful)
        still_constant = dropped[len(dropped) - need :] if need else []
        if still_constant:
            parts.append((output, group_rows(still_constant, group)))
        merged = merge_rows(parts, pad_token_id=self._tokenizer.pad_token_id)
        masked = len(still_constant) * group
        if masked:
            merged["advantages"][-masked:] = 0.0
            merged["completion_mask"][-masked:] = 0
        loss_mask = merged["completion_mask"]
        if "tool_mask" in merged:
            loss_mask = loss_mask * merged["tool_mask"]
        merged["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        metrics = self._metrics["train"]
        totals = self.accelerator.gather(
            torch.tensor([len(dropped), len(still_constant)], dtype=torch.float32, device=self.accelerator.device)
        ).view(-1, 2).sum(dim=0)  # fmt: skip
        metrics["refill/dropped_groups"].append(totals[0].item())
        metrics["refill/calls"].append(float(calls))
        metrics["refill/still_constant"].append(totals[1].item())
        return merged
