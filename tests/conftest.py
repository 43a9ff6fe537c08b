"""Shared test settings: one torch thread (2-core machines thrash otherwise), offline hubs, no trackers, no prompts
file leaking between tests; and the one tiny model of the session (``tiny_model_dir``)."""

import os
import shutil
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _prompts_file_does_not_leak():
    """A test that parses a config naming a prompts file (``prompts:``) activates it process-wide; restore the
    prompts in effect before the test, so later tests see the shipped templates."""
    from metamod.prompts import PROMPTS_ENV, PROMPTS_FROM_CLI_ENV

    saved = {k: os.environ.get(k) for k in (PROMPTS_ENV, PROMPTS_FROM_CLI_ENV)}
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """THE offline tiny model (``build_tiny_model`` defaults, seed 0), built once per test session and shared.

    Treat it as read-only: a test that writes into the model folder must use :func:`tiny_model_copy`. The folder
    is compared with its state after the build at the end of the session, so a test that changes it is caught.
    """
    from metamod.llm.tiny import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny_session") / "model", seed=0)
    before = _listing(path)
    yield path
    assert _listing(path) == before, f"a test modified the shared tiny model in {path}; use tiny_model_copy"


@pytest.fixture
def tiny_model_copy(tiny_model_dir, tmp_path) -> Path:
    """A private copy of the shared tiny model, for tests that modify the model folder."""
    return Path(shutil.copytree(tiny_model_dir, tmp_path / "tiny_model"))
