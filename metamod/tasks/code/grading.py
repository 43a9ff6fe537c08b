"""Grading code-reasoning answers: deduction (``code_output``), abduction (``code_input``), induction
(``code_function``).

Every gold is one self-contained string, so ``grade_code(prediction, gold, kind)`` needs nothing else:

* ``code_output``: the true output as Python literal source (``"[1, 2]"``). The prediction is read with
  :func:`~metamod.tasks.code.extract.parse_literal` (never ``eval``) and compared with ``==``, as CRUXEval's
  ``assert f(x) == y`` does (so ``1 == 1.0 == True``). Nothing is run.
* ``code_input``: JSON ``{"function", "entry", "output", "input", "prelude"?}``. The predicted argument list must
  be literals (keyword arguments are placed by the function's signature); ``entry(*args)`` then runs in the
  sandbox (:mod:`metamod.sandbox`) and is correct when it returns a value ``==`` the output. A timeout, an
  exception or a non-literal argument is wrong, and a non-literal argument never reaches the sandbox.
* ``code_function``: JSON ``{"tests": [[input_src, output_src], ...], "entry", "language", "reference",
  "visible"?}``. A Python proposal runs in the sandbox on the test inputs; a DSL proposal (``robustfill``/
  ``deepcoder`` tasks) runs in :mod:`metamod.tasks.dsl`'s interpreter, which is pure and step-bounded, in-process.
  ``passed / total`` counts the graded pairs (MARCO's induction "accuracy" pools these counts over problems) and
  ``correct`` means all of them ("problem accuracy"). The induction tasks grade on every pair, visible and hidden,
  as MARCO does (``grade_pairs: all``); ``visible`` says how many leading test pairs the agent was shown, so
  ``hidden_passed / hidden_total`` also counts the pairs it never saw (``None`` for a gold without the key).

``prelude`` (optional, e.g. LiveCodeBench's ``from typing import List``-style imports) is source run before the
function; it is part of the problem, not shown as the function. An unparsable answer is never correct.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from metamod.tasks.code.extract import (
    LiteralError,
    bind_entry,
    extract_code_answer,
    is_literal,
    literal_repr,
    parse_args,
    parse_literal,
    positional_args,
)
from metamod.tasks.code.problem import (
    CODE_KINDS,
    KIND_OF_SUBTASK,
    LANGUAGES,
    SUBTASK_OF_KIND,
    CodeProblem,
    abduction_gold,
    code_problem,
    deduction_gold,
    induction_gold,
)

logger = logging.getLogger(__name__)

__all__ = [
    "CODE_KINDS",
    "KIND_OF_SUBTASK",
    "LANGUAGES",
    "CodeGrade",
    "CodeProblem",
    "Feedback",
    "abduction_gold",
    "code_problem",
    "code_score",
    "deduction_gold",
    "extract_code_answer",
    "grade_code",
    "induction_gold",
    "normalize_code_answer",
    "parse_literal",
    "preflight_code_tasks",
    "visible_feedback",
]


def preflight_code_tasks(kinds: dict[str, str | None]) -> None:
    """Fail at the start of a run, before any model loads, when a task whose answers are code (``{task: kind}``,
    the kind of its first example) cannot run model-written code on this machine (:func:`metamod.sandbox.preflight`:
    no user namespaces and no ``$METAMOD_SANDBOX_ALLOW_FALLBACK``, or a sandbox that does not start).

    >>> preflight_code_tasks({"arith": "math"})  # no code task: nothing to check
    """
    code = sorted(task for task, kind in kinds.items() if kind in CODE_KINDS)
    if code:
        from metamod.sandbox import preflight

        preflight("task " + ", ".join(repr(t) for t in code))


#: Wall-clock seconds one grading run (one sandbox process) may take.
GRADE_TIMEOUT_S = 5.0
#: Memory limit of a grading run.
GRADE_MEMORY_MB = 512
#: Longest failure message kept in :class:`Feedback`.
MAX_FAILURE_CHARS = 300


@lru_cache(maxsize=4096)
def _gold_json(gold: str) -> dict[str, Any] | None:
    try:
        data = json.loads(gold)
    except (json.JSONDecodeError, TypeError):
        return None
    return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------------------------- grading


@dataclass(frozen=True)
class CodeGrade:
    """The verdict on one answer.

    Attributes:
        correct: every graded pair passed (deduction/abduction: the one check passed).
        score: pairs passed / pairs (the share for one problem; 0.0 or 1.0 outside induction).
        passed: pairs passed.
        total: pairs graded.
        error: why nothing could be checked (``"unparsable answer"``, ``"timeout"``, ...), else ``None``.
        hidden_passed: induction with a gold that marks its visible pairs: graded pairs the agent never saw that
            passed (else ``None``).
        hidden_total: ... and how many such pairs there are.
    """

    correct: bool
    score: float
    passed: int
    total: int
    error: str | None = None
    hidden_passed: int | None = None
    hidden_total: int | None = None

    def __repr__(self) -> str:  # the hidden counts only when known, so other kinds read as before
        hidden = (
            ""
            if self.hidden_total is None
            else f", hidden_passed={self.hidden_passed}, hidden_total={self.hidden_total}"
        )
        return (
            f"CodeGrade(correct={self.correct!r}, score={self.score!r}, passed={self.passed!r}, total={self.total!r}, "
            f"error={self.error!r}{hidden})"
        )


def _wrong(total: int, error: str) -> CodeGrade:
    return CodeGrade(correct=False, score=0.0, passed=0, total=max(total, 1), error=error)


def _counted(passed: int, total: int, error: str | None = None, hidden: tuple[int, int] | None = None) -> CodeGrade:
    total = max(total, 1)
    hp, ht = hidden if hidden is not None else (None, None)
    return CodeGrade(passed == total, passed / total, passed, total, error, hp, ht)


def _visible_count(data: dict[str, Any], n: int) -> int | None:
    """The gold's ``visible`` count when it is a valid one for ``n`` tests, else ``None`` (unknown)."""
    value = data.get("visible")
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < n:
        return value
    return None


