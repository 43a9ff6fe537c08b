"""Prompts are data: every template lives in ``templates.yaml`` and is used by name.

A prompts file (``metamod <command> --prompts my_prompts.yaml``, or :func:`use_prompts`) replaces shipped templates
by name. It is a YAML mapping ``name: template text``; each override must use exactly the placeholders of the
template it replaces. The active file travels in the ``METAMOD_PROMPTS`` environment variable, so subprocesses
(``accelerate launch``, workers) render the same prompts.

>>> "question" in template_fields("single_cot")
True
>>> render("agent_response", index=1, response="4")
'Agent 1: 4'
>>> try:
...     render("nope")
... except KeyError as err:
...     print("Valid names" in str(err))
True
"""

from __future__ import annotations

import hashlib
import logging
import os
import string
from functools import cache, lru_cache
from pathlib import Path

import yaml

from metamod.errors import ConfigError

logger = logging.getLogger(__name__)

_TEMPLATES_FILE = Path(__file__).with_name("templates.yaml")

#: environment variable holding the absolute path of the active prompts file (unset: shipped templates only)
PROMPTS_ENV = "METAMOD_PROMPTS"
#: set by the dispatcher while a prompts file from --prompts / $METAMOD_PROMPTS is in effect (config keys yield)
PROMPTS_FROM_CLI_ENV = "METAMOD_PROMPTS_FROM_CLI"


@cache
def shipped_templates() -> dict[str, str]:
    """The templates shipped in ``templates.yaml``, ignoring any prompts file (loaded once)."""
    data = yaml.safe_load(_TEMPLATES_FILE.read_text())
    return {str(k): str(v) for k, v in data.items()}


def _fields(text: str) -> set[str]:
    """Placeholder names of a template text (``ValueError`` for malformed braces)."""
    return {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}


def active_prompts_file() -> Path | None:
    """The prompts file in effect (from ``METAMOD_PROMPTS``), or ``None`` when only shipped templates are used.

    >>> use_prompts(None); active_prompts_file() is None
    True
    """
    value = os.environ.get(PROMPTS_ENV, "").strip()
    return Path(value) if value else None


