"""Shared prompt prefixes in GRPO: each group's prompt runs through the model once, not ``num_generations`` times.

GRPO scores ``num_generations`` completions of the SAME prompt. ``trl.GRPOTrainer`` feeds every completion with its
own copy of the prompt, both when it generates (the prefill) and when it computes the per-token log-probs for the
loss (forward and backward). A moderator prompt is ~10x longer than its completion (a debate transcript vs.
``STOP <answer>42</answer>``), so nearly all of that compute is the same prompt again. Here the distinct prompts of a
batch run once, their key/value cache is copied to every row of the group (:meth:`Cache.batch_select_indices`, which
keeps the autograd graph, so the gradient of every completion flows back through the one shared prompt pass), and
only the completions run per row. The result is the same computation in another order: the log-probs, entropies and
gradients equal TRL's to float rounding, and sampled generations are token-identical for the same seed (tested in
``tests/test_train_shared_prefix.py`` against TRL's own methods). Measured on SmolLM2-135M, 2 prompts x 4
completions of <= 16 tokens on ~170-token prompts: the loss forward + backward takes ~4x less CPU time, generation
~2x less (``benchmarks/bench_grpo_step.py``).

Where it applies (``share_prompt_prefix: true``, the default) and where TRL's path runs unchanged:

* loss log-probs: text-only batches, one process, no gradient checkpointing (which turns the cache off), no MoE
  auxiliary loss; and only when at least two rows of a chunk share a prompt;
* generation: transformers' ``generate`` (not vLLM, not continuous batching), text-only, one process, the default
  dynamic cache.

Multi-process runs (DDP, DeepSpeed, FSDP) keep TRL's path: the two-pass forward is untested there.

>>> import torch
>>> ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 8, 9]])
>>> mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1]])
>>> first, inverse = shared_rows(ids, mask)
>>> first.tolist(), inverse.tolist()
([0, 2], [0, 0, 1])
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch

logger = logging.getLogger(__name__)

#: multimodal keyword arguments of ``GRPOTrainer._get_per_token_logps_and_entropies``: any set -> TRL's path
_MULTIMODAL_KWARGS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


def shared_rows(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Group identical rows (token ids AND attention mask): the first row of each group, and each row's group.

    Returns ``(first, inverse)``: ``ids[first]`` are the distinct rows in order of first appearance and
    ``ids[first][inverse]`` equals ``ids``.
    """
    groups: dict[tuple[bytes, bytes], int] = {}
    inverse = []
    first = []
    ids_cpu, mask_cpu = ids.detach().cpu().numpy(), mask.detach().cpu().numpy()
    for row in range(ids_cpu.shape[0]):
        key = (ids_cpu[row].tobytes(), mask_cpu[row].tobytes())
        group = groups.get(key)
        if group is None:
            group = groups[key] = len(first)
            first.append(row)
        inverse.append(group)
    device = ids.device
    return torch.tensor(first, device=device), torch.tensor(inverse, device=device)


def prefill(model: Any, ids: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor | None = None) -> Any:
    """Run ``ids`` through ``model`` for its key/value cache only (the LM head scores just the last position)."""
    kwargs = {"position_ids": position_ids} if position_ids is not None else {}
    out = model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1, **kwargs)
    return out.past_key_values


