"""A batched decoding loop that drops finished rows: the hf backend's fast path for short, ragged completions.

``model.generate`` keeps every row of a batch until the longest one finishes, and its ``stop_strings`` criterion
re-tokenises every row at every step. For debates (32 rows of which most answer in 20-60 tokens, a few run to
``max_tokens``) that wastes most of the compute on a CPU. :func:`decode_rows` runs the same computation (prefill
with left padding, then one token per step with the KV cache) but removes a row from the batch, and from the
cache, as soon as it emits an end-of-sequence token or a stop string; so each step costs only the live rows.
A prefix that every row shares (system prompt, instructions, few-shot examples) is prefilled once and its KV
copied to every row; the rows' own suffixes are then padded between prefix and suffix (masked, with positions
that skip the padding), so the computation is the same as for separately padded rows.

Sampling: greedy at ``temperature == 0``; otherwise temperature, then top-k (0 = off), then top-p over the
softmax, drawn from a ``torch.Generator`` seeded per call (the global RNG is untouched). Results are token id
lists, one per row, ending with the eos token when the row stopped on it.

Log-probabilities (``logprobs_out``): the log-probability of each chosen token under the model's raw distribution,
``log_softmax`` of the logits before temperature, top-k and top-p (:func:`chosen_logprobs`), so perplexities compare
across sampling settings. Only the last position's logits of the step are used; without ``logprobs_out`` nothing
extra is computed. With ``top_out`` and ``top_logprobs = k`` the ``k`` most likely tokens of every step and their raw
log-probabilities are kept too (:func:`top_alternatives`), from the same logits; the tokens drawn do not change.

>>> import torch
>>> logits = torch.tensor([[0.0, 1.0, 5.0], [3.0, 0.0, 0.0]])
>>> pick_tokens(logits, temperature=0.0, top_p=1.0, top_k=0, generator=None).tolist()
[2, 0]
>>> filtered = top_p_filter(torch.tensor([[0.0, 0.0, 10.0]]), 0.5)
>>> torch.isinf(filtered).tolist()
[[True, True, False]]
>>> [round(x, 4) for x in chosen_logprobs(torch.tensor([[0.0, 0.0], [2.0, 0.0]]), torch.tensor([1, 0])).tolist()]
[-0.6931, -0.1269]
>>> [(ids, [round(v, 4) for v in values]) for ids, values in top_alternatives(torch.tensor([[0.0, 2.0, 1.0]]), 2)]
[([1, 2], [-0.4076, -1.4076])]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

logger = logging.getLogger(__name__)


def top_p_filter(logits: Any, top_p: float) -> Any:
    """Set to ``-inf`` every logit outside the smallest set whose probability mass reaches ``top_p``."""
    import torch

    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    probs = torch.softmax(sorted_logits, dim=-1)
    drop = probs.cumsum(dim=-1) - probs > top_p  # the token that crosses top_p is kept
    drop[..., 0] = False
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def pick_tokens(logits: Any, *, temperature: float, top_p: float, top_k: int, generator: Any) -> Any:
    """The next token of every row: argmax at temperature 0, else a draw from the filtered distribution."""
    import torch

    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    logits = top_p_filter(logits, top_p)
    return sample_rows(torch.softmax(logits, dim=-1), generator)


def chosen_logprobs(logits: Any, tokens: Any) -> Any:
    """``log_softmax(logits)[row, tokens[row]]`` per row, in float32, from the raw logits (no temperature/top-p).

    Computed as the chosen logit minus ``logsumexp`` of the row, which equals the gathered ``log_softmax`` without
    writing a vocabulary-sized tensor.

    Args:
        logits: ``(rows, vocab)`` last-position logits of the model.
        tokens: ``(rows,)`` the token chosen in each row.

    Returns:
        A ``(rows,)`` float32 tensor of log-probabilities (each ``<= 0``).
    """
    import torch

    logits = logits.float()
    return logits.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def top_alternatives(logits: Any, k: int) -> list[tuple[list[int], list[float]]]:
    """The ``k`` most likely token ids of every row and their raw log-probabilities (``log_softmax`` of the logits,
    before temperature / top-p, as :func:`chosen_logprobs`), most likely first.

    Args:
        logits: ``(rows, vocab)`` last-position logits of the model.
        k: how many alternatives per row (capped by the vocabulary size).

    Returns:
        One ``(token ids, log-probs)`` pair per row.
    """
    import torch

    logits = logits.float()
    values, ids = torch.topk(logits, min(int(k), logits.shape[-1]), dim=-1)
    values = values - torch.logsumexp(logits, dim=-1, keepdim=True)
    return list(zip(ids.tolist(), values.tolist(), strict=True))


def sample_rows(probs: Any, generator: Any) -> Any:
    """One draw per row from ``probs`` by inverse CDF: a uniform number per row, searched in the running sum.

    The same distribution as ``torch.multinomial(probs, 1)``, at a fraction of its cost on a CPU (measured at 32 x
    49,152: 45 ms for ``multinomial``, 3 ms for this), which matters when it runs once per decoded token. Tokens
    of probability 0 are never drawn.

    >>> import torch
    >>> sample_rows(torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), torch.Generator().manual_seed(0)).tolist()
    [1, 2]
    """
    import torch

    cdf = probs.cumsum(dim=-1)
    draws = torch.rand((probs.shape[0], 1), generator=generator, device=probs.device, dtype=cdf.dtype)
    picks = torch.searchsorted(cdf, draws * cdf[:, -1:], right=True).squeeze(-1)
    return picks.clamp_(max=probs.shape[-1] - 1)


def growing_cache(model: Any) -> Any:
    """A KV cache that appends into preallocated buffers (capacity doubles) instead of ``torch.cat`` per step.

    ``DynamicCache`` copies every layer's whole cache at every decoded token (O(length) per step, and on a CPU a
    fresh allocation, i.e. page faults and system time, per layer per step). Models with sliding-window layers
    keep ``DynamicCache``.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import Cache, DynamicLayer

    config = getattr(model, "config", None)
    text_config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = set(getattr(text_config, "layer_types", None) or ["full_attention"])
    if layer_types != {"full_attention"} or getattr(text_config, "use_sliding_window", False):
        return DynamicCache()

    class GrowingLayer(DynamicLayer):
        def lazy_initialization(self, key_states, value_states) -> None:
            super().lazy_initialization(key_states, value_states)
            self._length = 0
            self._buffers = None

        def _reserve(self, key_states, value_states, needed: int) -> None:
            capacity = 0 if self._buffers is None else self._buffers[0].shape[-2]
            if needed <= capacity:
                return
            capacity = max(2 * capacity, needed + 64)
            fresh = []
            for states in (key_states, value_states):
                shape = list(states.shape)
                shape[-2] = capacity
                fresh.append(states.new_empty(shape))
            if self._buffers is not None:
                for old, new in zip(self._buffers, fresh, strict=True):
                    new[..., : self._length, :] = old[..., : self._length, :]
            self._buffers = fresh

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self._length + key_states.shape[-2]
            self._reserve(key_states, value_states, end)
            keys, values = self._buffers
            keys[..., self._length : end, :] = key_states
            values[..., self._length : end, :] = value_states
            self._length = end
            self.keys, self.values = keys[..., :end, :], values[..., :end, :]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._length if self.is_initialized else 0

        def batch_select_indices(self, indices) -> None:
            if self.is_initialized and self._buffers is not None:
                self._buffers = [b[indices, ...] for b in self._buffers]
                self.keys = self._buffers[0][..., : self._length, :]
                self.values = self._buffers[1][..., : self._length, :]

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.is_initialized and self._buffers is not None:
                self._buffers = [b.repeat_interleave(repeats, dim=0) for b in self._buffers]
                self.keys = self._buffers[0][..., : self._length, :]
                self.values = self._buffers[1][..., : self._length, :]

        def reorder_cache(self, beam_idx) -> None:
            self.batch_select_indices(beam_idx)

        def crop(self, tokens_to_remove: int) -> None:  # not used by this loop; keep the buffer semantics right
            if tokens_to_remove < 0 and self.is_initialized:
                self._length = max(0, self._length + tokens_to_remove)
                self.keys = self._buffers[0][..., : self._length, :]
                self.values = self._buffers[1][..., : self._length, :]

    class GrowingCache(DynamicCache):
        def __init__(self) -> None:
            Cache.__init__(self, layer_class_to_replicate=GrowingLayer)

    return GrowingCache()


