"""Inside the sandbox: the kernel's protections, applied by the launcher before the code runs.

It runs inside the sandbox (bundled by :mod:`metamod.sandbox.launcher`): builtin modules only, never ``os``.
:func:`isolate` applies, as far as the platform allows: a private mount namespace whose work dir is a size-capped
tmpfs (the disk quota), the sandbox uid as real, effective AND saved uid when started as root (no uid 0 of any
kind remains: root is exempt from ``RLIMIT_NPROC``), new user + network + PID namespaces, a Landlock ruleset
(writes only in the work dir, reads only from :func:`~metamod.sandbox.child.paths.read_roots`, no exec, no TCP, no
signals or abstract sockets outside the sandbox), no capabilities, ``no_new_privs``, a seccomp filter (which also
refuses the whole set*uid / set*gid / capset family) and the resource limits; it returns what is active.
Syscalls go through ``_ctypes`` directly (:class:`Libc`): the ``ctypes`` package costs ~8 ms to import.

>>> len(seccomp_filter() or b"") % 8
0
"""

import posix as os

from metamod.sandbox.child.codec import js, short_error
from metamod.sandbox.child.paths import DEVICES, install_paths, isdir, read_roots

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT = 1, 2, 4, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
AT_FDCWD, NR_OPEN_TREE, NR_MOVE_MOUNT, MOVE_MOUNT_F_EMPTY_PATH = -100, 428, 429, 4  # same numbers on every arch
OPEN_TREE_FLAGS = 1 | 0x8000 | 0o2000000  # OPEN_TREE_CLONE | AT_RECURSIVE | O_CLOEXEC
PR_SET_NO_NEW_PRIVS = 38
SIGKILL = 9
CAP_VERSION_3 = 0x20080522
LANDLOCK_NR = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446), "riscv64": (444, 445, 446)}
# Landlock filesystem rights (bit numbers from linux/landlock.h)
LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR = 1, 2, 4, 8
LL_REMOVE_DIR, LL_REMOVE_FILE, LL_MAKE_CHAR, LL_MAKE_DIR = 16, 32, 64, 128
LL_MAKE_REG, LL_MAKE_SOCK, LL_MAKE_FIFO, LL_MAKE_BLOCK, LL_MAKE_SYM = 256, 512, 1024, 2048, 4096
LL_REFER, LL_TRUNCATE, LL_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
AUDIT_ARCH_X86_64 = 0xC000003E
# x86_64 syscalls the code never needs and that would reach past the other walls: socket (pathname unix sockets are
# outside the network namespace and Landlock), io_uring (its own socket / file operations), ptrace and
# process_vm_*, namespaces and mounts, bpf, perf, userfaultfd, keyrings, modules, kexec, file handles.
# socketpair stays allowed (an unnamed local pair: asyncio's self-pipe). clone with a CLONE_NEW* flag is refused
# and clone3 answers ENOSYS (its flags are out of reach; glibc then falls back to clone).
SECCOMP_DENY_X86_64 = (41, 101, 165, 166, 155, 161, 272, 308, 321, 298, 323, 248, 249, 250, 425, 426, 427, 310, 311)
SECCOMP_DENY_X86_64 += (246, 320, 175, 313, 176, 303, 304, 428, 429, 430, 431, 432, 433, 442)
# the credential family: setuid setgid setreuid setregid setgroups setresuid setresgid setfsuid setfsgid capset. With
# them refused, no code can make its real uid root again (root is exempt from RLIMIT_NPROC) or regain a capability.
SECCOMP_DENY_X86_64 += (105, 106, 113, 114, 116, 117, 119, 122, 123, 126)
NR_CLONE_X86_64, NR_CLONE3_X86_64 = 56, 435
CLONE_NEW_FLAGS = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET


