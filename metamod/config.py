"""Config loading shared by every command: ``--config file.yaml`` plus ``--key value`` overrides.

Every command declares its options as dataclasses with ``metadata={"help": ...}`` on each field and parses them
with :func:`parse_config`, a thin wrapper over TRL's ``TrlParser`` that turns unknown keys (in the YAML file or on
the command line) into one clear error listing the valid keys.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from metamod.errors import ConfigError, MetamodError, load_yaml_text, read_text

logger = logging.getLogger(__name__)


def _valid_keys(dataclass_types: Sequence[type]) -> list[str]:
    keys: set[str] = set()
    for dc in dataclass_types:
        keys.update(f.name for f in dataclasses.fields(dc) if f.init)
    return sorted(keys)


def check_fields(name: str, options: Any, config: type, *, exclude: Sequence[str] = ()) -> None:
    """The one check of a nested options mapping (``task_options[t]``, ``simulation``, ``mro_simulation``,
    ``*_backend_options``, ...): a mapping whose keys are fields of the dataclass ``config``; ``exclude`` names the
    fields set elsewhere. Each field's own value check runs when the dataclass is built from it.

    >>> @dataclasses.dataclass
    ... class Point:
    ...     x: int = 0
    >>> check_fields("point", {"x": 1}, Point)
    >>> check_fields("point", {"y": 1}, Point)
    Traceback (most recent call last):
    ...
    metamod.errors.ConfigError: point: unknown key(s) ['y']; expected Point fields: x
    >>> check_fields("point", [1], Point)
    Traceback (most recent call last):
    ...
    metamod.errors.ConfigError: point must be a mapping of Point fields, got [1]
    """
    if not isinstance(options, dict):
        raise ConfigError(f"{name} must be a mapping of {config.__name__} fields, got {options!r}")
    valid = [f.name for f in dataclasses.fields(config) if f.name not in exclude]
    unknown = sorted(str(key) for key in options if key not in valid)
    if unknown:
        raise ConfigError(f"{name}: unknown key(s) {unknown}; expected {config.__name__} fields: {', '.join(valid)}")


def _moved_keys_note(keys: Sequence[str], moved: Mapping[str, str] | None) -> str:
    """Where each of ``keys`` that ``moved`` knows belongs now, grouped by place ('' when none is known)."""
    places: dict[str, list[str]] = {}
    for key in keys:
        if moved and key in moved:
            places.setdefault(moved[key], []).append(key)
    return "; ".join(f"{', '.join(names)} belong(s) under {place}" for place, names in places.items())


def _unknown_keys_error(unknown: Sequence[str], path: Path, valid: Sequence[str], moved: Mapping[str, str] | None):
    note = _moved_keys_note(unknown, moved)
    if note and all(moved and key in moved for key in unknown):  # an old flat config: say only where they go
        return ConfigError(
            f"{path} uses the old flat key(s) {list(unknown)}: {note} (the nested options shape that rollout and "
            "eval share; docs/contracts.md)"
        )
    return ConfigError(
        f"Unknown key(s) {list(unknown)} in {path}{f': {note}' if note else ''}. Valid keys: {', '.join(valid)}"
    )


def parse_config(
    dataclass_types: Sequence[type],
    argv: Sequence[str] | None = None,
    *,
    prog: str | None = None,
    moved: Mapping[str, str] | None = None,
):
    """Parse ``argv`` (``--config x.yaml --key value ...``) into instances of ``dataclass_types``.

    Args:
        dataclass_types: the command's config dataclasses, in order.
        argv: the arguments (defaults to ``sys.argv[1:]``).
        prog: program name shown in ``--help``.
        moved: ``{old flat key: its place now}`` (e.g. ``{"task_split": "task_options.<task>"}``): such a key, in
            the file or on the command line, fails naming its new place instead of listing every valid key.

    Returns:
        A tuple with one instance per dataclass type.

    Raises:
        ConfigError: for a missing, undecodable or malformed config file (naming the file and line), a non-mapping
            YAML, unknown keys (listing the valid ones), a value argparse cannot convert, a check in a dataclass's
            ``__post_init__`` (its ``ValueError``/``TypeError`` becomes a ``ConfigError`` with the same message), or
            an ``output_dir`` that cannot be a writable folder.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    valid = _valid_keys(dataclass_types)
    if "--config" in argv:
        idx = argv.index("--config")
        if idx + 1 >= len(argv):
            raise ConfigError("--config needs a path to a YAML file")
        path = Path(argv[idx + 1])
        if not path.is_file():
            raise ConfigError(f"Config file not found: {path} (expected a YAML file of key: value)")
        try:
            text = read_text(path)
        except MetamodError as err:
            raise ConfigError(str(err)) from err
        data = load_yaml_text(text, path, error=ConfigError) or {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"Config file {path} must contain a YAML mapping of key: value, got {type(data).__name__}"
            )
        unknown = sorted(k for k in data if k not in valid and k not in ("env", "prompts"))
        if unknown:
            raise _unknown_keys_error(unknown, path, valid, moved)
        _activate_config_prompts(data.get("prompts"), path)
    parser = _parser(dataclass_types, prog)
    try:
        outputs = parser.parse_args_and_config(args=argv, return_remaining_strings=True)
    except MetamodError:
        raise
    except (ValueError, TypeError) as err:  # a dataclass's __post_init__ (ours, TRL's, transformers')
        message = str(err) if isinstance(err, ValueError) else f"a config value has the wrong type: {err}"
        raise ConfigError(message) from err
    remaining = _drop_pair(outputs[-1], "--prompts")  # the config file's `prompts:` key, handled above
    if remaining:
        keys = [flag[2:].partition("=")[0] for flag in remaining if flag.startswith("--")]
        note = _moved_keys_note(keys, moved)
        raise ConfigError(
            f"Unknown argument(s) {remaining}{f': {note}' if note else ''}. Valid keys: "
            + ", ".join("--" + k for k in valid)
        )
    for config in outputs[:-1]:
        output_dir = getattr(config, "output_dir", None)
        if isinstance(output_dir, str | os.PathLike) and os.fspath(output_dir):
            check_output_dir(output_dir)
    return tuple(outputs[:-1])


