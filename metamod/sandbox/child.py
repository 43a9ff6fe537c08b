"""The launcher that runs INSIDE every fresh sandbox process, before and around the user's code.

The host starts ``python -I -S -B .launcher.pyc <job file>`` in a new session with an empty environment and the
throwaway work directory as its current directory; the ``.pyc`` bundles this module and the ``child_*`` modules it
uses (:mod:`metamod.sandbox.launcher`). They use builtin modules only (no ``os``, ``ctypes``, ``json``, ``re``,
``enum``, ``signal`` or ``ast``: importing those would double the start-up time) and never the rest of ``metamod``.
In order, the launcher:

1. reads the job (a ``marshal`` file the host wrote into the work dir) and deletes it and its own ``.pyc``;
2. prepares a Landlock ruleset (writes only under the work dir, reads only from the Python install and system
   libraries unless told otherwise, nothing executable, no TCP, no signals outside the sandbox), opening its paths
   while it still may;
3. when started as root, makes the sandbox uid (65534) its real uid, so that ``RLIMIT_NPROC`` applies;
4. enters new user, network and PID namespaces (``unshare``), maps its own uid, drops every capability, sets
   ``no_new_privs`` and a seccomp filter (x86_64); then applies the Landlock ruleset and the resource limits, and
   asks to be killed when the host dies;
5. forks the process that runs the user's code: it is PID 1 of the new PID namespace, so when it ends, or when its
   parent (this launcher, which the host kills on timeout) dies, the kernel kills every process it left behind;
6. installs an audit hook (defence in depth, and the only file / process guard where Landlock or namespaces are
   missing) and runs the code: a whole program (``python`` mode) or a function on each input (``function`` mode).

Everything the host must learn (what isolation is active, per-call results, why the code stopped) travels as JSON
lines on a dedicated pipe, each prefixed with the job's random nonce; stdout and stderr belong to the user's code.
Values are encoded with exact tags (tuple, set, bytes ...) so the HOST decodes them and compares them with the
expected outputs, which therefore never enter the sandbox.

With ``--probe`` it only reports what the platform allows (``key=value`` lines) and changes nothing.
"""

import marshal
import posix as os
import sys

from metamod.sandbox.child_codec import Channel, Unencodable, encode, js, literal, short_error
from metamod.sandbox.child_hook import make_hook
from metamod.sandbox.child_kernel import (
    PR_SET_PDEATHSIG,
    SIGKILL,
    Libc,
    drop_privileges,
    enter_namespaces,
    isolate,
    landlock_abi,
)

PACKAGE_DIR = (lambda: 0).__code__.co_filename.rsplit("/", 1)[0] + "/"  # frames from here are the launcher's


class CallTimeout(BaseException):
    """Raised in the user's function by the per-call timer."""


def on_alarm(signum, frame):
    raise CallTimeout


def load(job):
    """The user's code compiled as ``main.py`` of a fresh ``__main__`` module (which replaces this launcher's)."""
    path = job["workdir"] + "/main.py"
    module = type(sys)("__main__")
    module.__file__ = path
    sys.modules["__main__"], sys.argv = module, [path]
    sys.path.insert(0, job["workdir"])
    return compile(job["code"], path, "exec", dont_inherit=True), module.__dict__


def reason_of(exc):
    """The stop reason the host reports for an uncaught exception."""
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, RecursionError):
        return "recursion"
    if isinstance(exc, OSError) and exc.errno == 27:  # EFBIG: RLIMIT_FSIZE (Python ignores SIGXFSZ)
        return "file_size"
    return "error"


def user_traceback(exc):
    """``exc``'s traceback without this launcher's frames (the audit hook's among them)."""
    frames, tb = [], exc.__traceback__
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(PACKAGE_DIR):
            frames.append(tb)
        tb = tb.tb_next
    for tb, after in zip(frames, frames[1:] + [None], strict=True):
        tb.tb_next = after
    head = frames[0] if frames else None
    exc.__traceback__ = head  # the C excepthook prints the exception's own traceback
    return head


def finish(status):
    """End the process as the interpreter would (non-daemon threads joined, atexit functions run, stdio flushed)
    but without its teardown, which costs ~10 ms. Objects' ``__del__`` at shutdown is what is skipped."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:  # as at a normal exit: a failing thread join does not change the status
            pass
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # a closed or broken stream: nothing left to save
            pass
    os._exit(status)


def exit_status(exc):
    """The exit status of ``raise SystemExit(code)``, printing a non-int code to stderr as Python does."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except BaseException:  # an unprintable exit message
        pass
    return 1


def run_program(job, chan):
    """``python`` mode: the code as a script; an uncaught exception is printed and reported, exit status 1."""
    try:
        code, namespace = load(job)
        exec(code, namespace)
    except SystemExit as exc:
        finish(exit_status(exc))
    except BaseException as exc:
        chan.send('{"k":"exit","reason":"' + reason_of(exc) + '","err":' + js(short_error(exc)) + "}")
        sys.excepthook(type(exc), exc, user_traceback(exc))
        finish(1)
    finish(0)


