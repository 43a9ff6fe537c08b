"""``metamod <command> --config x.yaml [--key value ...]``: one thin dispatcher over the command modules.

Each command lives in its own module as ``main(argv: list[str] | None) -> int``; the table below is the only
place that names them, and ``metamod --help`` is generated from it.

Errors: an anticipated failure (see :mod:`metamod.errors`) ends with exit code 2 and one line on stderr,
``metamod <command>: error: <message>``; ``--debug`` (or ``METAMOD_DEBUG=1``) raises it instead, with its
traceback. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys

from metamod.config import ConfigError, setup_logging
from metamod.errors import anticipated_message
from metamod.prompts import PROMPTS_ENV, PROMPTS_FROM_CLI_ENV, active_prompts_file, use_prompts
from metamod.registry import import_dotted

#: command -> (entry point, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "rollout": ("metamod.rollout.run:main", "generate debate traces (simulated or LLM debaters) -> traces.jsonl"),
    "merge-shards": ("metamod.rollout.merge:merge_main", "merge sharded traces.jsonl files into one"),
    "build-dataset": ("metamod.rollout.snapshots:main", "turn traces into the moderator dataset (eta labels)"),
    "train": ("metamod.train.grpo:main", "train the moderator with TRL GRPO + LoRA"),
    "export": ("metamod.train.export:main", "export an adapter (+ model card, merged weights) locally or to the Hub"),
    "eval": ("metamod.evaluate.harness:main", "evaluate decision layers and baselines on shared debate transcripts"),
    "view": ("metamod.evaluate.view:main", "write one self-contained HTML page to read a run's debates -> view.html"),
    "demo": ("metamod.demo:main", "the whole pipeline on the embedded SmolLM2 model (CPU; --world simulated: fast)"),
    "model": (
        "metamod.llm.model_cli:main",
        "prepare / locate the embedded SmolLM2-135M-Instruct model (once); serve it with llama.cpp",
    ),
    "mine-behaviours": (
        "metamod.memory.cheatsheet.mine:main",
        "solve -> reflect -> extract reasoning behaviours -> behaviours.jsonl",
    ),
    "sweep": (
        "metamod.evaluate.sweep:main",
        "run one eval config over the values of one setting -> sweep.json + plots",
    ),
    "shape-run": (
        "metamod.shape_run:main",
        "run a paper config end to end on a CPU: tiny model, fixture data, the config's own budgets",
    ),
    "fit-cheatsheet": (
        "metamod.memory.cheatsheet.fit:main",
        "fit the Bayesian Cheatsheet (PCA, projector, HDP-GMM) on mined behaviours",
    ),
}


def _usage() -> str:
    lines = ["usage: metamod <command> [--config file.yaml] [--key value ...]", "", "commands:"]
    lines += [f"  {name:<14} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += [
        "",
        "global options (any command, before or after it):",
        "  --prompts file.yaml  replace prompt templates by name (YAML name: text; same placeholders as shipped;",
        "                       see docs/contracts.md, Prompts). Also read from $METAMOD_PROMPTS.",
        "  --debug              show the traceback of an error instead of the one-line message (or METAMOD_DEBUG=1)",
        "",
        "`metamod <command> --help` lists every option of a command.",
    ]
    return "\n".join(lines)


def _pop_prompts(argv: list[str]) -> tuple[str | None, list[str]]:
    """Remove the global ``--prompts PATH`` (or ``--prompts=PATH``) from ``argv``; the last one given wins.

    >>> _pop_prompts(["rollout", "--prompts", "p.yaml", "--seed", "1"])
    ('p.yaml', ['rollout', '--seed', '1'])
    >>> _pop_prompts(["--prompts=p.yaml", "eval"])
    ('p.yaml', ['eval'])
    """
    path, rest, i = None, [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--prompts":
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                raise ConfigError("--prompts needs a path to a YAML file of prompt templates")
            path, i = argv[i + 1], i + 2
            continue
        if arg.startswith("--prompts="):
            path = arg.split("=", 1)[1]
            if not path:
                raise ConfigError("--prompts needs a path to a YAML file of prompt templates")
        else:
            rest.append(arg)
        i += 1
    return path, rest


def _pop_debug(argv: list[str]) -> tuple[bool, list[str]]:
    """Remove the global ``--debug`` flag from ``argv``: before the command, or after it when no value follows.

    ``--debug VALUE`` after the command is left to the command (``metamod train --debug underflow_overflow`` is
    the transformers option).

    >>> _pop_debug(["--debug", "eval", "--limit", "3"])
    (True, ['eval', '--limit', '3'])
    >>> _pop_debug(["eval", "--debug", "--limit", "3"])
    (True, ['eval', '--limit', '3'])
    >>> _pop_debug(["train", "--debug", "underflow_overflow"])
    (False, ['train', '--debug', 'underflow_overflow'])
    """
    rest, found, seen_command = [], False, False
    for i, arg in enumerate(argv):
        takes_value = seen_command and i + 1 < len(argv) and not argv[i + 1].startswith("--")
        if arg == "--debug" and not takes_value:
            found = True
            continue
        seen_command = seen_command or not arg.startswith("-")
        rest.append(arg)
    return found, rest


def _fail(command: str | None, message: str) -> int:
    print(f"metamod{' ' + command if command else ''}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = os.environ.get("METAMOD_DEBUG", "") not in ("", "0")
    try:
        prompts, argv = _pop_prompts(argv)
    except ConfigError as err:
        if debug or "--debug" in argv:
            raise
        return _fail(None, str(err))
    flag, argv = _pop_debug(argv)
    debug = debug or flag
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        return _fail(None, f"unknown command {command!r}. Valid commands: {', '.join(COMMANDS)}")
    setup_logging()
    previous_prompts = os.environ.get(PROMPTS_ENV)
    explicit = prompts is not None or previous_prompts is not None
    if explicit:  # a prompts file given here (or by $METAMOD_PROMPTS) wins over a config file's `prompts:` key
        os.environ[PROMPTS_FROM_CLI_ENV] = "1"
    try:
        # Validate the prompts file before any work; the environment variable carries it into subprocesses.
        try:
            use_prompts(prompts if prompts is not None else active_prompts_file())
        except ConfigError as err:
            raise ConfigError(f"{err} (set by ${PROMPTS_ENV})" if prompts is None else str(err)) from err
        entry = import_dotted(COMMANDS[command][0])
        return int(entry(rest) or 0)
    except Exception as err:
        message = anticipated_message(err)
        if debug or message is None:  # --debug, or a bug: the traceback
            raise
        return _fail(command, message)
    except KeyboardInterrupt:
        print(f"metamod {command}: interrupted; outputs written so far are kept and a rerun resumes.", file=sys.stderr)
        return 130
    finally:  # in-process callers (tests, the demo's stages) get their environment back
        if explicit:
            os.environ.pop(PROMPTS_FROM_CLI_ENV, None)
        if previous_prompts is None:
            os.environ.pop(PROMPTS_ENV, None)
        else:
            os.environ[PROMPTS_ENV] = previous_prompts


if __name__ == "__main__":
    sys.exit(main())
