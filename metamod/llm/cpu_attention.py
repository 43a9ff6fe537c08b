"""Grouped-query attention without copying the KV cache: the hf backend's attention on a CPU.

transformers' ``sdpa`` attention passes ``enable_gqa=True`` to ``torch.nn.functional.scaled_dot_product_attention``
only when there is no attention mask; with a mask (every padded batch, i.e. every batched generation call) it first
repeats each key/value head ``num_key_value_groups`` times (``repeat_kv``), copying the whole KV cache of every
layer at every decoded token. On a CPU that copy, and attention over the 3x larger tensors, dominated a SmolLM2
decode step (9 query heads, 3 KV heads; 32 rows x 280 cached tokens: 280 ms of attention per step over 30 layers
with the copy, 41 ms without; benchmarks/README.md). torch's CPU kernels accept a mask together with
``enable_gqa=True`` and give the same result, so :func:`gqa_sdpa_attention` does that and leaves every other case
(GPU, no mask, no GQA, position biases, attention weights requested) to transformers' own function.

:func:`use_gqa_attention` registers it as the attention implementation ``metamod_sdpa`` (with the ``sdpa`` mask
builder) and switches a loaded model to it; :class:`~metamod.llm.hf.HFGenerator` does so for models it loads on a
CPU with ``sdpa`` attention.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

#: the name the attention function is registered under
ATTENTION_NAME = "metamod_sdpa"


def gqa_sdpa_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention-function contract: ``(batch, heads, q, dim)`` inputs -> ``(batch, q, heads, dim)``."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if (
        query.device.type != "cpu"
        or attention_mask is None
        or groups <= 1
        or kwargs.get("position_bias") is not None
        or kwargs.get("output_attentions", False)
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    output = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout if module.training else 0.0,
        scale=scaling,
        is_causal=False,  # the mask carries causality, as in transformers' function when a mask is given
        enable_gqa=True,
    )
    return output.transpose(1, 2).contiguous(), None


def register_gqa_attention() -> str:
    """Register :func:`gqa_sdpa_attention` (and the ``sdpa`` mask builder) under :data:`ATTENTION_NAME`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    if ATTENTION_NAME not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionInterface.register(ATTENTION_NAME, gqa_sdpa_attention)
        AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    return ATTENTION_NAME


def use_gqa_attention(model: Any) -> bool:
    """Switch ``model`` (loaded with ``sdpa`` attention, on a CPU) to :func:`gqa_sdpa_attention`; ``True`` if switched.

    Models with other attention implementations (eager, flash) or without grouped KV heads are left alone.
    """
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    text_config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    heads = getattr(text_config, "num_attention_heads", None)
    kv_heads = getattr(text_config, "num_key_value_heads", None) or heads
    if not heads or heads == kv_heads:
        return False
    name = register_gqa_attention()
    try:
        model.set_attn_implementation(name)
    except (ValueError, AttributeError) as err:  # a model class that cannot switch keeps sdpa
        logger.info("keeping sdpa attention for %s: %s", type(model).__name__, err)
        return False
    return True
