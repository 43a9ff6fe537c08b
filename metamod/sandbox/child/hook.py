"""Inside the sandbox: the audit hook, installed just before the code runs (it can never be removed).

It runs inside the sandbox (bundled by :mod:`metamod.sandbox.launcher`): builtin modules only, never ``os``.
Defence in depth where the kernel confines the code (namespaces, Landlock, seccomp), and the only guard where it
cannot: it refuses running programs, sockets, ctypes, heap walking, and file changes outside the work dir; without
Landlock also reads outside the readable paths and folder fds outside the work dir (which ``dir_fd=`` calls could
use to get past the path checks); without PID namespace also fork and kill.

>>> hook = make_hook("/w", ["/usr"], namespaces=True, landlock=True, seccomp=True)
>>> hook("os.system", (b"id",))
Traceback (most recent call last):
...
PermissionError: sandbox: os.system is not allowed
>>> hook("open", ("/w/out.txt", "w", 577)) is None
True
"""

import posix as os

from metamod.sandbox.child.paths import DEVICES, isdir, realpath

# audit events refused in every mode, and the prefixes refused in every mode
BLOCKED = frozenset(
    (
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.forkpty",
        "subprocess.Popen",
        "pty.spawn",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "os.startfile",
        "webbrowser.open",
        "sys.remote_exec",
    )
)
BLOCKED_PREFIXES = ("ctypes.", "socket.", "_ssl.", "mmap.")
# refused only where there is no PID namespace (and so no process limit of the sandbox's own)
BLOCKED_WITHOUT_NAMESPACES = frozenset(("os.fork", "os.kill", "os.killpg", "signal.pthread_kill"))
# re-importing _ctypes would give fresh, unaudited-by-us handles; _posixsubprocess forks and execs with no audit
# event (harmless under Landlock, which refuses every exec)
BLOCKED_IMPORTS = frozenset(("_ctypes",))
BLOCKED_IMPORTS_WITHOUT_LANDLOCK = frozenset(("_ctypes", "_posixsubprocess"))
# audit events that name paths the code changes: event -> argument positions of those paths
WRITE_PATH_EVENTS = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.rename": (0, 1),
    "os.mkdir": (0,),
    "os.symlink": (1,),
    "os.link": (0, 1),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
    "os.chflags": (0,),
    "os.lchflags": (0,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
    "shutil.rmtree": (0,),
    "shutil.copyfile": (1,),
    "shutil.copytree": (1,),
    "shutil.move": (0, 1),
    "sqlite3.connect": (0,),
}
READ_PATH_EVENTS = {"os.listdir": (0,), "os.scandir": (0,), "glob.glob": (0,)}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
O_DIRECTORY = os.O_DIRECTORY


def make_hook(workdir, roots, *, namespaces, landlock, seccomp):
    """The audit hook: refuses process creation, sockets, ctypes, and file changes outside ``workdir`` (and, without
    Landlock, reads outside ``roots``). Everything it needs is captured here; it cannot be removed."""
    fspath = os.fspath
    inside_roots = (workdir,) + tuple(roots) + DEVICES
    blocked = BLOCKED if namespaces else BLOCKED | BLOCKED_WITHOUT_NAMESPACES
    check_reads = not landlock and "/" not in roots
    blocked_imports = BLOCKED_IMPORTS if landlock else BLOCKED_IMPORTS_WITHOUT_LANDLOCK
    guard_folders = not landlock

    def within(path, bases):
        if isinstance(path, int):  # an fd the code already holds
            return True
        try:
            path = fspath(path)
            path = realpath(path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path)
        except (TypeError, ValueError):
            return False
        return path is not None and any(path == b or path.startswith(b + "/") or b == "/" for b in bases)

    def refuse(event, detail=""):
        raise PermissionError(f"sandbox: {event} is not allowed{detail}")

    def hook(event, args):
        if event == "socket.__new__" and seccomp and args[1] == 1:
            return  # AF_UNIX under seccomp, where socket() itself is refused: only socketpair() makes these
        if event in blocked or event.startswith(BLOCKED_PREFIXES):
            refuse(event)
        if event == "open":
            path, _, flags = args
            if flags & WRITE_FLAGS:
                if not within(path, (workdir, "/dev/null")):
                    refuse("writing", f" outside the work dir: {path!r}")
            elif check_reads and not within(path, inside_roots):
                refuse("reading", f" outside the allowed paths: {path!r}")
            if guard_folders and not isinstance(path, int) and (flags & O_DIRECTORY or isdir(path)):
                if not within(path, (workdir,)):  # its fd would let dir_fd= calls reach past these path checks
                    refuse("opening a folder", f" outside the work dir: {path!r}")
            return
        if event == "import":
            if args[0] in blocked_imports:
                refuse(f"import {args[0]}")
            return
        positions = WRITE_PATH_EVENTS.get(event)
        if positions is not None:
            for i in positions:
                if i < len(args) and args[i] != ":memory:" and not within(args[i], (workdir,)):
                    refuse(event, f" outside the work dir: {args[i]!r}")
            return
        if check_reads and event in READ_PATH_EVENTS:
            path = args[0] if args and args[0] is not None else "."
            if not within(path, inside_roots):
                refuse(event, f" outside the allowed paths: {path!r}")

    return hook
