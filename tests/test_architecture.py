"""Architecture as a test: the import-linter contracts of pyproject.toml (layers from the ground up, no cycles)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_layers_import_only_downward_and_nothing_imports_in_a_circle():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is a dev dependency (pip install -e '.[dev]')"
    out = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in out.stdout


def _calls(pattern: str) -> dict[str, int]:
    """``{module path: number of lines}`` of metamod's source lines matching ``pattern`` (docstring examples aside)."""
    import re

    found: dict[str, int] = {}
    for path in sorted((ROOT / "metamod").rglob("*.py")):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if re.search(pattern, line) and not stripped.startswith((">>>", "...", "#", "def ")):
                key = str(path.relative_to(ROOT))
                found[key] = found.get(key, 0) + 1
    return found


def test_every_llm_role_calls_its_generator_through_llmrole():
    """One role type: outside the memory writers (which ask no memory), only LLMRole makes a checked chat call."""
    callers = _calls(r"\bchat_checked\(")
    assert {p for p in callers if not p.startswith("metamod/memory/")} == {"metamod/rollout/roles.py"}, callers


def test_a_memory_is_asked_in_one_place():
    """One guidance path: memory.guidance(...) is called by ask_guidance only (everyone else goes through it)."""
    assert _calls(r"\.guidance\(\s*(GuidanceRequest|request|asked)") == {"metamod/memory/base.py": 1}
