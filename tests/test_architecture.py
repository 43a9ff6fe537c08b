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