def _answer(prediction: str, subtask: str, entry: str = "f", language: str = "python") -> str | None:
    """An extracted answer: the prediction itself when it already is one, else what a response says."""
    text = str(prediction).strip()
    if subtask == "deduction" and is_literal(text):
        return text
    if subtask == "abduction":
        try:
            parse_args(text)
            return text
        except LiteralError:
            pass
    found = extract_code_answer(text, subtask, entry=entry, language=language)
    if found is None and subtask == "induction" and "```" not in text and "<answer>" not in text.lower():
        # a bare program: any text for a DSL task (the interpreter judges it), Python code that defines a function
        if language != "python" or bind_entry(text, entry) is not None:
            return text or None
    return found


def _grade_output(prediction: str, gold: str) -> CodeGrade:
    try:
        expected = parse_literal(gold)
    except LiteralError:
        return _wrong(1, "unparsable gold")
    answer = _answer(prediction, "deduction")
    try:
        value = parse_literal(answer)
    except LiteralError:
        return _wrong(1, "unparsable answer")
    try:
        same = bool(value == expected)
    except Exception:  # a comparison between odd literal types: count as different
        same = False
    return _counted(int(same), 1)


def _run_calls(code: str, entry: str, pairs: list[tuple[str, str]], timeout_s: float):
    """Run ``entry`` on each input in the sandbox, compared with the expected outputs: the CallResults."""
    from metamod.sandbox import run_function

    run = run_function(
        code,
        entry,
        [inp for inp, _ in pairs],
        expected=[out for _, out in pairs],
        timeout_s=timeout_s,
        memory_mb=GRADE_MEMORY_MB,
    )
    return run


def _grade_input(prediction: str, gold: str, timeout_s: float) -> CodeGrade:
    data = _gold_json(gold)
    if not data or not data.get("function") or "output" not in data:
        return _wrong(1, "unparsable gold")
    entry = data.get("entry") or "f"
    answer = _answer(prediction, "abduction", entry=entry)
    try:
        args = positional_args(answer, data["function"], entry)
    except LiteralError as err:
        return _wrong(1, f"unparsable answer ({err})")
    code = f"{data['prelude'].rstrip()}\n\n{data['function']}" if data.get("prelude") else data["function"]
    run = _run_calls(code, entry, [(args, data["output"])], timeout_s)
    call = run.calls[0] if run.calls else None
    if call is None:
        return _wrong(1, _process_error(run))
    return _counted(int(bool(call.passed)), 1, None if call.passed else call.error)


def _process_error(run: Any) -> str:
    result = getattr(run, "result", None)
    reason = getattr(result, "killed_reason", None)
    return reason or "the function could not be run"


