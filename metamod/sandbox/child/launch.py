"""The launcher that runs INSIDE every fresh sandbox process, before and around the user's code.

The host starts ``python -I -S -B .launcher.pyc <job file>`` in a new session with an empty environment and the
throwaway work directory as its current directory; the ``.pyc`` bundles this module and the other modules of this package it
uses (:mod:`metamod.sandbox.launcher`). They use builtin modules only (no ``os``, ``ctypes``, ``json``, ``re``,
``enum``, ``signal`` or ``ast``: importing those would double the start-up time) and never the rest of ``metamod``.
In order, the launcher:

1. reads the job (a ``marshal`` file the host wrote into the work dir) and deletes it and its own ``.pyc``;
2. makes a private mount namespace whose work dir is a size-capped tmpfs (the disk quota), and when started as root
   makes the sandbox uid (65534) its real, effective and saved uid (:mod:`metamod.sandbox.child.kernel`);
3. enters new user, network and PID namespaces (``unshare``), maps its own uid, prepares a Landlock ruleset (writes
   only under the work dir, reads only from the Python install and system libraries unless told otherwise, nothing
   executable, no TCP, no signals outside the sandbox), drops every capability, sets ``no_new_privs`` and a seccomp
   filter (x86_64); then applies the ruleset and the resource limits, and asks to be killed when the host dies;
4. forks the WORKER, the process that runs the user's code (PID 1 of the new PID namespace, so when it ends, or
   when the launcher, which the host kills on timeout, dies, the kernel kills every process it left behind). The
   worker installs an audit hook (defence in depth, and the only file / process guard where Landlock or
   namespaces are missing) and runs the code: a whole program (``python`` mode) or a function on each input
   (``function`` mode);
5. stays outside the code's reach and relays: it alone holds the host's result pipe and the job's nonce (the worker
   closes and forgets both before any user code runs). In ``function`` mode it drives the calls: it asks for call
   ``i`` only after call ``i - 1`` answered, and accepts exactly one answer per call, for that call, after it was
   asked. A record the code writes itself (a forged "passed", an answer before the question, a second answer)
   ends the run as ``tamper`` and fails that call and the ones after it, so the host never accepts results that an
   honest run of the function could not have produced.

Everything the host must learn (what isolation is active, per-call results, why the code stopped) travels as JSON
lines on a dedicated pipe, each prefixed with the job's random nonce; stdout and stderr belong to the user's code.
Values are encoded with exact tags (tuple, set, bytes ...) from their real types (a subclass's overridden
``__iter__`` or ``items`` is never called), so the HOST decodes them and compares them with the expected outputs,
which therefore never enter the sandbox.

With ``--probe`` it only reports what the platform allows (``key=value`` lines) and changes nothing.
"""

import marshal
import posix as os
import sys

from metamod.sandbox.child.codec import Channel, Unencodable, encode, js, literal, short_error
from metamod.sandbox.child.hook import make_hook
from metamod.sandbox.child.kernel import (
    PR_SET_PDEATHSIG,
    SIGKILL,
    Libc,
    drop_privileges,
    enter_namespaces,
    isolate,
    landlock_abi,
)

TAMPER_EXIT = 86  # the launcher's exit status after it found a result record the code wrote itself

PACKAGE_DIR = (lambda: 0).__code__.co_filename.rsplit("/", 1)[0] + "/"  # frames from here are the launcher's


class CallTimeout(BaseException):
    """Raised in the user's function by the per-call timer."""


def on_alarm(signum, frame):
    raise CallTimeout


def load(job):
    """The user's code compiled as ``main.py`` of a fresh ``__main__`` module (which replaces this launcher's)."""
    path = job["workdir"] + "/main.py"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # for tracebacks' source lines only
    try:
        data = job["code"].encode("utf-8", "surrogatepass")
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
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
    if isinstance(exc, OSError) and exc.errno == 28:  # ENOSPC: the work dir's tmpfs is full (max_disk_mb)
        return "disk"
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


def run_calls(job, chan, requests):
    """``function`` mode: exec the code once, say ``ready``, then call the entry on each input the launcher asks for
    (one index per line on ``requests``); one record per call."""
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
    chan.send('{"k":"ready"}')
    inputs = job["inputs"]
    while True:
        line = read_line(requests)
        if not line or not line.isdigit() or int(line) >= len(inputs):
            break
        i = int(line)
        source = inputs[i]
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


def read_line(fd):
    """One line from ``fd`` (without its newline; "" at the end), read a byte at a time so nothing is buffered."""
    out = b""
    while True:
        byte = os.read(fd, 1)
        if not byte or byte == b"\n":
            return out.decode()
        out += byte


def relay(pid):
    """Wait for the worker (the code's process) and end the same way it did."""
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