def _parser(dataclass_types: Sequence[type], prog: str | None):
    """A ``TrlParser`` whose errors are one-line :class:`ConfigError`s and whose dict fields read YAML text."""
    from trl import TrlParser

    class _Parser(TrlParser):
        def error(self, message: str):  # argparse would print the usage and exit
            raise ConfigError(f"{message} (see `{self.prog} --help`)")

    parser = _Parser(dataclass_types, prog=prog, allow_abbrev=False)
    for action in parser._actions:
        if action.type is dict or typing.get_origin(action.type) is dict:
            action.type = _MappingArgument(action.dest)
    return parser


class _MappingArgument:
    """argparse ``type`` of a dict field: YAML (or JSON) text of a mapping, e.g. ``--simulation '{sim_seed: 3}'``.

    HfArgumentParser gives dict fields ``type=dict``, and ``dict("{}")`` fails for every string.

    >>> _MappingArgument("task_options")("{arith: {task_limit: 5}}")
    {'arith': {'task_limit': 5}}
    >>> _MappingArgument("simulation")("[1, 2]")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a YAML/JSON mapping such as '{key: value}', got a list: '[1, 2]'
    """

    def __init__(self, name: str):
        self.__name__ = name

    def __call__(self, text: str) -> dict:
        try:
            value = load_yaml_text(text, f"--{self.__name__}")
        except MetamodError as err:
            raise argparse.ArgumentTypeError(f"{err} in {text!r}") from err
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(
                f"expected a YAML/JSON mapping such as '{{key: value}}', got a {type(value).__name__}: {text!r}"
            )
        return value


def check_output_dir(path: str | os.PathLike, *, key: str = "output_dir") -> None:
    """Fail before any work when ``path`` cannot become a folder this user writes to.

    Args:
        path: the output folder (it need not exist yet).
        key: the option that set it, for the message.

    Raises:
        ConfigError: ``path`` (or a parent) is an existing file, or the deepest existing folder is not writable.
    """
    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{key} {os.fspath(path)!r} is an existing file; expected a folder (or a new path)")
    existing = target.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(
            f"{key} {os.fspath(path)!r} cannot be created: {existing} is a file; expected a path under a folder"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{key} {os.fspath(path)!r} is not writable: this user may not write to {existing}; "
            "expected a folder you can write to"
        )


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
    """Merge dataclass configs (or mappings already resolved) into one JSON-serialisable dict (later configs win
    on shared keys).

    When a prompts file is active (``--prompts``), ``prompts_file`` and ``prompts_sha256`` are added, so a run
    resumed under other prompts differs from its saved config.
    """
    from metamod.prompts import prompts_record

    merged: dict[str, Any] = {}
    for cfg in configs:
        if cfg is None:
            continue
        if isinstance(cfg, dict):
            data = cfg
        else:
            data = cfg.to_dict() if hasattr(cfg, "to_dict") else dataclasses.asdict(cfg)
        merged.update(data)
    merged.update(prompts_record())
    return json.loads(json.dumps(merged, default=str))