def _dsl_outputs(language: str, program_text: str, inputs: list[str]) -> tuple[Any, list[Any], str | None]:
    """Parse a DSL program and run it on each input: ``(program or None, [value or _FAILED], parse error)``."""
    from metamod.tasks.dsl import DSLS, DSLError

    dsl = DSLS[language]
    try:
        program = dsl.parse(program_text)
    except DSLError as err:
        return None, [], str(err)
    values = []
    for inp in inputs:
        try:
            args, _ = parse_args(inp)
            values.append(dsl.run(program, tuple(args)))
        except (DSLError, LiteralError) as err:
            values.append(_Failed(str(err)))
    return program, values, None


@dataclass(frozen=True)
class _Failed:
    error: str


def _unanswered(gold: str) -> CodeGrade:
    """No answer to an induction problem: every graded pair (and hidden pair) counts as failed."""
    data = _gold_json(gold)
    tests = data.get("tests") if data else None
    if not tests:
        return _wrong(1, "unparsable gold")
    visible = _visible_count(data, len(tests))
    return _counted(0, len(tests), "no answer", None if visible is None else (0, len(tests) - visible))


def _grade_function(prediction: str, gold: str, timeout_s: float) -> CodeGrade:
    data = _gold_json(gold)
    tests = data.get("tests") if data else None
    if not tests:
        return _wrong(1, "unparsable gold")
    entry, language = data.get("entry") or "f", data.get("language") or "python"
    pairs = [(str(i), str(o)) for i, o in tests]
    visible = _visible_count(data, len(pairs))
    code = _answer(prediction, "induction", entry=entry, language=language)
    if not code:
        hidden = None if visible is None else (0, len(pairs) - visible)
        return _counted(0, len(pairs), "no program found", hidden)
    check = _check_program(code, entry, language, pairs, timeout_s)
    flags = list(check.flags) + [False] * (len(pairs) - len(check.flags))
    hidden = None if visible is None else (sum(flags[visible:]), len(pairs) - visible)
    return _counted(check.passed, len(pairs), check.fatal or check.first_error, hidden)


@dataclass(frozen=True)
class _ProgramCheck:
    passed: int
    failures: list[str]
    fatal: str | None = None  # the proposal could not be checked at all
    first_error: str | None = None  # the first error a call raised
    flags: tuple[bool, ...] = ()  # per pair, in order: passed (missing at the end: not passed)


def _call_line(entry: str, inp: str, out: str, call: Any) -> str:
    if call.ok:
        return _cut(f"{entry}({inp}) returned {call.value_repr}, expected {out}")
    if (call.error or "").startswith("timeout"):
        return _cut(f"{entry}({inp}) did not finish in time")
    return _cut(f"{entry}({inp}) raised {call.error}")


def _check_program(
    code: str, entry: str, language: str, pairs: list[tuple[str, str]], timeout_s: float
) -> _ProgramCheck:
    """Run a proposal on ``pairs``: Python in the sandbox, a DSL program (DSL tasks) in its interpreter."""
    bound = bind_entry(code, entry)
    if bound is None and language != "python":
        return _check_dsl(code, entry, language, pairs)
    if bound is None:
        return _ProgramCheck(0, ["no Python function definition found"], "unparsable program (no function)")
    run = _run_calls(bound, entry, pairs, timeout_s)
    calls = list(run.calls)
    if not calls:
        error = _process_error(run)
        return _ProgramCheck(0, [_cut(f"the program could not be run: {error}")], error)
    passed, failures, first, flags = 0, [], None, []
    for (inp, out), call in zip(pairs, calls, strict=False):
        flags.append(bool(call.passed))
        if call.passed:
            passed += 1
            continue
        failures.append(_call_line(entry, inp, out, call))
        if not call.ok:
            first = first or call.error
    return _ProgramCheck(passed, failures, None, first, tuple(flags))


def _check_dsl(code: str, entry: str, language: str, pairs: list[tuple[str, str]]) -> _ProgramCheck:
    program, values, parse_error = _dsl_outputs(language, code, [inp for inp, _ in pairs])
    if program is None:
        return _ProgramCheck(0, [_cut(f"the program does not parse: {parse_error}")], "unparsable program")
    passed, failures, first, flags = 0, [], None, []
    for (inp, out), value in zip(pairs, values, strict=True):
        if isinstance(value, _Failed):
            failures.append(_cut(f"{entry}({inp}) failed: {value.error}"))
            first = first or value.error
            flags.append(False)
            continue
        try:
            ok = bool(value == parse_literal(out))
        except LiteralError:
            ok = False
        flags.append(ok)
        if ok:
            passed += 1
        else:
            failures.append(_cut(f"{entry}({inp}) returned {literal_repr(value)}, expected {out}"))
    return _ProgramCheck(passed, failures, None, first, tuple(flags))


