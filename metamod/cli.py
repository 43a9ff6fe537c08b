"""``metamod <command> --config x.yaml [--key value ...]``: one thin dispatcher over the command modules.

Each command lives in its own module as ``main(argv: list[str] | None) -> int``; the table below is the only
place that names them, and ``metamod --help`` is generated from it.
"""

from __future__ import annotations

import os
import sys

from metamod.config import ConfigError, setup_logging
from metamod.registry import import_dotted

#: command -> (entry point, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "rollout": ("metamod.rollout.run:main", "generate debate traces (simulated or LLM debaters) -> traces.jsonl"),
    "merge-shards": ("metamod.rollout.run:merge_main", "merge sharded traces.jsonl files into one"),
    "build-dataset": ("metamod.rollout.snapshots:main", "turn traces into the moderator dataset (eta labels)"),
    "train": ("metamod.train.grpo:main", "train the moderator with TRL GRPO + LoRA"),
    "export": ("metamod.train.export:main", "export an adapter (+ model card, merged weights) locally or to the Hub"),
    "eval": ("metamod.evaluate.harness:main", "evaluate decision layers and baselines on shared debate transcripts"),
    "demo": ("metamod.demo:main", "the whole pipeline on the embedded default (CPU, simulated)"),
}


def _usage() -> str:
    lines = ["usage: metamod <command> [--config file.yaml] [--key value ...]", "", "commands:"]
    lines += [f"  {name:<14} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "`metamod <command> --help` lists every option of a command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"metamod: unknown command {command!r}. Valid commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    setup_logging()
    entry = import_dotted(COMMANDS[command][0])
    try:
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


if __name__ == "__main__":
    sys.exit(main())