class Libc:
    """The few libc calls the launcher needs, through ``_ctypes`` directly (the ``ctypes`` package is slow to
    import). Every argument is passed as a C long or a bytes pointer."""

    def __init__(self):
        import _ctypes

        class Long(_ctypes._SimpleCData):
            _type_ = "l"

        class Func(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = Long

        class Handle:
            _handle = _ctypes.dlopen(None, 2)

        self._ctypes, self._long, self._func, self._lib = _ctypes, Long, Func, Handle

    def call(self, name, *args):
        """``name(*args)``; returns the result, or raises OSError(errno) when it is -1."""
        func = self._func((name, self._lib))
        result = func(*[a if isinstance(a, bytes) or a is None else self._long(a) for a in args])
        if result == -1:
            errno = self._ctypes.get_errno()
            raise OSError(errno, f"{name}: {os.strerror(errno)}")
        return result


def landlock_abi(libc):
    """The kernel's Landlock ABI version, or 0 when there is none (or this architecture is not known here)."""
    numbers = LANDLOCK_NR.get(os.uname().machine)
    if numbers is None:
        return 0
    try:
        return libc.call("syscall", numbers[0], None, 0, 1)
    except OSError:
        return 0


def landlock_ruleset(libc, abi, workdir, roots):
    """A Landlock ruleset fd (not yet applied): write only in ``workdir``, read ``roots``, execute nothing."""
    create, add_rule, _ = LANDLOCK_NR[os.uname().machine]
    handled = (1 << 13) - 1
    if abi >= 2:
        handled |= LL_REFER
    if abi >= 3:
        handled |= LL_TRUNCATE
    if abi >= 5:
        handled |= LL_IOCTL_DEV
    attr = handled.to_bytes(8, "little")
    if abi >= 4:
        attr += (3).to_bytes(8, "little")  # handled_access_net: bind + connect TCP, no rule = refused
    if abi >= 6:
        attr += (3).to_bytes(8, "little")  # scoped: abstract unix sockets + signals stay inside the sandbox
    ruleset = libc.call("syscall", create, attr, len(attr), 0)
    file_rights = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | (LL_TRUNCATE | LL_IOCTL_DEV) & handled
    write = LL_WRITE_FILE | LL_REMOVE_DIR | LL_REMOVE_FILE | LL_MAKE_DIR | LL_MAKE_REG | LL_MAKE_SYM | LL_MAKE_FIFO
    work = (write | LL_READ_FILE | LL_READ_DIR | LL_REFER | LL_TRUNCATE) & handled
    rules = [(workdir, work)] + [(p, LL_READ_FILE | LL_READ_DIR) for p in roots]
    rules += [("/dev/null", LL_READ_FILE | LL_WRITE_FILE | LL_TRUNCATE & handled)]
    rules += [(p, LL_READ_FILE) for p in DEVICES[1:]]
    for path, rights in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not isdir(path):
                rights &= file_rights
            rule = rights.to_bytes(8, "little") + fd.to_bytes(4, "little", signed=True)
            libc.call("syscall", add_rule, ruleset, 1, rule, 0)
        finally:
            os.close(fd)
    return ruleset


def seccomp_filter():
    """The BPF program (bytes) of the syscall filter, or None where this architecture has no table here."""
    if os.uname().machine != "x86_64":
        return None
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38

    def op(code, k, jt=0, jf=0):
        return code.to_bytes(2, "little") + bytes((jt, jf)) + k.to_bytes(4, "little")

    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    prog = [op(load, 4), op(jeq, AUDIT_ARCH_X86_64, 1, 0), op(ret, eperm)]  # another ABI (i386): refused
    prog += [op(load, 0), op(jge, 0x40000000, 0, 1), op(ret, eperm)]  # the x32 ABI: refused
    for nr in SECCOMP_DENY_X86_64:
        prog += [op(jeq, nr, 0, 1), op(ret, eperm)]
    prog += [op(jeq, NR_CLONE3_X86_64, 0, 1), op(ret, enosys)]
    prog += [op(jeq, NR_CLONE_X86_64, 0, 3), op(load, 16), op(jset, CLONE_NEW_FLAGS, 0, 1), op(ret, eperm)]
    prog += [op(ret, allow)]
    return b"".join(prog)


def install_seccomp(libc, prog):
    """Apply the filter ``prog`` (needs no_new_privs)."""
    char = type("Char", (libc._ctypes._SimpleCData,), {"_type_": "c"})
    array = type("Prog", (libc._ctypes.Array,), {"_type_": char, "_length_": len(prog)})
    buf = array.from_buffer_copy(prog)
    fprog = (len(prog) // 8).to_bytes(2, "little") + bytes(6) + libc._ctypes.addressof(buf).to_bytes(8, "little")
    libc.call("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog, 0, 0)


def enter_namespaces(libc, *, mounts=False):
    """New user + network + PID namespaces (and a mount namespace when ``mounts``), the current uid / gid mapped
    onto themselves."""
    uid, gid = os.geteuid(), os.getegid()
    libc.call("unshare", CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID | (CLONE_NEWNS if mounts else 0))
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def drop_privileges(libc, uid):
    """Root only: ``uid`` becomes the real, effective and saved uid and gid, with no supplementary groups, so no uid 0
    of any kind remains (RLIMIT_NPROC exempts a real uid 0, and an effective or saved uid 0 could make it real
    again). The process is then made dumpable again (a uid change clears it) so that it may write its own
    ``/proc/self/uid_map`` when it enters a user namespace; the launcher clears it at the end."""
    libc.call("setgroups", 0, None)
    libc.call("setresgid", uid, uid, uid)
    libc.call("setresuid", uid, uid, uid)
    libc.call("prctl", PR_SET_DUMPABLE, 1, 0, 0, 0)


def keep_real_uid_only(uid):
    """Root only, where no private mount namespace can be made (so the Python install may be unreadable to
    ``uid``): ``uid`` becomes the REAL uid while the effective uid stays 0 without capabilities. The seccomp filter
    then refuses every set*uid call, so the real uid cannot become 0 again."""
    os.setresuid(uid, 0, 0)


def hidden_roots(paths):
    """``{ancestor: [path, ...]}``: the paths another uid cannot reach because the topmost ``ancestor`` on their way
    is not searchable by others (``/root`` 0700 holding a pyenv Python, pytest's ``/tmp/pytest-of-root``), grouped
    by that ancestor. Paths nested in another hidden path are left out (binding the outer one brings them along).

    >>> hidden_roots(["/usr", "/usr/lib"])
    {}
    """
    found = {}
    for path in sorted(paths, key=len):
        if any(path == r or path.startswith(r + "/") for rs in found.values() for r in rs):
            continue
        walked = ""
        for part in [p for p in path.split("/") if p][:-1]:
            walked += "/" + part
            try:
                mode = os.stat(walked).st_mode
            except OSError:
                break
            if not mode & 0o001:
                found.setdefault(walked, []).append(path)
                break
    return found


def make_dirs(path):
    """``mkdir -p path`` (mode 0755), as root in the private mount namespace."""
    walked = ""
    for part in [p for p in path.split("/") if p]:
        walked += "/" + part
        try:
            os.mkdir(walked, 0o755)
        except FileExistsError:
            pass


def private_mounts(libc, job, roots, *, owner):
    """In the (new, private) mount namespace: the work dir becomes a tmpfs of ``job["max_disk_mb"]`` (owned by
    ``owner`` when given: the disk quota, and the only place the code can write). With an ``owner`` (a root host),
    the read roots and the work dir that the owner could not reach (:func:`hidden_roots`) are made reachable: a
    small tmpfs is laid over their hidden ancestor (hiding everything else there) and each root is bound back
    read-only at its own path (``open_tree`` + ``move_mount``, so nothing needs a staging path). Returns the disk
    report line."""
    workdir = job["workdir"]
    libc.call("mount", None, b"/", None, MS_REC | MS_PRIVATE, None)
    if owner is not None:
        hidden = hidden_roots([*install_paths(job), *roots, workdir])
        clones = [
            (root, libc.call("syscall", NR_OPEN_TREE, AT_FDCWD, root.encode(), OPEN_TREE_FLAGS))
            for inside in hidden.values()
            for root in inside
            if root != workdir
        ]
        for ancestor in hidden:
            libc.call("mount", b"tmpfs", ancestor.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=0755")
        for root, fd in clones:
            make_dirs(root)
            libc.call("syscall", NR_MOVE_MOUNT, fd, b"", AT_FDCWD, root.encode(), MOVE_MOUNT_F_EMPTY_PATH)
            os.close(fd)
            libc.call("mount", None, root.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, None)
        make_dirs(workdir)
    options = f"size={job['max_disk_mb']}m,nr_inodes={job['max_disk_mb'] * 256},mode=0700"
    options += f",uid={owner},gid={owner}" if owner is not None else ""
    libc.call("mount", b"tmpfs", workdir.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode())
    os.chdir(workdir)  # the old cwd is the folder under the new tmpfs
    return f"tmpfs work dir of {job['max_disk_mb']} MB (the only writable place)"


def set_limits(job, *, processes):
    """The resource limits (RLIMIT_NPROC only when ``processes``: it counts every process of the uid)."""
    import resource

    def cap(which, soft, hard=None):
        resource.setrlimit(which, (soft, soft if hard is None else hard))

    cap(resource.RLIMIT_AS, job["memory_mb"] << 20)
    cap(resource.RLIMIT_FSIZE, job["max_file_mb"] << 20)
    cap(resource.RLIMIT_NOFILE, job["max_open_files"])
    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_CPU, job["cpu_s"])  # soft = hard: SIGKILL (PID 1 of a namespace ignores SIGXCPU)
    if processes:
        cap(resource.RLIMIT_NPROC, job["max_processes"] + 1)  # + 1: this launcher


def isolate(job, chan):
    """Apply every protection the platform allows; return the ``isolation`` report, the libc handle, and whether
    namespaces, Landlock and seccomp are active."""
    report = {}
    try:
        libc = Libc()
    except Exception as err:  # no _ctypes in this build: nothing but rlimits and the audit hook
        libc, report["ffi"] = None, short_error(err)
    roots = read_roots(job)
    namespaces = job["network"] == "namespace"
    report["disk"], report["user"] = mount_and_drop(job, libc, roots, namespaces, chan)
    if namespaces:
        report.update(network="namespace", pid="namespace", user=report["user"] + " in a user namespace")
    else:
        report.update(network="none (audit hook only)", pid="host (fork refused by the audit hook)")
    abi = landlock_abi(libc) if libc and job["landlock"] else 0
    ruleset = None
    if not job["landlock"]:
        report["files"] = "audit hook only (landlock off by option)"
    elif abi:
        try:  # opened now: the work dir is the tmpfs, the hidden roots are bound where they belong
            ruleset = landlock_ruleset(libc, abi, job["workdir"], roots)
        except OSError as err:
            report["files"] = f"audit hook only (landlock ruleset failed: {err})"
    seccomp = False
    if libc:
        seccomp = lock_down(job, libc, report)
        if ruleset is not None:
            try:
                libc.call("syscall", LANDLOCK_NR[os.uname().machine][2], ruleset, 0)
                hidden = "reads: python + system libraries" if job["hide_host_files"] else "reads: anywhere"
                report["files"] = f"landlock abi {abi} (writes: work dir only; {hidden}; no exec)"
            except OSError as err:
                report["files"] = f"audit hook only (landlock_restrict_self failed: {err})"
            os.close(ruleset)
        libc.call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    report.setdefault("files", "audit hook only (no landlock)")
    if seccomp and not namespaces:
        report["network"] = "none (seccomp + audit hook)"
    set_limits(job, processes=namespaces)
    report["processes"] = f"RLIMIT_NPROC {job['max_processes']}" if namespaces else "fork refused by the audit hook"
    return report, libc, namespaces, report["files"].startswith("landlock"), seccomp, roots


def mount_and_drop(job, libc, roots, namespaces, chan):
    """The private mounts (disk quota), the uid change and the namespaces, in the only order that works for each
    kind of host; returns the ``disk`` and ``user`` report lines.

    Root: a private mount namespace made as root (the hidden Python install can still be bound), then every uid
    becomes the sandbox uid, then the user namespace. Any other uid: user + mount namespaces together, then the
    mounts (a user namespace owns its mount namespace). Where no mount namespace can be made, the work dir has no
    total cap (RLIMIT_FSIZE still caps each file) and, for root, only the real uid is dropped."""
    uid, target = os.geteuid(), job["sandbox_uid"]
    disk = "no cap (no private mount namespace; max_file_mb per file only)"
    if libc is None:
        return disk, f"uid {uid} (the host's)" if uid else "root"
    if uid == 0 and target is not None:
        try:
            if not job["private_mounts"]:
                raise OSError(0, "off by option private_mounts")
            libc.call("unshare", CLONE_NEWNS)
            disk = private_mounts(libc, job, roots, owner=target)
            drop_privileges(libc, target)
            user = f"uid {target} (real, effective and saved)"
        except OSError as err:
            disk = f"no cap (no private mount namespace: {err.strerror or err}; max_file_mb per file only)"
            try:
                keep_real_uid_only(target)
                user = f"real uid {target}, effective uid 0 without capabilities (set*uid refused)"
            except OSError as err2:
                user = f"root (could not drop: {err2})"
        if namespaces:
            enter_or_refuse(libc, chan, mounts=False)
        return disk, user
    user = "root" if uid == 0 else f"uid {uid} (the host's)"
    if namespaces:
        enter_or_refuse(libc, chan, mounts=job["private_mounts"])
        if not job["private_mounts"]:
            disk = "no cap (no private mount namespace: off by option private_mounts; max_file_mb per file only)"
        else:
            try:
                disk = private_mounts(libc, job, roots, owner=None)
            except OSError as err:
                disk = f"no cap (tmpfs mount failed: {err}; max_file_mb per file only)"
    return disk, user


def enter_or_refuse(libc, chan, *, mounts):
    """:func:`enter_namespaces`, or tell the host that no network namespace can be made and exit."""
    try:
        enter_namespaces(libc, mounts=mounts)
    except OSError as err:
        chan.send('{"k":"refused","err":' + js(f"network namespace unavailable: {err}") + "}")
        os._exit(3)


def lock_down(job, libc, report):
    """Drop every capability, set no_new_privs, install the seccomp filter; True iff the filter is on."""
    try:
        libc.call("capset", CAP_VERSION_3.to_bytes(4, "little") + bytes(4), bytes(24))
    except OSError as err:
        report["capabilities"] = f"kept ({err})"
    libc.call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    prog = seccomp_filter() if job["seccomp"] else None
    if prog is None:
        report["syscalls"] = "no seccomp filter (" + ("not on this arch" if job["seccomp"] else "off by option") + ")"
        return False
    try:
        install_seccomp(libc, prog)
    except OSError as err:
        report["syscalls"] = f"no seccomp filter ({err})"
        return False
    report["syscalls"] = "seccomp (socket, io_uring, ptrace, namespaces, mounts, bpf, set*uid, ... refused)"
    return True