def _forward(model: Any, **kwargs: Any) -> Any:
    try:
        return model(**kwargs, logits_to_keep=1)
    except TypeError:  # models without logits_to_keep compute every position's logits
        return model(**kwargs)


#: a shared prefix shorter than this is not worth a separate forward pass
MIN_SHARED_PREFIX = 16


def shared_prefix_length(rows: Sequence[Sequence[int]], minimum: int = MIN_SHARED_PREFIX) -> int:
    """Tokens every row starts with (each row keeps at least one token of its own); 0 below ``minimum`` or for one row.

    >>> shared_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]], minimum=2)
    2
    >>> shared_prefix_length([[1, 2, 3], [1, 2, 3]], minimum=2), shared_prefix_length([[1, 2, 3]], minimum=1)
    (2, 0)
    """
    if len(rows) < 2:
        return 0
    first = rows[0]
    length = min(len(r) for r in rows) - 1
    for row in rows[1:]:
        i = 0
        while i < length and row[i] == first[i]:
            i += 1
        length = i
        if length < minimum:
            return 0
    return length if length >= minimum else 0


def decode_rows(
    model: Any,
    rows: Sequence[Sequence[int]],
    *,
    pad_id: int,
    eos_ids: set[int],
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    stopped: Callable[[list[int]], bool] | None = None,
    logprobs_out: list[list[float]] | None = None,
    top_logprobs: int = 0,
    top_out: list[list[tuple[list[int], list[float]]]] | None = None,
) -> list[list[int]]:
    """Decode every row (a prompt's token ids) until eos, a stop string or ``max_new_tokens``.

    Args:
        model: a causal LM (``PreTrainedModel`` or ``PeftModel``) in eval mode.
        rows: prompt token ids, one list per row (repeat a prompt for several samples).
        pad_id: the pad token id used for left padding.
        eos_ids: token ids that end a row (kept as its last token).
        max_new_tokens: the most tokens a row may generate.
        temperature: 0 for greedy decoding.
        top_p: nucleus mass (1.0: off).
        top_k: keep the k most likely tokens (0: off).
        seed: seeds this call's sampling generator (``None``: unseeded).
        stopped: called with a row's generated ids after each new token; ``True`` ends the row (stop strings).
        logprobs_out: an empty list to fill with one list per row (row order) holding the raw-model log-probability
            of each generated token (:func:`chosen_logprobs`; as long as the row's ids). ``None``: not computed.
        top_logprobs: with ``top_out``, how many alternatives to keep per generated position.
        top_out: an empty list to fill with one list per row holding, per generated token, the
            :func:`top_alternatives` of that step (``top_logprobs`` of them). ``None``: not computed.

    Returns:
        The generated ids of each row, in row order.
    """
    import torch

    device = next(model.parameters()).device
    shared = shared_prefix_length(rows)
    width = max(len(r) for r in rows) - shared
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), shared + width), dtype=torch.long)
    attention[:, :shared] = 1
    for i, row in enumerate(rows):
        suffix = row[shared:]
        input_ids[i, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
        attention[i, shared + width - len(suffix) :] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    generator = None
    if temperature > 0 and seed is not None:
        generator = torch.Generator(device=device).manual_seed(int(seed))
    cache = growing_cache(model)
    out = [[] for _ in rows]
    live = list(range(len(rows)))
    if logprobs_out is not None:
        logprobs_out[:] = [[] for _ in rows]
    keep_top = top_out is not None and top_logprobs > 0
    if top_out is not None:
        top_out[:] = [[] for _ in rows]
    with torch.inference_mode():
        if shared:  # the prefix every row shares is computed once, then its KV is copied to every row
            prefix = torch.tensor([rows[0][:shared]], dtype=torch.long, device=device)
            _forward(
                model, input_ids=prefix, position_ids=positions[:1, :shared], past_key_values=cache, use_cache=True
            )
            cache.batch_repeat_interleave(len(rows))
        logits = _forward(
            model, input_ids=input_ids, attention_mask=attention, position_ids=positions[:, shared:],
            past_key_values=cache, use_cache=True,
        ).logits[:, -1, :]  # fmt: skip
        next_position = positions[:, -1] + 1
        for step in range(max_new_tokens):
            tokens = pick_tokens(logits, temperature=temperature, top_p=top_p, top_k=top_k, generator=generator)
            if logprobs_out is not None:
                for row, value in zip(live, chosen_logprobs(logits, tokens).tolist(), strict=True):
                    logprobs_out[row].append(value)
            if keep_top:
                for row, alternatives in zip(live, top_alternatives(logits, top_logprobs), strict=True):
                    top_out[row].append(alternatives)  # type: ignore[index]
            keep = []
            for j, (row, token) in enumerate(zip(live, tokens.tolist(), strict=True)):
                out[row].append(token)
                if token in eos_ids or (stopped is not None and stopped(out[row])):
                    continue
                keep.append(j)
            if not keep or step == max_new_tokens - 1:
                break
            if len(keep) < len(live):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                attention, next_position, tokens = attention[index], next_position[index], tokens[index]
                live = [live[j] for j in keep]
            attention = torch.cat([attention, attention.new_ones((len(live), 1))], dim=1)
            logits = _forward(
                model, input_ids=tokens[:, None], attention_mask=attention, position_ids=next_position[:, None],
                past_key_values=cache, use_cache=True,
            ).logits[:, -1, :]  # fmt: skip
            next_position = next_position + 1
    return out
