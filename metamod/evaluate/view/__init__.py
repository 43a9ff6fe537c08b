"""``metamod view RUN_DIR [--output FILE]``: one self-contained HTML page to read an eval's or a rollout's debates.

The page (no server, no network: it opens from disk) lists the questions with filters (task, method, correct or
wrong for the chosen method, debaters disagreeing at round 0, the method's stop round, a text search) and a count
of the rows shown; selecting a question shows its debate round by round: each agent's text, extracted answer and
tokens, ``eta``, each method's decision at that round (CONTINUE/STOP, its answer, format-valid, ``P(STOP)`` when the
decision recorded ``p_stop``), the memory items served, and each method's final answer and correctness. Filters
are kept in the URL fragment (``view.html#method=moderator&correct=wrong&stop=1``), so a filtered view is a link.

:mod:`.data` reads the folder, :mod:`.page` renders the page.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from metamod.errors import ConfigError
from metamod.files import atomic_write_text

from ..cells import VIEW_FILE
from .data import load_run
from .page import render_page

logger = logging.getLogger(__name__)


def write_view(run_dir: str | Path, output: str | Path | None = None) -> Path:
    """Write the viewer page of ``run_dir`` to ``output`` (default ``run_dir/view.html``); returns its path.

    >>> import json, pathlib, tempfile
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (run / "traces.jsonl").write_text(json.dumps({"id": "q", "task": "t", "rounds": []}) + "\\n")
    >>> write_view(run).name
    'view.html'
    """
    run_dir = Path(run_dir)
    document = load_run(run_dir)
    path = Path(output) if output is not None else run_dir / VIEW_FILE
    title = f"metamod {document['kind']}: {run_dir.resolve().name}" + (" (simulated)" if document["simulated"] else "")
    atomic_write_text(path, render_page(document, title=title))
    logger.info("wrote %s (%d questions)", path, len(document["questions"]))
    return path


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one-line :class:`ConfigError`s (exit 2 through the dispatcher, no usage block)."""

    def error(self, message: str):
        raise ConfigError(f"{message} (see `metamod view --help`)")


def main(argv: list[str] | None = None) -> int:
    """``metamod view RUN_DIR [--output FILE]``."""
    parser = _Parser(prog="metamod view", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="An eval output folder (samples.jsonl) or a rollout one (traces.jsonl).")
    parser.add_argument("--output", default=None, help="Where the HTML page goes (default RUN_DIR/view.html).")
    args = parser.parse_args(argv)
    path = write_view(args.run_dir, args.output)
    print(f"wrote {path} (open it in a browser; it needs no server)")
    return 0
