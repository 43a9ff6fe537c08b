"""Code-reasoning baselines of the MARCO comparison, as evaluation method rows: CoT, Chain-of-Code and RHDA.

=================  ==============================================================================================
``cot``            one call per question: the problem, a step-by-step instruction and the answer format
                   (templates ``code_cot_prompt``; stage ``cot``).
``chain_of_code``  Chain-of-Code (Li et al., 2023): the model writes a Python program that reasons in code and
                   assigns ``answer`` (stage ``program``); the program runs in :mod:`metamod.sandbox`. When it cannot
                   run to the end (an exception, e.g. a call to an undefined "semantic" helper, or no ``answer``)
                   the model itself carries the execution on from the reported stopping point and states the result
                   (stage ``emulate``: the "LMulator").
``rhda``           hypothesis decomposition and amendment (Zhao et al., 2025): a hypothesis in words (stage
                   ``hypothesis``), turned into an answer (stage ``translate``), checked by the interpreter against
                   what the problem shows (:func:`~metamod.rollout.coding.agents.check_proposals`); a failing check
                   is fed back and the hypothesis amended, up to ``iterations`` rounds, stopping when it passes.
=================  ==============================================================================================

Every step sends ONE batched :meth:`~metamod.rollout.coding.agents.CodeAgent.chat` call for all questions still at
work (an LLM, or the simulated coder of :mod:`metamod.rollout.coding.simulated`). Answers are read with
:func:`metamod.tasks.code.grading.extract_code_answer`; a response with no answer gives ``None`` (graded wrong).
Memory guidance (role ``single``), when a memory is attached, is prepended to the first prompt of each question.
Per-method settings come from ``method_options`` (``{rhda: {iterations: 3, feedback: rich}}``).

Chain-of-Code details:

* Program answers. Deduction: ``answer`` is the returned value (its ``repr`` is the answer literal). Abduction:
  ``answer`` is a tuple of the arguments (a non-tuple value is taken as the single argument). Induction: the
  program defines the entry function; it counts as executed when it runs and the function returns (whatever
  value) on every visible input, and the answer is the program's source. Outputs are not compared with anything.
* ``expose_function: false`` (default): for deduction and abduction the problem's function is NOT defined in the
  program's namespace, so the interpreter does not compute the answer for free. A program that re-types the
  function body does get it executed: a known property of Chain-of-Code on deduction, which the method keeps.
* The runner captures the program's printed output (shown to the emulator, at most ``shown_chars``) and reports
  its result on one stdout line marked with a random nonce, so the program's own output is never read as the
  result.
* ``details["chain_of_code"]["source"]`` says where the answer came from: ``execution``, ``emulation``, ``text``
  (no program in the response: the answer stated in prose, if any) or ``none``.

RHDA's check is :func:`~metamod.tasks.code.grading.visible_feedback`: with ``deduction_check: format`` (default) any
parsable deduction answer passes, so deduction takes one round; abduction and induction are checked for real.

>>> RHDAOptions(iterations=0)
Traceback (most recent call last):
...
ValueError: iterations must be >= 1, got 0
>>> last_python_block("Plan.\\n```python\\nanswer = 1\\n```\\nand\\n```python\\nanswer = 2\\n```")
'answer = 2'
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from metamod.llm.base import Conversation, Generation
from metamod.prompts import render
from metamod.rollout.coding.agents import CodeAgent, answer_format, check_proposals, feedback_text, problem_prompt
from metamod.rollout.coding.turn import DEDUCTION_CHECKS, FEEDBACK_MODES, CodeTurn, code_meta
from metamod.tasks.base import Example

from .baselines._common import read_options
from .single import SingleAgentMethod, SingleOutcome

logger = logging.getLogger(__name__)

_FENCE_RE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def _check_budgets(options: Any) -> None:
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if f.name.endswith("max_tokens") and value is not None and value < 1:
            raise ValueError(f"{f.name} must be >= 1 or None, got {value}")


@dataclass
class CoTOptions:
    """Settings of ``cot`` (``method_options: {cot: {max_tokens: 1024}}``)."""

    max_tokens: int | None = field(default=None, metadata={"help": "Completion budget (None: the agent's)."})

    def __post_init__(self) -> None:
        _check_budgets(self)


@dataclass
class ChainOfCodeOptions:
    """Settings of ``chain_of_code`` (``method_options: {chain_of_code: {expose_function: true}}``)."""

    program_max_tokens: int | None = field(
        default=None, metadata={"help": "Completion budget of the program call (None: the agent's)."}
    )
    emulate_max_tokens: int | None = field(
        default=None, metadata={"help": "Completion budget of the emulation call (None: the agent's)."}
    )
    expose_function: bool = field(
        default=False,
        metadata={
            "help": "Deduction/abduction: define the problem's function in the program's namespace before it "
            "runs (true: calling it is free; false, the default: the model must reason or re-type it)."
        },
    )
    timeout_s: float = field(default=5.0, metadata={"help": "Wall-clock limit of one program run, in seconds."})
    memory_mb: int = field(default=512, metadata={"help": "Address-space limit of one program run, in MiB."})
    shown_chars: int = field(
        default=2000, metadata={"help": "Most characters of the program's printed output shown to the emulator."}
    )

    def __post_init__(self) -> None:
        _check_budgets(self)
        if not isinstance(self.expose_function, bool):
            raise ValueError(f"expose_function must be true or false, got {self.expose_function!r}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {self.timeout_s}")
        if self.memory_mb < 16:
            raise ValueError(f"memory_mb must be >= 16, got {self.memory_mb}")
        if self.shown_chars < 0:
            raise ValueError(f"shown_chars must be >= 0, got {self.shown_chars}")


@dataclass
class RHDAOptions:
    """Settings of ``rhda`` (``method_options: {rhda: {iterations: 3, feedback: rich}}``)."""

    iterations: int = field(
        default=2, metadata={"help": "Most hypothesis-translate-check rounds; stops early when the check passes."}
    )
    feedback: str = field(
        default="binary",
        metadata={
            "help": "What a failing check tells the model: binary (passed or not) or rich (which visible checks "
            "failed and the error), worded like MARCO's feedback."
        },
    )
    deduction_check: str = field(
        default="format",
        metadata={
            "help": "Deduction's check: format (the answer parses as a literal; no oracle) or oracle (compared "
            "with the function's real output: leaks the answer, for ablations only)."
        },
    )
    hypothesis_max_tokens: int | None = field(
        default=None, metadata={"help": "Completion budget of a hypothesis/amendment call (None: the agent's)."}
    )
    translate_max_tokens: int | None = field(
        default=None, metadata={"help": "Completion budget of a translation call (None: the agent's)."}
    )

    def __post_init__(self) -> None:
        _check_budgets(self)
        if self.iterations < 1:
            raise ValueError(f"iterations must be >= 1, got {self.iterations}")
        if self.feedback not in FEEDBACK_MODES:
            raise ValueError(f"feedback must be one of {FEEDBACK_MODES}, got {self.feedback!r}")
        if self.deduction_check not in DEDUCTION_CHECKS:
            raise ValueError(f"deduction_check must be one of {DEDUCTION_CHECKS}, got {self.deduction_check!r}")


def last_python_block(text: str | None) -> str | None:
    """The last fenced code block of ``text`` (```` ```python ```` or a bare fence), stripped; ``None`` when none."""
    blocks = [b.strip() for b in _FENCE_RE.findall(text or "")]
    blocks = [b for b in blocks if b]
    return blocks[-1] if blocks else None


# ---------------------------------------------------------------------------------------------- program runner

#: the child script around a Chain-of-Code program; ``@PARAMS@`` becomes a JSON string literal
_RUNNER = r"""
import ast, json, sys, traceback
P = json.loads(@PARAMS@)
class _Capture:
    def __init__(self, limit):
        self.parts, self.size, self.limit = [], 0, limit
    def write(self, s):
        s = str(s)
        if self.size < self.limit:
            self.parts.append(s[: self.limit - self.size])
        self.size += len(s)
        return len(s)
    def flush(self):
        pass
    def text(self):
        out = "".join(self.parts)
        return out + ("\n[... output truncated]" if self.size > self.limit else "")
_real, _cap = sys.stdout, _Capture(P["shown"])
def _report(**fields):
    sys.stdout = _real
    fields["stdout"] = _cap.text()
    _real.write("\n" + P["nonce"] + json.dumps(fields) + "\n")
    _real.flush()
def _line(err):
    if isinstance(err, SyntaxError) and err.filename == "<program>":
        return err.lineno
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == "<program>"]
    return frames[-1].lineno if frames else None
def _err(err):
    return (type(err).__name__ + ": " + str(err))[:300]
def _as_answer(value, subtask):
    if subtask == "abduction" and isinstance(value, tuple):
        return ", ".join(repr(v) for v in value)
    return repr(value)
ns = {"__name__": "__main__"}
sys.stdout = _cap
try:
    if P["function"]:
        exec(compile(P["function"], "<function>", "exec"), ns)
    exec(compile(P["program"], "<program>", "exec"), ns)
except BaseException as err:
    _report(ok=False, error=_err(err), line=_line(err))
    raise SystemExit(0)
if P["subtask"] == "induction":
    fn = ns.get(P["entry"])
    if not callable(fn):
        _report(ok=False, error="the program does not define a function " + P["entry"], line=None)
        raise SystemExit(0)
    for src in P["inputs"]:
        try:
            args = ast.literal_eval("(" + src + ",)")
            fn(*args)
        except BaseException as err:
            msg = P["entry"] + "(" + src + ") raised " + _err(err)
            _report(ok=False, error=msg, line=_line(err))
            raise SystemExit(0)
    _report(ok=True, answer=None)
elif "answer" not in ns:
    _report(ok=False, error="no variable named answer was assigned by the end", line=None)
else:
    try:
        _report(ok=True, answer=_as_answer(ns["answer"], P["subtask"]))
    except BaseException as err:
        _report(ok=False, error="answer could not be written out: " + _err(err), line=None)
"""


@dataclass
class ProgramRun:
    """What running one Chain-of-Code program gave.

    Attributes:
        ok: it ran to the end and produced an answer (induction: its function ran on every visible input).
        answer: the answer literal (deduction/abduction; ``None`` for induction and failed runs).
        stdout: the program's printed output (capped).
        error: why it stopped (``"NameError: name 'h' is not defined"``, a timeout...), ``None`` when ``ok``.
        line: the program line it stopped at (1-based), when known.
        line_text: that line's text.
    """

    ok: bool
    answer: str | None = None
    stdout: str = ""
    error: str | None = None
    line: int | None = None
    line_text: str | None = None


def _given_source(meta: Any) -> str:
    """The problem's function with its prelude (imports a dataset assumes), as one source."""
    prelude, function = str(meta.get("prelude") or "").rstrip(), str(meta.get("function") or "")
    return f"{prelude}\n\n{function}" if prelude else function


def run_program(
    program: str, example: Example, *, expose_function: bool = False, options: ChainOfCodeOptions | None = None
) -> ProgramRun:
    """Run a Chain-of-Code program for ``example`` in the sandbox and read its result.

    Args:
        program: the model's program source.
        example: its code-reasoning question (``meta["code"]``).
        expose_function: define the problem's function before the program runs (deduction/abduction).
        options: limits (``timeout_s``, ``memory_mb``, ``shown_chars``); defaults when ``None``.

    Returns:
        A :class:`ProgramRun`.
    """
    from metamod.sandbox import run_python

    opts = options or ChainOfCodeOptions()
    meta = code_meta(example)
    subtask = meta["subtask"]
    nonce = "@@coc-" + secrets.token_hex(8) + "@@"
    params = {
        "nonce": nonce,
        "program": program,
        "subtask": subtask,
        "entry": meta.get("entry") or "f",
        "function": _given_source(meta) if expose_function and subtask != "induction" else "",
        "inputs": [str(i) for i, _ in meta.get("visible") or []] if subtask == "induction" else [],
        "shown": opts.shown_chars,
    }
    result = run_python(
        _RUNNER.replace("@PARAMS@", repr(json.dumps(params))), timeout_s=opts.timeout_s, memory_mb=opts.memory_mb
    )
    reports = [line[len(nonce) :] for line in (result.stdout or "").splitlines() if line.startswith(nonce)]
    if not reports:
        reason = result.killed_reason or (f"exit code {result.exit_code}" if result.exit_code else "no result")
        if result.timed_out:
            reason = f"timeout after {opts.timeout_s:g} s"
        tail = (result.stderr or "").strip().splitlines()[-1:] or [""]
        return ProgramRun(ok=False, error=f"the run was stopped ({reason}) {tail[0]}".strip())
    data = json.loads(reports[-1])
    line = data.get("line")
    lines = program.splitlines()
    line_text = lines[line - 1].strip() if isinstance(line, int) and 0 < line <= len(lines) else None
    return ProgramRun(
        ok=bool(data.get("ok")),
        answer=data.get("answer"),
        stdout=str(data.get("stdout") or ""),
        error=data.get("error"),
        line=line if line_text is not None else None,
        line_text=line_text,
    )


def run_programs(
    programs: Sequence[str], examples: Sequence[Example], options: ChainOfCodeOptions | None = None
) -> list[ProgramRun]:
    """:func:`run_program` for each ``(program, example)``, in parallel over the CPU cores (order kept)."""
    from metamod.sandbox import run_many

    opts = options or ChainOfCodeOptions()

    def job(program: str, example: Example) -> Any:
        return lambda: run_program(program, example, expose_function=opts.expose_function, options=opts)

    return list(run_many([job(p, e) for p, e in zip(programs, examples, strict=True)]))


# ---------------------------------------------------------------------------------------------- the methods


def _extract(text: str | None, example: Example) -> str | None:
    from metamod.tasks.code.grading import extract_code_answer

    meta = code_meta(example)
    entry, language = meta.get("entry") or "f", meta.get("language") or "python"
    return extract_code_answer(text or "", meta["subtask"], entry=entry, language=language)


class CodeMethod(SingleAgentMethod):
    """Base of the code baselines: a :class:`CodeAgent`, the method's options, batched steps with accounting."""

    options_class: ClassVar[type] = CoTOptions

    def __init__(self, context: Any, spec: Any):
        self.context, self.spec, self.name = context, spec, spec.name
        self.options = read_options(self.options_class, self.name, context.method_options)
        self.agent = CodeAgent.from_context(context, self.name)

    def first_message(self, example: Example, text: str) -> tuple[str, int]:
        """``text`` with the memory's guidance (role ``single``) in front, and how many guidance items it holds."""
        guidance = self.agent.ask(example)
        return guidance.prepend_to(text), len(guidance.item_ids)

    def step(
        self,
        conversations: list[Conversation],
        turns: list[CodeTurn],
        outcomes: list[SingleOutcome],
        *,
        max_tokens: int | None = None,
    ) -> list[Generation]:
        """ONE batched call; each response is appended to its conversation and counted in its outcome."""
        generations = self.agent.chat(conversations, turns, max_tokens=max_tokens)
        for conversation, outcome, g in zip(conversations, outcomes, generations, strict=True):
            conversation.append({"role": "assistant", "content": g.text})
            outcome.texts.append(g.text)
            outcome.prompt_tokens += int(g.prompt_tokens)
            outcome.completion_tokens += int(g.completion_tokens)
        return generations


class CodeCoT(CodeMethod):
    """CoT: one step-by-step answer per question."""

    options_class = CoTOptions

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        outcomes = [SingleOutcome(answer=None) for _ in examples]
        conversations, turns = [], []
        for ex in examples:
            text = render("code_cot_prompt", problem=problem_prompt(ex), answer_format=answer_format(ex))
            message, items = self.first_message(ex, text)
            conversations.append([{"role": "user", "content": message}])
            turns.append(CodeTurn(ex, stage="cot", guidance_items=items))
        generations = self.step(conversations, turns, outcomes, max_tokens=self.options.max_tokens)
        for ex, outcome, g in zip(examples, outcomes, generations, strict=True):
            outcome.answer = _extract(g.text, ex)
            outcome.answers.append(outcome.answer)
            outcome.details = {"cot": {"parsed": outcome.answer is not None}}
        return outcomes


class ChainOfCode(CodeMethod):
    """Chain-of-Code: a program that reasons in code, run in the sandbox, emulated by the model where it stops."""

    options_class = ChainOfCodeOptions

    def program_prompt(self, example: Example) -> str:
        """The program request for ``example`` (``code_coc_program`` / ``code_coc_program_induction``)."""
        meta = code_meta(example)
        problem = problem_prompt(example)
        if meta["subtask"] == "induction":
            return render("code_coc_program_induction", problem=problem, entry=meta.get("entry") or "f")
        note = "code_coc_function_given" if self.options.expose_function else "code_coc_function_hidden"
        return render(
            "code_coc_program",
            problem=problem,
            function_note=render(note),
            answer_shape=render(f"code_coc_shape_{meta['subtask']}"),
        )

    @staticmethod
    def emulate_prompt(example: Example, run: ProgramRun) -> str:
        """What the emulator is told: where and why the run stopped, what it printed, and what to give back."""
        if run.line is not None:
            report = render("code_coc_stopped", line=run.line, line_text=run.line_text, error=run.error)
        else:
            report = render("code_coc_unfinished", error=run.error)
        if run.stdout.strip():
            report += "\n" + render("code_coc_output", stdout=run.stdout.rstrip())
        meta = code_meta(example)
        if meta["subtask"] == "induction":
            entry = meta.get("entry") or "f"
            return render("code_coc_repair", report=report, entry=entry, answer_format=answer_format(example))
        return render("code_coc_emulate", report=report, answer_format=answer_format(example))

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        opts = self.options
        outcomes = [SingleOutcome(answer=None) for _ in examples]
        conversations, turns = [], []
        for ex in examples:
            message, items = self.first_message(ex, self.program_prompt(ex))
            conversations.append([{"role": "user", "content": message}])
            turns.append(CodeTurn(ex, stage="program", guidance_items=items))
        generations = self.step(conversations, turns, outcomes, max_tokens=opts.program_max_tokens)
        programs = [last_python_block(g.text) for g in generations]
        with_program = [i for i, p in enumerate(programs) if p is not None]
        runs = dict(
            zip(
                with_program,
                run_programs([programs[i] for i in with_program], [examples[i] for i in with_program], opts),
                strict=True,
            )
        )
        records: list[dict[str, Any]] = []
        for i, (ex, g) in enumerate(zip(examples, generations, strict=True)):
            record: dict[str, Any] = {"program": programs[i] is not None, "executed": False, "emulated": False}
            run = runs.get(i)
            if run is None:  # no program: whatever answer the prose states
                answer = _extract(g.text, ex)
                record["source"] = "text" if answer is not None else "none"
                outcomes[i].answers.append(answer)
                outcomes[i].answer = answer
            elif run.ok:
                answer = programs[i] if code_meta(ex)["subtask"] == "induction" else run.answer
                record.update(executed=True, source="execution")
                outcomes[i].answers.append(answer)
                outcomes[i].answer = answer
            else:
                record.update(error=run.error, line=run.line)
            records.append(record)
        stuck = [i for i in with_program if not runs[i].ok]
        if stuck:
            for i in stuck:
                conversations[i].append({"role": "user", "content": self.emulate_prompt(examples[i], runs[i])})
            emulated = self.step(
                [conversations[i] for i in stuck],
                [CodeTurn(examples[i], stage="emulate", guidance_items=turns[i].guidance_items) for i in stuck],
                [outcomes[i] for i in stuck],
                max_tokens=opts.emulate_max_tokens,
            )
            for i, g in zip(stuck, emulated, strict=True):
                answer = _extract(g.text, examples[i])
                outcomes[i].answers.append(answer)
                outcomes[i].answer = answer
                records[i].update(emulated=True, source="emulation" if answer is not None else "none")
        for outcome, record in zip(outcomes, records, strict=True):
            outcome.details = {"chain_of_code": record}
        return outcomes


class RHDA(CodeMethod):
    """RHDA: hypothesis in words -> answer -> interpreter check -> amended hypothesis, until the check passes."""

    options_class = RHDAOptions

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        opts = self.options
        outcomes = [SingleOutcome(answer=None) for _ in examples]
        conversations: list[Conversation] = []
        items: list[int] = []
        for ex in examples:
            focus = render(f"rhda_focus_{code_meta(ex)['subtask']}")
            message, n = self.first_message(ex, render("rhda_hypothesis", problem=problem_prompt(ex), focus=focus))
            conversations.append([{"role": "user", "content": message}])
            items.append(n)
        history: list[list[dict[str, Any]]] = [[] for _ in examples]
        feedbacks: list[Any] = [None] * len(examples)
        active = list(range(len(examples)))
        for iteration in range(1, opts.iterations + 1):
            if not active:
                break
            failed = iteration > 1
            if failed:
                for i in active:
                    text = render("rhda_amend", feedback=feedback_text(feedbacks[i], opts.feedback))
                    conversations[i].append({"role": "user", "content": text})
            turns = [CodeTurn(examples[i], 0, iteration, "hypothesis", 0, items[i], failed) for i in active]
            self.step(
                [conversations[i] for i in active],
                turns,
                [outcomes[i] for i in active],
                max_tokens=opts.hypothesis_max_tokens,
            )
            for i in active:
                translate = render("rhda_translate", answer_format=answer_format(examples[i]))
                conversations[i].append({"role": "user", "content": translate})
            turns = [dataclasses.replace(t, stage="translate") for t in turns]
            generations = self.step(
                [conversations[i] for i in active],
                turns,
                [outcomes[i] for i in active],
                max_tokens=opts.translate_max_tokens,
            )
            answers = [_extract(g.text, examples[i]) for i, g in zip(active, generations, strict=True)]
            checks = check_proposals([examples[i] for i in active], answers, deduction_check=opts.deduction_check)
            still = []
            for i, answer, check in zip(active, answers, checks, strict=True):
                outcomes[i].answers.append(answer)
                if answer is not None:
                    outcomes[i].answer = answer  # the latest proposal that could be read
                feedbacks[i] = check
                history[i].append({"parsed": answer is not None, "passed": bool(check.passed)})
                if not check.passed:
                    still.append(i)
            active = still
        for outcome, rounds in zip(outcomes, history, strict=True):
            outcome.details = {
                "rhda": {
                    "iterations": len(rounds),
                    "passed": [r["passed"] for r in rounds],
                    "parsed": [r["parsed"] for r in rounds],
                    "feedback": opts.feedback,
                }
            }
        return outcomes
