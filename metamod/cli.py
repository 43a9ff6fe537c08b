"""``metamod <command> --config x.yaml [--key value ...]``: one thin dispatcher over the command modules.

Each command lives in its own module as ``main(argv: list[str] | None) -> int``; the table below is the only
place that names them, and ``metamod --help`` is generated from it.
"""

from __future__ import annotations

import os
import sys

from metamod.config import ConfigError, setup_logging
from metamod.prompts import PROMPTS_ENV, PROMPTS_FROM_CLI_ENV, active_prompts_file, use_prompts
from metamod.registry import import_dotted

#: command -> (entry point, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "rollout": ("metamod.rollout.run:main", "generate debate traces (simulated or LLM debaters) -> traces.jsonl"),
    "merge-shards": ("metamod.rollout.run:merge_main", "merge sharded traces.jsonl files into one"),
    "build-dataset": ("metamod.rollout.snapshots:main", "turn traces into the moderator dataset (eta labels)"),
    "train": ("metamod.train.grpo:main", "train the moderator with TRL GRPO + LoRA"),
    "export": ("metamod.train.export:main", "export an adapter (+ model card, merged weights) locally or to the Hub"),
    "eval": ("metamod.evaluate.harness:main", "evaluate decision layers and baselines on shared debate transcripts"),
    "demo": ("metamod.demo:main", "the whole pipeline on the embedded SmolLM2 model (CPU; --world simulated: fast)"),
    "model": ("metamod.llm.embedded:main", "prepare / locate the embedded SmolLM2-135M-Instruct model (once)"),
}


def _usage() -> str:
    lines = ["usage: metamod <command> [--config file.yaml] [--key value ...]", "", "commands:"]
    lines += [f"  {name:<14} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += [
        "",
        "global option (any command, before or after it):",
        "  --prompts file.yaml  replace prompt templates by name (YAML name: text; same placeholders as shipped;",
        "                       see docs/contracts.md, Prompts). Also read from $METAMOD_PROMPTS.",
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        prompts, argv = _pop_prompts(argv)
    except ConfigError as err:
        print(f"metamod: config error: {err}", file=sys.stderr)
        return 2
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"metamod: unknown command {command!r}. Valid commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
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
    except ConfigError as err:
        print(f"metamod {command}: config error: {err}", file=sys.stderr)
        return 2
    except (FileNotFoundError, KeyError, ValueError) as err:
        if os.environ.get("METAMOD_DEBUG"):
            raise
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"metamod {command}: error: {message}  (set METAMOD_DEBUG=1 for a traceback)", file=sys.stderr)
        return 2
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
