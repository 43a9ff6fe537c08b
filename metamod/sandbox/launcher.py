"""How the host starts the in-sandbox launcher: interpreter flags and one precompiled bundle of its modules.

The launcher is the package :mod:`metamod.sandbox.child` (``launch`` and the modules it imports). Compiling them
takes 10-20 ms, as long as the interpreter's own start-up, so the host compiles them once per process into one
``.pyc`` (:func:`launcher_bytecode`, cached) and writes it into each run's work dir. The ``.pyc``'s code is a tiny
bootstrap: it registers each bundled module under its usual name (``metamod``, ``metamod.sandbox`` and
``metamod.sandbox.child`` as empty stand-in packages, so nothing of the real package is imported) and calls
``metamod.sandbox.child.launch.cli(argv)``.
The child runs ``python -I -S -B <work dir>/.launcher.pyc <job file>``.

>>> launcher_bytecode()[:4] == importlib.util.MAGIC_NUMBER
True
>>> command("/w/.launcher.pyc", "/w/.job")[1:]
['-I', '-S', '-B', '/w/.launcher.pyc', '/w/.job']
"""

from __future__ import annotations

import functools
import importlib.util
import marshal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / "child"
BUNDLED = ("codec", "paths", "kernel", "hook", "launch")  # in import order
PYTHON_FLAGS = ("-I", "-S", "-B")  # isolated (no PYTHON* env vars, no user site, no script dir), no site, no .pyc
PYC_NAME = ".launcher.pyc"
BOOTSTRAP = """
import marshal, sys
for _name in ("metamod", "metamod.sandbox", "metamod.sandbox.child"):
    sys.modules[_name] = type(sys)(_name)
    sys.modules[_name].__path__ = []
for _name, _path, _code in marshal.loads(BUNDLE):
    _module = sys.modules[_name] = type(sys)(_name)
    _module.__file__ = _path
    exec(_code, _module.__dict__)
del _name, _path, _code, _module
sys.modules["metamod.sandbox.child.launch"].cli(sys.argv[1:])
"""


@functools.lru_cache(maxsize=1)
def launcher_bytecode() -> bytes:
    """The launcher bundle as the bytes of a ``.pyc`` file for this interpreter (built once per host process)."""
    modules = []
    for name in BUNDLED:
        path = HERE / f"{name}.py"
        code = compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
        modules.append((f"metamod.sandbox.child.{name}", str(path), code))
    source = f"BUNDLE = {marshal.dumps(tuple(modules))!r}\n" + BOOTSTRAP
    code = compile(source, "<sandbox launcher>", "exec", dont_inherit=True)
    header = importlib.util.MAGIC_NUMBER + bytes(12)  # flags 0, then a source mtime and size nobody checks
    return header + marshal.dumps(code)


def write_launcher(folder: str) -> str:
    """Write the launcher ``.pyc`` into ``folder``; returns its path."""
    path = str(Path(folder) / PYC_NAME)
    with open(path, "wb") as f:
        f.write(launcher_bytecode())
    return path


def command(script: str, *args: str) -> list[str]:
    """The argv that runs ``script`` (a ``.pyc`` path) in a fresh isolated interpreter."""
    return [sys.executable, *PYTHON_FLAGS, script, *args]