class SharedPrefixMixin:
    """A ``trl.GRPOTrainer`` mixin: the loss log-probs and the generation prefill run each distinct prompt once.

    Put it before ``GRPOTrainer`` in the bases; ``self.share_prompt_prefix`` switches it (default on). Every other
    case calls TRL's own method (see the module docstring).
    """

    share_prompt_prefix: bool = True
    _shared_prefix_logged: bool = False

    # ------------------------------------------------------------------ when it applies
    def _shared_prefix_ok(self) -> bool:
        if not self.share_prompt_prefix or self.accelerator.num_processes != 1:
            return False
        return not getattr(self.model, "is_gradient_checkpointing", False)

    # ------------------------------------------------------------------ the loss (and old / reference log-probs)
    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **multimodal,
    ):
        unshared = (
            compute_aux_loss
            or any(multimodal.get(name) is not None for name in _MULTIMODAL_KWARGS)
            or set(multimodal) - set(_MULTIMODAL_KWARGS)  # an argument this version does not know: TRL's path
            or not self._shared_prefix_ok()
            or logits_to_keep >= input_ids.size(1)
        )
        if unshared:
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size=batch_size,
                compute_entropy=compute_entropy,
                compute_aux_loss=compute_aux_loss,
                **multimodal,
            )
        batch_size = batch_size or input_ids.size(0)
        all_logps, all_entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):  # TRL's chunking, for the same memory peak
            ids = input_ids[start : start + batch_size]
            mask = attention_mask[start : start + batch_size]
            logps, entropies = self._shared_prefix_logps(model, ids, mask, logits_to_keep, compute_entropy)
            all_logps.append(logps)
            all_entropies.append(entropies)
        logps = torch.cat(all_logps, dim=0)
        return logps, (torch.cat(all_entropies, dim=0) if compute_entropy else None), None

    def _shared_prefix_logps(
        self, model: Any, ids: torch.Tensor, mask: torch.Tensor, logits_to_keep: int, compute_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One chunk: the distinct prompts (all but their last token) once, then last prompt token + completion.

        Positions are what one pass over the padded row gives (TRL passes none, so the model counts from 0 over the
        padding): the first pass covers 0..P-2, the second continues from the cache length. The first completion
        token is predicted from the last prompt token, which is why that token goes into the second pass.
        """
        prompt_len = ids.size(1) - logits_to_keep
        first, inverse = shared_rows(ids[:, :prompt_len], mask[:, :prompt_len])
        if first.numel() == ids.size(0) or prompt_len < 2:  # nothing shared: one pass is cheaper
            out = self._fused_logps(model, ids, mask, logits_to_keep, prompt_len)
            return out.log_probs[:, -logits_to_keep:], out.entropy[:, -logits_to_keep:] if compute_entropy else None
        self._log_shared_prefix_once(ids.size(0), first.numel())
        with self.accelerator.autocast():
            cache = prefill(model, ids[first, : prompt_len - 1], mask[first, : prompt_len - 1])
        cache.batch_select_indices(inverse)
        tail = ids[:, prompt_len - 1 :]
        out = self._fused_logps(model, tail, mask, logits_to_keep, 1, past_key_values=cache)
        return out.log_probs[:, -logits_to_keep:], out.entropy[:, -logits_to_keep:] if compute_entropy else None

    def _fused_logps(self, model, ids, mask, logits_to_keep, unscored, **kwargs):
        """TRL's fused LM head over ``ids``, scoring only the completion tokens (labels -100 elsewhere)."""
        tail_mask = mask[:, -ids.size(1) :]
        labels = ids.masked_fill(tail_mask == 0, -100)
        labels[:, :unscored] = -100
        with self.accelerator.autocast():
            return model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True, **kwargs)

    # ------------------------------------------------------------------ generation
    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        usable = (
            self._shared_prefix_ok()
            and not self.use_vllm
            and not getattr(self, "use_transformers_continuous_batching", False)
            and images is None
            and not multimodal_fields
            and getattr(self.generation_config, "cache_implementation", None) is None
            and len({tuple(p) for p in prompt_ids}) < len(prompt_ids)
        )
        context = self._shared_prefill_generate() if usable else contextlib.nullcontext()
        with context:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images=has_tool_images
            )

    @contextlib.contextmanager
    def _shared_prefill_generate(self) -> Iterator[None]:
        """For one call, make the unwrapped model's ``generate`` prefill each distinct prompt once.

        TRL calls ``generate`` on the unwrapped model with left-padded rows; ``generate`` accepts a filled cache and
        then runs only the uncached tokens. The prefill covers all but the last prompt token, at the positions
        ``generate`` itself derives from the attention mask, so the continuation is the same computation.
        """
        target = self.accelerator.unwrap_model(self.model_wrapped)
        original = target.generate

        def generate(*args: Any, input_ids=None, attention_mask=None, **kwargs: Any):
            if args or input_ids is None or attention_mask is None or "past_key_values" in kwargs:
                return original(*args, input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            first, inverse = shared_rows(input_ids, attention_mask)
            if first.numel() == input_ids.size(0) or input_ids.size(1) < 2:
                return original(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            self._log_shared_prefix_once(input_ids.size(0), first.numel())
            ids, mask = input_ids[first, :-1], attention_mask[first, :-1]
            positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
            cache = prefill(target, ids, mask, positions)
            cache.batch_select_indices(inverse)
            return original(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, **kwargs)

        own = target.__dict__.get("generate")  # an instance attribute set by someone else, kept as it was
        target.generate = generate
        try:
            yield
        finally:
            if own is None:
                del target.generate  # the class method is back
            else:
                target.generate = own

    def _log_shared_prefix_once(self, rows: int, distinct: int) -> None:
        if not self._shared_prefix_logged:
            self._shared_prefix_logged = True
            logger.info("Shared prompt prefixes: %d rows run %d distinct prompts once each", rows, distinct)
