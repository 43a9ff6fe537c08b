"""The trainer classes of ``metamod train``: TRL's ``GRPOTrainer`` with shared prompt prefixes, and its dynamic-sampling
variant."""

from __future__ import annotations

from trl import GRPOTrainer

from metamod.train.dynamic_sampling import DynamicSamplingGRPOTrainer
from metamod.train.shared_prefix import SharedPrefixMixin


class ModeratorGRPOTrainer(SharedPrefixMixin, GRPOTrainer):
    """``trl.GRPOTrainer`` with shared prompt prefixes (``share_prompt_prefix``); everything else is TRL's."""


class DynamicModeratorGRPOTrainer(SharedPrefixMixin, DynamicSamplingGRPOTrainer):
    """:class:`ModeratorGRPOTrainer` with dynamic sampling (``drop_constant_groups``: constant groups dropped and
    refilled, :mod:`metamod.train.dynamic_sampling`)."""