def save_resolved_config(path: str | os.PathLike, *configs: Any) -> Path:
    """Write the resolved config (after YAML + overrides) as YAML next to a run's outputs."""
    path = Path(path)
    from metamod.files import atomic_write_text  # an atomic write: concurrent shards may save the same file

    return atomic_write_text(path, yaml.safe_dump(config_to_dict(*configs), sort_keys=True))


def setup_logging(level: str | int = "INFO") -> None:
    """Configure root logging for CLI commands (library code only uses ``logging.getLogger(__name__)``)."""
    logging.basicConfig(
        level=level if isinstance(level, int) else getattr(logging, str(level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )


# --------------------------------------------------------------------------------------------- resume fingerprints

#: the file in an output folder that records the settings its outputs were computed with
FINGERPRINT_FILE = ".fingerprint.json"
#: the short lock under which a fingerprint is compared and recorded (concurrent shards of one folder agree)
FINGERPRINT_LOCK = ".fingerprint.lock"
# Keys never hashed (and never stored): credentials do not change results.
_SECRET_MARKERS = ("token", "api_key", "apikey", "secret", "password")


class SettingsMismatchError(ConfigError):
    """An output folder holds outputs computed with other settings (the message names the differing keys)."""


def _is_secret(key: str) -> bool:
    return any(marker in str(key).lower() for marker in _SECRET_MARKERS)


def _canonical(value: Any) -> Any:
    """``value`` as plain JSON (tuples -> lists, paths -> str), without secret-looking keys at any depth."""
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items() if not _is_secret(k)}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return json.loads(json.dumps(value, default=str))


#: config keys whose values name local files or folders (made absolute before hashing, see resolve_local_paths)
PATH_KEYS = frozenset(
    {
        "traces",
        "task_data_files",
        "debater_model",
        "moderator",
        "moderator_base",
        "judge_model",
        "model",
        "adapter",
        "tiny_model_dir",
        "memory_path",
        "dataset_path",
        "model_name_or_path",
    }
)
#: keys whose values map local paths to their content signatures (the mapping's keys are resolved)
_PATH_MAP_KEYS = frozenset({"model_signatures"})


def local_path(value: str, *, force: bool = False) -> str:
    """``value`` as an absolute path when it names a local file or folder; anything else (a Hub id) unchanged.

    Local means: it exists here, or it is written as a path (``./x``, ``/x``, ``~/x``, ``a/b/c``). ``force``
    resolves every value (for comparing two settings written from the same working directory).

    >>> import os
    >>> local_path(".") == os.getcwd(), local_path("org/model"), local_path("runs/x/y") == os.path.abspath("runs/x/y")
    (True, 'org/model', True)
    """
    path = Path(value).expanduser()
    clearly_local = value.startswith((".", "/", "~")) or value.count("/") > 1
    if force or clearly_local or path.exists():
        return str(path.resolve())
    return value


def resolve_local_paths(settings: Any, *, keys: frozenset[str] = PATH_KEYS, force: bool = False) -> Any:
    """``settings`` with every local path under a :data:`PATH_KEYS` key (at any depth) made absolute.

    So ``--traces runs/x/traces.jsonl`` and ``--traces /abs/runs/x/traces.jsonl`` are one setting: a rerun that
    names the same file another way resumes.

    >>> import os
    >>> s = resolve_local_paths({"traces": ".", "task_options": {"t": {"task_data_files": "org/name"}}, "seed": 1})
    >>> s["traces"] == os.getcwd(), s["task_options"], s["seed"]
    (True, {'t': {'task_data_files': 'org/name'}}, 1)
    """

    def fix(key: str | None, value: Any) -> Any:
        if isinstance(value, dict):
            if key in _PATH_MAP_KEYS:
                return {local_path(str(k), force=force): v for k, v in value.items()}
            return {k: fix(str(k), v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [fix(key, v) for v in value]
        if key in keys and isinstance(value, str) and value:
            return local_path(value, force=force)
        return value

    return fix(None, settings)


def resume_settings(resolved: dict[str, Any], free_keys: Sequence[str] | set[str] = ()) -> dict[str, Any]:
    """The settings that change a command's results: ``resolved`` without ``free_keys`` and without credentials.

    >>> resume_settings({"max_rounds": 3, "output_dir": "x", "hub_token": "hf_..."}, free_keys={"output_dir"})
    {'max_rounds': 3}
    """
    free = set(free_keys)
    return _canonical({k: v for k, v in resolved.items() if k not in free})


def settings_fingerprint(settings: dict[str, Any]) -> str:
    """A short stable hash of ``settings`` (key order does not matter; credentials are left out).

    >>> settings_fingerprint({"a": 1, "b": [1, 2]}) == settings_fingerprint({"b": [1, 2], "a": 1})
    True
    >>> len(settings_fingerprint({}))
    16
    """
    text = json.dumps(_canonical(settings), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def settings_diff(saved: dict[str, Any], current: dict[str, Any], *, keys: Sequence[str] | None = None) -> list[str]:
    """The keys whose values differ between two settings mappings (``keys``: compare only these), sorted.

    >>> settings_diff({"max_rounds": 5, "seed": 0}, {"max_rounds": 3, "seed": 0, "top_p": 1.0})
    ['max_rounds', 'top_p']
    """
    saved, current = _canonical(saved), _canonical(current)
    names = set(saved) | set(current) if keys is None else set(keys)
    return sorted(k for k in names if saved.get(k, "<unset>") != current.get(k, "<unset>"))


def _short(value: Any, width: int = 40) -> str:
    text = "unset" if value is _UNSET else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


_UNSET = object()


def describe_diff(saved: dict[str, Any], current: dict[str, Any], keys: Sequence[str], *, limit: int = 6) -> str:
    """``key: old -> new`` for each differing key, on one line (at most ``limit`` keys, then a count).

    >>> describe_diff({"max_rounds": 5}, {"max_rounds": 3}, ["max_rounds"])
    'max_rounds: 5 -> 3'
    """
    parts = [f"{k}: {_short(saved.get(k, _UNSET))} -> {_short(current.get(k, _UNSET))}" for k in list(keys)[:limit]]
    if len(keys) > limit:
        parts.append(f"and {len(keys) - limit} more ({', '.join(list(keys)[limit:])})")
    return "; ".join(parts)


def option_defaults(*configs: Any) -> dict[str, Any]:
    """The default of every field of the given dataclass configs (or classes), for :func:`check_fingerprint`.

    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class Options:
    ...     seed: int = 0
    ...     stop: list = field(default_factory=list)
    ...     model: str = field(default=None)
    >>> option_defaults(Options)
    {'seed': 0, 'stop': [], 'model': None}
    """
    out: dict[str, Any] = {}
    for cfg in configs:
        if cfg is None:
            continue
        for f in dataclasses.fields(cfg):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
    return json.loads(json.dumps(out, default=str))


def read_fingerprint(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The fingerprint record of an output folder (``{"fingerprint", "command", "settings"}``), or ``None``."""
    from metamod.errors import load_json

    path = Path(folder) / FINGERPRINT_FILE
    if not path.is_file():
        return None
    data = load_json(path, what="metamod settings fingerprint (JSON object)")
    if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
        raise ConfigError(f"{path} is not a metamod settings fingerprint; delete it, or use --overwrite true")
    return data


def check_fingerprint(
    folder: str | os.PathLike,
    settings: dict[str, Any],
    *,
    overwrite: bool = False,
    record: bool = False,
    outputs: bool | None = None,
    ignore: Sequence[str] = (),
    defaults: dict[str, Any] | None = None,
    command: str = "metamod",
    what: str = "outputs",
) -> str:
    """Refuse to resume an output folder whose outputs were computed with other settings; optionally record ours.

    The fingerprint of ``settings`` (see :func:`settings_fingerprint`) is kept in ``<folder>/.fingerprint.json``
    with the settings themselves, so a mismatch names the differing keys and both values.

    Args:
        folder: the output folder.
        settings: the settings that change the outputs (see :func:`resume_settings`).
        overwrite: the caller starts over: no comparison (the caller deletes the old outputs).
        record: write our fingerprint (compare + write happen under a short lock, so concurrent shards agree).
        outputs: whether the folder holds outputs to protect (``None``: any non-hidden file or folder in it);
            without any, a stale fingerprint is simply replaced.
        ignore: keys left out of the comparison (e.g. signatures of models not built yet, in an early check).
        defaults: the options' defaults (:func:`option_defaults`): a key the saved settings lack (an option added
            after the folder was recorded) counts as equal when its value here is the default, so such folders
            still resume under their recorded fingerprint (rows keyed by it stay current); a non-default value is
            a difference like any other.
        command: the command name, for the message.
        what: what the folder holds, for the message (e.g. ``"debate traces"``).

    Returns:
        The fingerprint of ``settings``, or the folder's recorded one when they differ only by added options at
        their defaults.

    Raises:
        SettingsMismatchError: one line naming the folder, each differing key (``key: old -> new``) and the two
            ways out (``--overwrite true`` or a new ``--output_dir``).

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> fp = check_fingerprint(folder, {"max_rounds": 5}, record=True)
    >>> check_fingerprint(folder, {"max_rounds": 5}) == fp
    True
    >>> check_fingerprint(folder, {"max_rounds": 3}, outputs=True, what="debate traces")
    Traceback (most recent call last):
    ...
    metamod.config.SettingsMismatchError: ... holds debate traces made with different settings (max_rounds: 5 -> 3); resuming would mix them. Rerun with --overwrite true to start over, or use a new --output_dir

    An option added later, at its default, does not stop the folder from resuming:

    >>> check_fingerprint(folder, {"max_rounds": 5, "new_option": 0}, outputs=True, defaults={"new_option": 0}) == fp
    True
    """
    folder = Path(folder)
    current = _canonical(settings)
    fingerprint = settings_fingerprint(current)
    if outputs is None:
        outputs = folder.is_dir() and any(not p.name.startswith(".") for p in folder.iterdir())
    options = dict(overwrite=overwrite, outputs=outputs, ignore=tuple(ignore), defaults=defaults or {}, what=what)
    if not record:
        return _compare(folder, current, fingerprint, **options)
    from metamod.files import FolderLock

    with FolderLock(folder, name=FINGERPRINT_LOCK, wait=True):
        kept = _compare(folder, current, fingerprint, **options)
        if kept == fingerprint:
            record_fingerprint(folder, current, command=command)
    return kept


def record_fingerprint(folder: str | os.PathLike, settings: dict[str, Any], *, command: str = "metamod") -> str:
    """Write ``<folder>/.fingerprint.json`` for ``settings`` (atomically; unchanged when already equal)."""
    from metamod.files import atomic_write_json

    current = _canonical(settings)
    fingerprint = settings_fingerprint(current)
    saved = read_fingerprint(folder)
    if saved is None or saved.get("fingerprint") != fingerprint:
        record = {"fingerprint": fingerprint, "command": command, "settings": current}
        atomic_write_json(Path(folder) / FINGERPRINT_FILE, record, indent=1, sort_keys=True)
    return fingerprint


def _compare(
    folder: Path,
    current: dict[str, Any],
    fingerprint: str,
    *,
    overwrite: bool,
    outputs: bool,
    ignore: tuple[str, ...],
    defaults: dict[str, Any],
    what: str,
) -> str:
    """Raise unless the folder may be resumed under ``current``; return the fingerprint to resume under."""
    saved = read_fingerprint(folder)
    if overwrite or not outputs:
        return fingerprint
    ways_out = "Rerun with --overwrite true to start over, or use a new --output_dir"
    # paths as written may differ (relative vs absolute): compare them resolved from here
    resolved = resolve_local_paths(current, force=True)
    if saved is not None:
        if saved.get("fingerprint") == fingerprint:
            return fingerprint
        keys = sorted((set(saved["settings"]) | set(current)) - set(ignore))
        differ = settings_diff(resolve_local_paths(saved["settings"], force=True), resolved, keys=keys)
        at_default = {  # options added after the folder was recorded, left at their defaults
            k
            for k in differ
            if k not in saved["settings"] and k in defaults and current.get(k) == _canonical(defaults[k])
        }
        differ = [k for k in differ if k not in at_default]
        if not differ:
            return saved["fingerprint"] if at_default else fingerprint
        diff = describe_diff(saved["settings"], current, differ)
    else:
        raise SettingsMismatchError(
            f"{folder} holds {what} without a settings fingerprint, so they cannot be checked against these "
            f"settings. {ways_out}"
        )
    raise SettingsMismatchError(
        f"{folder} holds {what} made with different settings ({diff}); resuming would mix them. {ways_out}"
    )
