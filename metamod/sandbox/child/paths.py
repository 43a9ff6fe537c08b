"""Inside the sandbox: path helpers without ``os.path`` (importing ``os`` costs ~2 ms), and the readable paths.

It runs inside the sandbox (bundled by :mod:`metamod.sandbox.launcher`): builtin modules only, never ``os``.

>>> realpath("/usr/./lib/../lib") == realpath("/usr/lib")
True
>>> isdir("/"), exists("/no/such/path")
(True, False)
"""

import posix as os
import sys

SYSTEM_READ_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/localtime")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full")


def exists(path):
    try:
        os.stat(path)
        return True
    except (OSError, ValueError):
        return False


def isdir(path):
    try:
        return os.stat(path).st_mode & 0o170000 == 0o040000
    except (OSError, ValueError):
        return False


def realpath(path):
    """``path`` absolute, with every symlink and ``..`` resolved (like ``os.path.realpath``; missing parts are
    kept as they are); None for a symlink loop."""
    if not path.startswith("/"):
        path = os.getcwd() + "/" + path
    todo, done, links = [p for p in path.split("/") if p], [], 0
    while todo:
        name = todo.pop(0)
        if name == ".":
            continue
        if name == "..":
            if done:
                done.pop()
            continue
        here = "/" + "/".join(done + [name])
        try:
            is_link = os.lstat(here).st_mode & 0o170000 == 0o120000
        except OSError:
            is_link = False
        if not is_link:
            done.append(name)
            continue
        links += 1
        if links > 40:
            return None
        target = os.readlink(here)
        if target.startswith("/"):
            done = []
        todo = [p for p in target.split("/") if p] + todo
    return "/" + "/".join(done)


def read_roots(job):
    """The paths user code may read: the Python install, system libraries, devices and ``job["read_paths"]``."""
    if not job["hide_host_files"]:
        return ["/"]
    return existing([*install_paths(job), *SYSTEM_READ_PATHS])


def install_paths(job):
    """The Python install the sandbox needs whatever it may read (the interpreter imports from it lazily), and the
    ``read_paths`` asked for: existing, resolved, each once."""
    return existing([sys.base_prefix, sys.prefix, *[p for p in sys.path if p], *job["read_paths"]])


def existing(paths):
    """``paths`` resolved, without missing ones and repeats, in order."""
    seen, out = set(), []
    for path in paths:
        path = realpath(path)
        if path is not None and path not in seen and exists(path):
            seen.add(path)
            out.append(path)
    return out
