"""Which wording renders a dataset's rows: the prompts the traces were made with.

A rollout records its prompts file (path and sha256) in ``rollout_config.yaml`` beside its traces; ``build-dataset``
renders the moderator / controller prompts of its rows with that same file, so the model is trained on the wording
its loop showed it (docs/rollout.md, "The moderator dataset").
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from metamod.config import ConfigError

logger = logging.getLogger(__name__)


def traces_prompts(files: Sequence[Path]) -> dict[str, str] | None:
    """The prompts the traces were made with, from the ``rollout_config.yaml`` beside them: ``{"prompts_file",
    "prompts_sha256"}``, ``{}`` for the shipped templates, ``None`` when no traces file has a rollout config.

    Raises:
        ConfigError: the traces files were made with different prompts (build one dataset per prompts file).
    """
    import yaml

    from metamod.rollout.run import CONFIG_FILE as ROLLOUT_CONFIG

    found: dict[Path, dict[str, str]] = {}
    for path in files:
        config_path = path.parent / ROLLOUT_CONFIG
        if config_path.is_file():
            config = yaml.safe_load(config_path.read_text()) or {}
            found[path] = {k: config[k] for k in ("prompts_file", "prompts_sha256") if config.get(k)}
    records = {tuple(sorted(r.items())) for r in found.values()}
    if len(records) > 1:
        described = "; ".join(f"{p}: {r.get('prompts_file', 'shipped templates')}" for p, r in found.items())
        raise ConfigError(f"the traces files were made with different prompts ({described}); build one dataset each")
    return next(iter(found.values())) if found else None


@contextmanager
def traces_prompts_in_effect(files: Sequence[Path]) -> Iterator[None]:
    """Render the rows with the prompts the traces were made with (the evaluation prompts the model the same way).

    With no prompts file active (no ``--prompts``, no ``prompts:`` key), the one recorded in the traces'
    ``rollout_config.yaml`` is in effect inside the block (logged; the shipped templates again after it); a prompts
    file that went missing or changed since is an error. An active prompts file other than the recorded one is the
    user's choice: a warning names both.
    """
    from metamod.prompts import active_prompts_file, prompts_record, prompts_sha256, use_prompts
    from metamod.rollout.run import CONFIG_FILE as ROLLOUT_CONFIG

    recorded = traces_prompts(files)
    where = files[0].parent / ROLLOUT_CONFIG
    active = prompts_record()
    if recorded is None or active.get("prompts_sha256") == recorded.get("prompts_sha256"):  # the same wording
        yield
        return
    if active_prompts_file() is not None:
        logger.warning(
            "The rows are rendered with the prompts in %s, but the traces were made with %s (%s): the model will be "
            "trained on other wording than its loop showed it", active["prompts_file"],
            recorded.get("prompts_file", "the shipped templates"), where,
        )  # fmt: skip
        yield
        return
    path = Path(recorded["prompts_file"])
    if not path.is_file() or prompts_sha256(path) != recorded["prompts_sha256"]:
        state = "is missing" if not path.is_file() else "has changed since (its sha256 differs)"
        raise ConfigError(
            f"the traces were made with the prompts file {path} ({where}), which {state}; pass --prompts with that "
            "wording (the rows must be rendered as the loop rendered them)"
        )
    use_prompts(path)
    logger.info("Rendering the rows with the prompts the traces were made with: %s (%s)", path, where)
    try:
        yield
    finally:
        use_prompts(None)
