"""The code-reasoning tasks (MARCO's sub-tasks: deduction, abduction, induction), by job.

- :mod:`~metamod.tasks.code.problem`: the structured problem every code item carries (``meta["code"]``) and its
  answer kinds.
- :mod:`~metamod.tasks.code.loaders`: CRUXEval, LiveCodeBench and the induction sets (ListFunction, MiniARC,
  RobustFill, DeepCoder) from the Hub or local files.
- :mod:`~metamod.tasks.code.extract`: reading a code answer out of a response.
- :mod:`~metamod.tasks.code.grading`: grading by execution in the sandbox, the visible-example feedback, the
  start-of-run sandbox check.
"""