def load_prompts_file(path: str | os.PathLike) -> dict[str, str]:
    """Read and validate a prompts file: ``{template name: text}`` for the templates it overrides.

    Args:
        path: a YAML file mapping shipped template names to replacement texts.

    Returns:
        The overrides by name (validated; cached per file path and modification time).

    Raises:
        ConfigError: a missing file, invalid YAML (with its line), a non-mapping document, an unknown template
            name (listing the valid ones), a non-text value, or an override whose placeholders differ from the
            shipped template's (naming the template, the file and the expected fields).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
    ...     _ = f.write("agent_response: 'Debater {index} said: {response}'")
    >>> load_prompts_file(f.name)
    {'agent_response': 'Debater {index} said: {response}'}
    >>> os.unlink(f.name)
    """
    path = Path(path).expanduser().resolve()
    try:
        stat = path.stat()
    except OSError as err:
        raise ConfigError(f"prompts file not found: {path} ({err.strerror})") from err
    if not path.is_file():
        raise ConfigError(f"prompts file {path} is not a file")
    return dict(_load_validated(str(path), stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=16)
def _load_validated(path: str, mtime_ns: int, size: int) -> dict[str, str]:
    """Cached by (path, mtime, size), so an edited file is re-read and a switched file never serves stale text."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"prompts file {where}: not valid YAML ({problem})") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"prompts file {path} is not UTF-8 text ({err.reason})") from err
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"prompts file {path} must be a YAML mapping of template name: template text, got {got}")
    shipped = shipped_templates()
    overrides: dict[str, str] = {}
    for name, text in data.items():
        if name not in shipped:
            raise ConfigError(
                f"prompts file {path}: unknown template name {name!r}. Valid names: {', '.join(sorted(shipped))}"
            )
        if not isinstance(text, str):
            raise ConfigError(
                f"prompts file {path}: template {name!r} must be text (a YAML string, e.g. a `|-` block), "
                f"got {type(text).__name__}"
            )
        overrides[name] = _check_override(name, text, path)
    return overrides


def _check_override(name: str, text: str, path: str) -> str:
    expected = sorted(_fields(shipped_templates()[name]))
    hint = f"Expected exactly the placeholders {expected} (write literal braces as {{{{ and }}}})."
    try:
        got = _fields(text)
    except ValueError as err:
        raise ConfigError(f"prompts file {path}: template {name!r} has malformed braces ({err}). {hint}") from err
    missing, extra = sorted(set(expected) - got), sorted(got - set(expected))
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"is missing placeholder(s) {missing}")
        if extra:
            problems.append(f"has unknown placeholder(s) {extra}")
        raise ConfigError(f"prompts file {path}: template {name!r} {' and '.join(problems)}. {hint}")
    try:
        text.format(**{field: "x" for field in expected})
    except (ValueError, IndexError, KeyError, AttributeError) as err:
        raise ConfigError(f"prompts file {path}: template {name!r} cannot be filled ({err}). {hint}") from err
    return text


def use_prompts(path: str | os.PathLike | None) -> Path | None:
    """Validate a prompts file and make it the active one for this process and its subprocesses.

    Args:
        path: the prompts file, or ``None`` to go back to the shipped templates.

    Returns:
        The absolute path now in effect (``None`` for the shipped templates).

    Raises:
        ConfigError: see :func:`load_prompts_file`; nothing changes then.
    """
    if path is None:
        os.environ.pop(PROMPTS_ENV, None)
        return None
    resolved = Path(path).expanduser().resolve()
    overrides = load_prompts_file(resolved)
    os.environ[PROMPTS_ENV] = str(resolved)
    logger.info("Prompts: %d template(s) replaced from %s (%s)", len(overrides), resolved, ", ".join(overrides))
    return resolved


def prompts_record() -> dict[str, str]:
    """What a run records about its prompts: ``{"prompts_file", "prompts_sha256"}`` when a file is active, else ``{}``.

    >>> use_prompts(None); prompts_record()
    {}
    """
    path = active_prompts_file()
    if path is None:
        return {}
    load_prompts_file(path)  # fails clearly on a file that went missing or bad
    return {"prompts_file": str(path), "prompts_sha256": prompts_sha256(path)}


def prompts_sha256(path: str | os.PathLike) -> str:
    """The content hash a run records for a prompts file (``prompts_sha256``)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def templates() -> dict[str, str]:
    """All templates by name: the shipped ones, with those of the active prompts file (if any) replaced."""
    path = active_prompts_file()
    if path is None:
        return shipped_templates()
    return {**shipped_templates(), **load_prompts_file(path)}


def get_template(name: str, *, shipped: bool = False) -> str:
    """The text of template ``name`` (``shipped=True``: ignore the active prompts file)."""
    table = shipped_templates() if shipped else templates()
    if name not in table:
        valid = ", ".join(sorted(table))
        raise KeyError(f"Unknown prompt template {name!r}. Valid names: {valid}")
    return table[name]


def template_fields(name: str, *, shipped: bool = False) -> set[str]:
    """The placeholder names a template expects (an override always expects the same ones)."""
    return _fields(get_template(name, shipped=shipped))


def render(name: str, /, **values: object) -> str:
    """Fill template ``name``; a missing placeholder fails with the template's expected fields."""
    template = get_template(name)
    missing = template_fields(name) - set(values)
    if missing:
        raise KeyError(f"Prompt template {name!r} needs {sorted(missing)}; got {sorted(values)}")
    return template.format(**values)


def format_responses(responses: list[str], *, shipped: bool = False) -> str:
    """Number a list of agent responses (``Agent 1: ...``), one block per agent.

    Args:
        responses: the responses, in agent order.
        shipped: use the shipped ``agent_response`` template even when a prompts file replaces it.

    >>> print(format_responses(["x", "y"]))
    Agent 1: x
    <BLANKLINE>
    Agent 2: y
    """
    template = get_template("agent_response", shipped=shipped)
    return "\n\n".join(template.format(index=i + 1, response=r.strip()) for i, r in enumerate(responses))