def _cut(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_FAILURE_CHARS else text[: MAX_FAILURE_CHARS - 3] + "..."


def grade_code(prediction: str | None, gold: str, kind: str, *, timeout_s: float = GRADE_TIMEOUT_S) -> CodeGrade:
    """Grade a code-reasoning answer against its self-contained gold (see the module docstring).

    Args:
        prediction: the extracted answer, or a whole response (it is extracted with
            :func:`~metamod.tasks.code.extract.extract_code_answer` when it is not already an answer).
        gold: the example's gold string.
        kind: ``code_output``, ``code_input`` or ``code_function``.
        timeout_s: wall-clock limit of the sandbox run (abduction, Python induction).

    Returns:
        A :class:`CodeGrade`; ``None``/empty/unparsable predictions are wrong with an ``error``.

    Raises:
        ValueError: for a kind that is not a code kind.

    >>> grade_code("[ANSWER]assert f(4) == 7[/ANSWER]", "7", "code_output")
    CodeGrade(correct=True, score=1.0, passed=1, total=1, error=None)
    >>> grade_code("__import__('os').system('id')", "0", "code_output").error
    'unparsable answer'
    """
    if kind not in CODE_KINDS:
        raise ValueError(f"Unknown code answer kind {kind!r}; expected one of {', '.join(CODE_KINDS)}")
    if gold is None or not str(gold).strip():
        return _wrong(1, "no gold")
    if prediction is None or not str(prediction).strip():
        return _unanswered(str(gold)) if kind == "code_function" else _wrong(1, "no answer")
    if kind == "code_output":
        return _grade_output(str(prediction), str(gold))
    return _graded_by_execution(str(prediction), str(gold), kind, float(timeout_s))


#: sandboxed grades already computed in this process (bounded; oldest dropped first)
_EXECUTED: dict[tuple[str, str, str, float], CodeGrade] = {}
_EXECUTED_MAX = 8192
_EXECUTED_LOCK = threading.Lock()


def _graded_by_execution(prediction: str, gold: str, kind: str, timeout_s: float) -> CodeGrade:
    """Sandboxed grades, remembered: a loop's per-proposal ``eta`` and the harness's final answer and coverage ask
    for the same grades, and each costs a process. A grade whose run timed out is not kept (it may pass later)."""
    key = (prediction, gold, kind, timeout_s)
    with _EXECUTED_LOCK:
        if key in _EXECUTED:
            return _EXECUTED[key]
    if kind == "code_input":
        grade = _grade_input(prediction, gold, timeout_s)
    else:
        grade = _grade_function(prediction, gold, timeout_s)
    if not (grade.error and "time" in grade.error.lower()):
        with _EXECUTED_LOCK:
            if len(_EXECUTED) >= _EXECUTED_MAX:
                _EXECUTED.pop(next(iter(_EXECUTED)))
            _EXECUTED[key] = grade
    return grade


def code_score(prediction: str | None, gold: str, kind: str) -> float:
    """The fractional score of an answer: pairs passed / pairs graded (one problem's share; 0/1 outside induction).

    >>> code_score("7", "7", "code_output"), code_score("8", "7", "code_output")
    (1.0, 0.0)
    """
    return grade_code(prediction, gold, kind).score


def normalize_code_answer(answer: str | None, kind: str) -> str | None:
    """Canonical form of a code answer for majority voting (``None`` when unparsable).

    ``code_output``: the literal in :func:`~metamod.tasks.code.extract.literal_repr` spelling; ``code_input``: the
    argument list in that spelling (keywords as ``name=value``, sorted); ``code_function``: the extracted program,
    stripped.

    >>> normalize_code_answer("[ANSWER]assert f(1) == {2, 1}[/ANSWER]", "code_output")
    '{1, 2}'
    >>> normalize_code_answer("f( 'a' ,b = 2)", "code_input"), normalize_code_answer("oops", "code_output")
    ("'a', b=2", None)
    """
    if kind not in CODE_KINDS:
        raise ValueError(f"Unknown code answer kind {kind!r}; expected one of {', '.join(CODE_KINDS)}")
    if answer is None or not str(answer).strip():
        return None
    subtask = SUBTASK_OF_KIND[kind]
    found = _answer(str(answer), subtask)
    if found is None:
        return None
    try:
        if kind == "code_output":
            return literal_repr(parse_literal(found))
        if kind == "code_input":
            positional, keywords = parse_args(found)
            parts = [literal_repr(value) for value in positional]
            parts += [f"{key}={literal_repr(keywords[key])}" for key in sorted(keywords)]
            return ", ".join(parts)
    except LiteralError:
        return None
    return found.strip() or None


# --------------------------------------------------------------------------------------------- feedback


@dataclass(frozen=True)
class Feedback:
    """The code interpreter's check of a proposal against what the agent may see (never the gold).

    Attributes:
        passed: every visible check passed.
        n_passed: checks passed.
        n_total: checks made.
        failures: one short line per failed check (what was called, what came back, what was expected).
        error: why the proposal could not be checked at all (unparsable, no program, timeout), else ``None``.
    """

    passed: bool
    n_passed: int
    n_total: int
    failures: list[str] = field(default_factory=list)
    error: str | None = None


DEDUCTION_CHECKS = ("format", "oracle")


def visible_feedback(
    example: Any, prediction: str | None, *, deduction_check: str = "format", timeout_s: float = GRADE_TIMEOUT_S
) -> Feedback:
    """Check a proposal with the interpreter, using only the visible problem.

    Induction: run the proposed function (or DSL program) on the visible pairs. Abduction: run the given function
    on the proposed input and compare with the given output. Deduction: ``"format"`` (default) only checks that
    the prediction reads as a Python literal; ``"oracle"`` runs the function on the given input and compares,
    which reveals whether the prediction is right: for ablations only, never a fair setting.

    Args:
        example: a code example (or its ``meta["code"]``).
        prediction: the proposal (an extracted answer or a response).
        deduction_check: ``format`` or ``oracle``.
        timeout_s: wall-clock limit of a sandbox run.

    Returns:
        A :class:`Feedback`.
    """
    if deduction_check not in DEDUCTION_CHECKS:
        raise ValueError(f"deduction_check must be one of {', '.join(DEDUCTION_CHECKS)}, got {deduction_check!r}")
    problem = code_problem(example)
    if prediction is None or not str(prediction).strip():
        total = len(problem.visible) if problem.subtask == "induction" else 1
        return Feedback(False, 0, total, ["no answer given"], "no answer")
    prediction = str(prediction)
    if problem.subtask == "induction":
        return _induction_feedback(problem, prediction, timeout_s)
    if problem.subtask == "abduction":
        return _abduction_feedback(problem, prediction, timeout_s)
    return _deduction_feedback(problem, prediction, deduction_check, timeout_s)


def _induction_feedback(problem: CodeProblem, prediction: str, timeout_s: float) -> Feedback:
    pairs = list(problem.visible)
    code = _answer(prediction, "induction", entry=problem.entry, language=problem.language)
    if not code:
        return Feedback(False, 0, len(pairs), ["no program found in the answer"], "no program found")
    check = _check_program(code, problem.entry, problem.language, pairs, timeout_s)
    return Feedback(check.passed == len(pairs), check.passed, len(pairs), check.failures, check.fatal)


def _abduction_feedback(problem: CodeProblem, prediction: str, timeout_s: float) -> Feedback:
    answer = _answer(prediction, "abduction", entry=problem.entry)
    try:
        args = positional_args(answer, problem.function, problem.entry)
    except LiteralError as err:
        return Feedback(False, 0, 1, [_cut(f"the input is not a literal argument list: {err}")], "unparsable answer")
    run = _run_calls(problem.runnable, problem.entry, [(args, problem.output)], timeout_s)
    call = run.calls[0] if run.calls else None
    if call is None:
        error = _process_error(run)
        return Feedback(False, 0, 1, [_cut(f"{problem.entry}({args}) could not be run: {error}")], error)
    if call.passed:
        return Feedback(True, 1, 1)
    return Feedback(False, 0, 1, [_call_line(problem.entry, args, problem.output, call)])


def _deduction_feedback(problem: CodeProblem, prediction: str, check: str, timeout_s: float) -> Feedback:
    answer = _answer(prediction, "deduction", entry=problem.entry)
    try:
        parse_literal(answer)
    except LiteralError as err:
        return Feedback(False, 0, 1, [_cut(f"the answer is not a Python literal: {err}")], "unparsable answer")
    if check == "format":
        return Feedback(True, 1, 1)
    run = _run_calls(problem.runnable, problem.entry, [(problem.input, answer)], timeout_s)
    call = run.calls[0] if run.calls else None
    if call is not None and call.passed:
        return Feedback(True, 1, 1)
    return Feedback(False, 0, 1, [f"{problem.entry}({problem.input}) does not return {_cut(answer)}"])
