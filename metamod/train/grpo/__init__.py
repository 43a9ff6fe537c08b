"""``metamod train``: the moderator's GRPO run, by job.

* :mod:`~metamod.train.grpo.config`: the options (``ModeratorGRPOConfig``, ``ModeratorModelConfig``);
* :mod:`~metamod.train.grpo.model`: the policy it starts from (base model, warm start, ``init_adapter``);
* :mod:`~metamod.train.grpo.trainers`: TRL's ``GRPOTrainer`` with shared prompt prefixes and dynamic sampling;
* :mod:`~metamod.train.grpo.run`: :func:`train` (checks, data, trainer, summary) and the CLI entry :func:`main`.

>>> from metamod.train.grpo import ModeratorGRPOConfig, train
>>> ModeratorGRPOConfig.__module__
'metamod.train.grpo.config'
"""

from metamod.llm.tiny import TinyModelConfig
from metamod.train.grpo.config import ModeratorGRPOConfig, ModeratorModelConfig
from metamod.train.grpo.model import init_adapter_config, prepare_model_path, record_base_alias
from metamod.train.grpo.run import main, prepare_dataset, refuse_hub_token, summarize, train
from metamod.train.grpo.trainers import DynamicModeratorGRPOTrainer, ModeratorGRPOTrainer
from metamod.train.run_folder import train_settings

__all__ = [
    "DynamicModeratorGRPOTrainer",
    "ModeratorGRPOConfig",
    "ModeratorGRPOTrainer",
    "ModeratorModelConfig",
    "TinyModelConfig",
    "init_adapter_config",
    "main",
    "prepare_dataset",
    "prepare_model_path",
    "record_base_alias",
    "refuse_hub_token",
    "summarize",
    "train",
    "train_settings",
]