class Records:
    """The worker's records as the launcher reads them: whole lines, each at most ``cap`` bytes."""

    def __init__(self, fd, cap):
        self.fd, self.cap, self.buf = fd, cap, b""

    def next(self):
        """The next line (bytes, without its newline); None at the end; raises ValueError past the cap."""
        while b"\n" not in self.buf:
            if len(self.buf) > self.cap:
                raise ValueError(f"a result record over {self.cap} bytes")
            data = os.read(self.fd, 65536)
            if not data:
                return None
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def tamper(chan, pid, i, why):
    """A record the code wrote itself: tell the host (call ``i`` and the later ones fail), kill the worker, end."""
    chan.send('{"k":"tamper","i":' + str(i) + ',"err":' + js("result records forged or duplicated: " + why) + "}")
    try:
        os.kill(pid, SIGKILL)
    except OSError:  # gone already
        pass
    os.waitpid(pid, 0)
    os._exit(TAMPER_EXIT)


def serve(job, chan, pid, requests, reports):
    """The launcher's side: relay the worker's records to the host, in function mode one call at a time; then end
    as the worker did. Every line is checked before it is passed on (see the module docstring)."""
    records = Records(reports, job["max_result_bytes"])
    try:
        if job["mode"] != "function":
            line = records.next()
            if line is not None and line.startswith(b'{"k":"exit",'):
                chan.send(line.decode("utf-8", "replace"))  # the code's uncaught exception; anything else is dropped
            while line is not None:
                line = records.next()
            relay(pid)
        line = records.next()
        if line is None:
            relay(pid)
        if line.startswith(b'{"k":"load",'):
            chan.send(line.decode("utf-8", "replace"))
            relay(pid)
        if line != b'{"k":"ready"}':
            tamper(chan, pid, 0, "a record before the code had loaded: " + repr(line[:80]))
        for i in range(len(job["inputs"])):
            os.write(requests, f"{i}\n".encode())
            line = records.next()
            if line is None:
                relay(pid)
            if not line.startswith(f'{{"k":"call","i":{i},'.encode()):
                again = i > 0 and line.startswith(f'{{"k":"call","i":{i - 1},'.encode())
                if again:  # a second answer to call i - 1: either of the two may be the code's own
                    tamper(chan, pid, i - 1, f"a second answer to call {i - 1}")
                tamper(chan, pid, i, f"an unexpected record while call {i} ran")
            chan.send(line.decode("utf-8", "replace"))
        os.close(requests)
        line = records.next()
        if line is not None:
            last = len(job["inputs"]) - 1
            tamper(chan, pid, max(last, 0), f"a record after the last call: {line[:80]!r}")
    except ValueError as err:
        tamper(chan, pid, 0, str(err))
    relay(pid)


def main(job_path):
    """Run the job in ``job_path``: isolate, fork the worker that runs the code, relay its records."""
    host = os.getppid()
    with open(job_path, "rb") as f:
        job = marshal.loads(f.read())
    os.unlink(job_path)
    os.unlink(job["workdir"] + "/.launcher.pyc")
    chan = Channel(job.pop("result_fd"), job.pop("nonce"))
    report, libc, namespaces, landlock, seccomp, roots = isolate(job, chan)
    die_with_parent(libc, host)  # a host that dies takes the sandbox with it
    chan.send('{"k":"setup","iso":{' + ",".join(js(k) + ":" + js(v) for k, v in report.items()) + "}}")
    requests_r, requests_w = os.pipe()
    reports_r, reports_w = os.pipe()
    launcher = os.getpid()
    pid = os.fork()
    if pid:
        os.close(requests_r)
        os.close(reports_w)
        if namespaces:
            chan.send('{"k":"pid1","pid":' + str(pid) + "}")  # so that a host that kills us can wait for it
        serve(job, chan, pid, requests_w, reports_r)
    os.close(chan.fd)  # the worker never holds the host's pipe or the nonce
    os.close(requests_w)
    os.close(reports_r)
    del chan
    die_with_parent(libc, None if namespaces else launcher)  # in a PID namespace getppid() says 0
    del libc  # the hook below refuses every later ctypes call anyway
    work(job, Channel(reports_w, ""), requests_r, roots, namespaces, landlock, seccomp)


def work(job, reports, requests, roots, namespaces, landlock, seccomp):
    """The worker: install the audit hook, then run the code (its frames hold nothing the code could misuse)."""
    sys.addaudithook(make_hook(job["workdir"], roots, namespaces=namespaces, landlock=landlock, seccomp=seccomp))
    sys.stdout.reconfigure(line_buffering=True)
    if job["mode"] == "function":
        run_calls(job, reports, requests)
    else:
        os.close(requests)
        run_program(job, reports)


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
        if pid == 0:  # with the uids a real run has (drop_privileges)
            try:
                drop_privileges(libc, 65534)
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
