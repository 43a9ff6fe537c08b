"""Config loading shared by every command: ``--config file.yaml`` plus ``--key value`` overrides.

Every command declares its options as dataclasses with ``metadata={"help": ...}`` on each field and parses them
with :func:`parse_config`, a thin wrapper over TRL's ``TrlParser`` that turns unknown keys (in the YAML file or on
the command line) into one clear error listing the valid keys.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

logger = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration problem found before any expensive work starts."""


def _valid_keys(dataclass_types: Sequence[type]) -> list[str]:
    keys: set[str] = set()
    for dc in dataclass_types:
        keys.update(f.name for f in dataclasses.fields(dc) if f.init)
    return sorted(keys)


def parse_config(dataclass_types: Sequence[type], argv: Sequence[str] | None = None, *, prog: str | None = None):
    """Parse ``argv`` (``--config x.yaml --key value ...``) into instances of ``dataclass_types``.

    Args:
        dataclass_types: the command's config dataclasses, in order.
        argv: the arguments (defaults to ``sys.argv[1:]``).
        prog: program name shown in ``--help``.

    Returns:
        A tuple with one instance per dataclass type.

    Raises:
        ConfigError: for a missing config file, a non-mapping YAML, or unknown keys (listing the valid ones).
    """
    from trl import TrlParser

    argv = list(sys.argv[1:] if argv is None else argv)
    valid = _valid_keys(dataclass_types)
    if "--config" in argv:
        idx = argv.index("--config")
        if idx + 1 >= len(argv):
            raise ConfigError("--config needs a path to a YAML file")
        path = Path(argv[idx + 1])
        if not path.is_file():
            raise ConfigError(f"Config file not found: {path}")
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"Config file {path} must contain a YAML mapping of key: value, got {type(data).__name__}"
            )
        unknown = sorted(k for k in data if k not in valid and k not in ("env", "prompts"))
        if unknown:
            raise ConfigError(f"Unknown key(s) {unknown} in {path}. Valid keys: {', '.join(valid)}")
        _activate_config_prompts(data.get("prompts"), path)
    parser = TrlParser(dataclass_types, prog=prog, allow_abbrev=False)
    try:
        outputs = parser.parse_args_and_config(args=argv, return_remaining_strings=True)
    except SystemExit:
        raise
    remaining = _drop_pair(outputs[-1], "--prompts")  # the config file's `prompts:` key, handled above
    if remaining:
        raise ConfigError(f"Unknown argument(s) {remaining}. Valid keys: {', '.join('--' + k for k in valid)}")
    return tuple(outputs[:-1])


def _activate_config_prompts(value: Any, config_path: Path) -> None:
    """A config file's ``prompts: file.yaml`` key: activate that prompts file, unless ``--prompts`` already set one.

    The prompts file is what makes an experiment's wording part of its config (e.g. the few-shot debater prompts
    of the SmolLM2 world); the command line's global ``--prompts`` takes precedence.
    """
    if value is None:
        return
    from metamod.prompts import PROMPTS_FROM_CLI_ENV, active_prompts_file, use_prompts

    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{config_path}: prompts must be the path of a YAML prompts file, got {value!r}")
    if os.environ.get(PROMPTS_FROM_CLI_ENV) and active_prompts_file() is not None:
        logger.info("--prompts %s overrides prompts: %s from %s", active_prompts_file(), value, config_path)
        return
    use_prompts(value)


def _drop_pair(strings: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for i, item in enumerate(strings):
        if skip:
            skip = False
            continue
        if item == flag and i + 1 < len(strings):
            skip = True
            continue
        out.append(item)
    return out


def config_to_dict(*configs: Any) -> dict[str, Any]:
    """Merge dataclass configs into one JSON-serialisable dict (later configs win on shared keys).

    When a prompts file is active (``--prompts``), ``prompts_file`` and ``prompts_sha256`` are added, so a run
    resumed under other prompts differs from its saved config.
    """
    from metamod.prompts import prompts_record

    merged: dict[str, Any] = {}
    for cfg in configs:
        if cfg is None:
            continue
        data = cfg.to_dict() if hasattr(cfg, "to_dict") else dataclasses.asdict(cfg)
        merged.update(data)
    merged.update(prompts_record())
    return json.loads(json.dumps(merged, default=str))


def save_resolved_config(path: str | os.PathLike, *configs: Any) -> Path:
    """Write the resolved config (after YAML + overrides) as YAML next to a run's outputs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config_to_dict(*configs), sort_keys=True))
    return path


def setup_logging(level: str | int = "INFO") -> None:
    """Configure root logging for CLI commands (library code only uses ``logging.getLogger(__name__)``)."""
    logging.basicConfig(
        level=level if isinstance(level, int) else getattr(logging, str(level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