def run_calls(job, chan):
    """``function`` mode: exec the code once, then call the entry on each input; one record per call."""
    import _signal

    try:
        code, namespace = load(job)
        exec(code, namespace)
        func = namespace.get(job["entry"])
        if func is None:
            raise NameError(f"name {job['entry']!r} is not defined by the code")
        if not callable(func):
            raise TypeError(f"{job['entry']!r} is a {type(func).__name__}, not a function")
    except BaseException as exc:
        chan.send('{"k":"load","reason":"' + reason_of(exc) + '","err":' + js(short_error(exc)) + "}")
        finish(1)
    limit = job["call_timeout_s"]
    if limit:
        _signal.signal(_signal.SIGALRM, on_alarm)
    for i, source in enumerate(job["inputs"]):
        ok, value, error = False, None, None
        try:
            args = literal("(" + source + ",)") if source.strip() else ()
        except BaseException as exc:
            error = "input is not a Python literal: " + short_error(exc)
        if error is None:
            try:
                if limit:
                    _signal.setitimer(_signal.ITIMER_REAL, limit)
                try:
                    value, ok = func(*args), True
                finally:
                    if limit:
                        _signal.setitimer(_signal.ITIMER_REAL, 0)
            except CallTimeout:
                error = f"timeout: call exceeded {limit} s"
            except BaseException as exc:
                error = short_error(exc)
        body = '{"k":"call","i":' + str(i) + ',"ok":' + ("true" if ok else "false")
        if ok:
            try:
                text = repr(value)
            except BaseException as exc:
                text = "<repr failed: " + short_error(exc) + ">"
            cut = job["max_repr_chars"]
            body += ',"repr":' + js(text if len(text) <= cut else text[: cut - 3] + "...")
            try:
                body += ',"v":' + encode(value, [job["max_value_chars"]])
            except (Unencodable, RecursionError) as exc:
                body += ',"why":' + js(str(exc) or "too deep")
        chan.send(body + ',"err":' + (js(error) if error is not None else "null") + "}")
    finish(0)


def relay(pid):
    """Wait for the code's process (PID 1 of the namespace) and end the same way it did."""
    while True:
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status):
            os._exit(os.WEXITSTATUS(status))
        if os.WIFSIGNALED(status):
            import _signal

            sig = os.WTERMSIG(status)
            if sig != SIGKILL:
                _signal.signal(sig, _signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)


def die_with_parent(libc, parent):
    """SIGKILL this process when its parent dies (set after every credential change: those clear it)."""
    if libc is not None:
        libc.call("prctl", PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:  # the parent died before that
        os._exit(1)


def main(job_path):
    """Run the job in ``job_path``: isolate, fork the code's process (with namespaces), run the code."""
    host = os.getppid()
    with open(job_path, "rb") as f:
        job = marshal.loads(f.read())
    os.unlink(job_path)
    os.unlink(job["workdir"] + "/.launcher.pyc")
    chan = Channel(job["result_fd"], job["nonce"])
    report, libc, namespaces, landlock, seccomp, roots = isolate(job, chan)
    die_with_parent(libc, host)  # a host that dies takes the sandbox with it
    chan.send('{"k":"setup","iso":{' + ",".join(js(k) + ":" + js(v) for k, v in report.items()) + "}}")
    if namespaces:
        pid = os.fork()
        if pid:
            chan.send('{"k":"pid1","pid":' + str(pid) + "}")  # so that a host that kills us can wait for it
            relay(pid)
        die_with_parent(libc, None)  # the parent is outside this PID namespace: getppid() says 0
    del libc  # the hook below refuses every later ctypes call anyway
    sys.addaudithook(make_hook(job["workdir"], roots, namespaces=namespaces, landlock=landlock, seccomp=seccomp))
    sys.stdout.reconfigure(line_buffering=True)
    if job["mode"] == "function":
        run_calls(job, chan)
    else:
        run_program(job, chan)


def probe():
    """Write what this platform allows as ``key=value`` lines on stdout (run in a throwaway process)."""
    out = sys.stdout.write
    try:
        libc = Libc()
    except Exception as err:  # no _ctypes: nothing can be probed
        out("ffi=" + short_error(err).replace("\n", " ") + "\nnamespaces=0\nlandlock=0\n")
        return
    out(f"landlock={landlock_abi(libc)}\n")
    if os.geteuid() == 0:
        pid = os.fork()
        if pid == 0:  # with the real uid a real run has (drop_privileges)
            try:
                drop_privileges(65534)
                enter_namespaces(libc)
                os._exit(0)
            except OSError:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        out(f"namespaces={int(status == 0)}\n")
        return
    try:
        enter_namespaces(libc)
        out("namespaces=1\n")
    except OSError as err:
        out(f"namespaces=0\nreason={err}\n")


def cli(argv):
    """The launcher's command line: ``<job file>`` or ``--probe``."""
    if argv == ["--probe"]:
        probe()
    else:
        main(argv[0])
