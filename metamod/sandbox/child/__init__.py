"""What runs INSIDE every sandbox process, before and around the user's code (builtin modules only).

- :mod:`~metamod.sandbox.child.launch`: the launcher (reads the job, isolates, forks the worker, relays records).
- :mod:`~metamod.sandbox.child.kernel`: the kernel's protections (mount, user, network and PID namespaces, uid
  change, Landlock, seccomp, rlimits).
- :mod:`~metamod.sandbox.child.hook`: the audit hook around the user's code.
- :mod:`~metamod.sandbox.child.codec`: the JSON records and value encoding; :mod:`~metamod.sandbox.child.paths`:
  path helpers and the readable roots.

The host never imports these: :mod:`metamod.sandbox.launcher` compiles them into one bundle per host process. This
file stays empty of code (the bundle replaces the package with a stand-in).
"""
