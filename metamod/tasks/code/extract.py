"""Reading code-reasoning answers: Python literals, argument lists and proposed programs, never by ``eval``.

Everything here is pure text/AST work that runs in the host process: a value is read with a small evaluator over
the parsed syntax tree that accepts only literals (numbers, strings, bytes, ``True``/``False``/``None``, lists,
tuples, sets, dicts) plus the few non-literal spellings ``repr`` produces (``set()``, ``frozenset({...})``,
``inf``, ``nan``). Anything else (a name, an attribute, a call such as ``__import__('os').system('id')``) is
unparsable. Sizes are capped (:data:`MAX_LITERAL_CHARS`, :data:`MAX_LITERAL_DEPTH`, :data:`MAX_LITERAL_NODES`), so a
hostile answer cannot exhaust memory or the recursion limit. Running code is :mod:`metamod.tasks.code.grading`'s
job, through the sandbox.
"""

from __future__ import annotations

import ast
import re
from typing import Any

#: Longest text :func:`parse_literal` / :func:`parse_args` look at.
MAX_LITERAL_CHARS = 100_000
#: Deepest nesting of containers a literal may have.
MAX_LITERAL_DEPTH = 64
#: Most syntax-tree nodes a literal may have.
MAX_LITERAL_NODES = 50_000
#: Longest proposed program :func:`extract_code_answer` returns.
MAX_CODE_CHARS = 50_000
#: Without an answer tag, only this many trailing characters of a response are searched for an answer.
MAX_TAIL_CHARS = 20_000

SUBTASKS = ("deduction", "abduction", "induction")

_PARSE_ERRORS = (SyntaxError, ValueError, TypeError, MemoryError, RecursionError, OverflowError)
_FENCE_RE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n`]*\n(.*?)```", re.DOTALL)
_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_BRACKET_TAG_RE = re.compile(r"\[ANSWER\](.*?)\[/ANSWER\]", re.IGNORECASE | re.DOTALL)
_OPEN_TAG_RE = re.compile(r"(?:<answer>|\[ANSWER\])", re.IGNORECASE)
_ASSERT_RE = re.compile(r"(?m)^[ \t>]*assert\b")
_PROSE_RE = re.compile(
    r"(?:(?:final answer|answer|output|result|return value|input|value)\s*(?:is|would be|will be|should be|must be|"
    r"=|==|:)|\b(?:returns|gives|evaluates to|is equal to))\s*(.+?)(?:\s*$|\.\s*$|\.\s+(?=[A-Z]))",
    re.IGNORECASE | re.MULTILINE,
)
_CALL_START_RE = re.compile(r"\b[A-Za-z_]\w*\s*\(")
_LOOSE_CALL_RE = re.compile(r"^[A-Za-z_][\w.]*\s*\((.*)\)\s*(?:=|->|→|returns|gives|is)\s*(.+?)\s*$", re.DOTALL)
_SPECIAL_NAMES = {"inf": float("inf"), "nan": float("nan")}


class LiteralError(ValueError):
    """A text is not a Python literal (or is too big to read)."""


# --------------------------------------------------------------------------------------------- literals


def _strip_wrappers(text: str) -> str:
    """Whitespace, one surrounding code fence, backticks and ``**bold**`` markers removed."""
    text = text.strip()
    fence = re.fullmatch(r"```[^\n]*\n(.*?)\n?```", text, re.DOTALL)
    if fence:
        text = fence.group(1).strip()
    for _ in range(2):
        if len(text) >= 2 and text[0] == text[-1] and text[0] == "`":
            text = text.strip("`").strip()
        if text.startswith("**") and text.endswith("**") and len(text) > 4:
            text = text[2:-2].strip()
    return text


def _value(node: ast.AST, depth: int, budget: list[int]) -> Any:
    """The value of a literal syntax tree; :class:`LiteralError` for anything that is not one."""
    budget[0] -= 1
    if budget[0] < 0:
        raise LiteralError(f"literal has more than {MAX_LITERAL_NODES} parts")
    if depth > MAX_LITERAL_DEPTH:
        raise LiteralError(f"literal is nested deeper than {MAX_LITERAL_DEPTH} levels")
    if isinstance(node, ast.Constant):
        if node.value is Ellipsis:
            raise LiteralError("'...' is not a value")
        return node.value
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        if any(isinstance(element, ast.Starred) for element in node.elts):
            raise LiteralError("starred items are not literals")
        items = [_value(element, depth + 1, budget) for element in node.elts]
        if isinstance(node, ast.List):
            return items
        return tuple(items) if isinstance(node, ast.Tuple) else set(items)
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise LiteralError("'**' spreads are not literals")
        return {
            _value(key, depth + 1, budget): _value(value, depth + 1, budget)
            for key, value in zip(node.keys, node.values, strict=True)
        }
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _value(node.operand, depth + 1, budget)
        if isinstance(operand, bool) or not isinstance(operand, int | float | complex):
            raise LiteralError("a sign must precede a number")
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):  # complex numbers: 1+2j
        return ast.literal_eval(node)
    if isinstance(node, ast.Name) and node.id in _SPECIAL_NAMES:
        return _SPECIAL_NAMES[node.id]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("set", "frozenset")
        and not node.keywords
        and len(node.args) <= 1
    ):
        items = _value(node.args[0], depth + 1, budget) if node.args else ()
        if not isinstance(items, list | tuple | set | frozenset | str):
            raise LiteralError(f"{node.func.id}() takes a literal collection")
        return set(items) if node.func.id == "set" else frozenset(items)
    raise LiteralError(f"{type(node).__name__} is not a literal")


def _literal_from(source: str) -> Any:
    if len(source) > MAX_LITERAL_CHARS:
        raise LiteralError(f"longer than {MAX_LITERAL_CHARS} characters")
    try:
        tree = ast.parse(source, mode="eval")
        return _value(tree.body, 0, [MAX_LITERAL_NODES])
    except LiteralError:
        raise
    except _PARSE_ERRORS as err:
        raise LiteralError(f"not a Python literal ({type(err).__name__})") from None


def parse_literal(text: str | None) -> Any:
    """Read one Python literal from ``text`` without evaluating code.

    Surrounding whitespace, a code fence, backticks, ``**bold**`` and a trailing full stop are tolerated;
    ``repr`` spellings that are not literals (``set()``, ``frozenset({1})``, ``inf``, ``nan``) are accepted.

    Args:
        text: the text (``None`` is unparsable).

    Returns:
        The value.

    Raises:
        LiteralError: (a ``ValueError``) when ``text`` is not one literal or exceeds the size caps.

    >>> parse_literal(" `[1, 'a', (2, 3)]` "), parse_literal("set()"), parse_literal("-4."), parse_literal("{'k': None}")
    ([1, 'a', (2, 3)], set(), -4.0, {'k': None})
    >>> parse_literal("__import__('os').system('id')")
    Traceback (most recent call last):
    ...
    metamod.tasks.code.extract.LiteralError: Call is not a literal
    """
    if text is None:
        raise LiteralError("no text")
    cleaned = _strip_wrappers(str(text))
    try:
        return _literal_from(cleaned)
    except LiteralError:
        if cleaned.endswith((".", ",")) and len(cleaned) > 1:
            return _literal_from(cleaned[:-1].rstrip())
        raise


def is_literal(text: str | None) -> bool:
    """Whether :func:`parse_literal` reads ``text``.

    >>> is_literal("'abc'"), is_literal("abc"), is_literal("[1, 2")
    (True, False, False)
    """
    try:
        parse_literal(text)
    except LiteralError:
        return False
    return True


def literal_repr(value: Any) -> str:
    """A canonical source spelling of a literal value (``repr``, with sets and dicts in a stable order).

    >>> literal_repr({3, 1, 2}), literal_repr({"b": 1, "a": 2}), literal_repr(frozenset()), literal_repr(-0.0)
    ('{1, 2, 3}', "{'a': 2, 'b': 1}", 'frozenset()', '-0.0')
    """
    if isinstance(value, set | frozenset):
        items = sorted(literal_repr(item) for item in value)
        if isinstance(value, frozenset):
            return f"frozenset({{{', '.join(items)}}})" if items else "frozenset()"
        return "{" + ", ".join(items) + "}" if items else "set()"
    if isinstance(value, dict):
        pairs = sorted(f"{literal_repr(key)}: {literal_repr(item)}" for key, item in value.items())
        return "{" + ", ".join(pairs) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(literal_repr(item) for item in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(literal_repr(item) for item in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


# --------------------------------------------------------------------------------------------- argument lists


def parse_args(text: str | None) -> tuple[list[Any], dict[str, Any]]:
    """Read an argument list (``"[1, 2], 'a'"``, ``"n = 5, m = 1"``) into positional values and keyword values.

    Args:
        text: the text between the parentheses of a call (whitespace/backticks tolerated; ``""`` is no arguments).

    Returns:
        ``(positional values, keyword values)``.

    Raises:
        LiteralError: when an argument is not a literal, or for ``*``/``**`` spreads.

    >>> parse_args("[1, 2], 'a'"), parse_args("n = 5, m = 1"), parse_args("(1, 2)")
    (([[1, 2], 'a'], {}), ([], {'n': 5, 'm': 1}), ([(1, 2)], {}))
    """
    if text is None:
        raise LiteralError("no text")
    cleaned = _strip_wrappers(str(text))
    if len(cleaned) > MAX_LITERAL_CHARS:
        raise LiteralError(f"longer than {MAX_LITERAL_CHARS} characters")
    try:
        tree = ast.parse(f"_({cleaned}\n)", mode="eval")
    except _PARSE_ERRORS as err:
        raise LiteralError(f"not an argument list ({type(err).__name__})") from None
    call = tree.body
    if not isinstance(call, ast.Call):  # e.g. "1) + (2"
        raise LiteralError("not an argument list")
    budget = [MAX_LITERAL_NODES]
    try:
        positional = []
        for node in call.args:
            if isinstance(node, ast.Starred):
                raise LiteralError("'*' spreads are not literals")
            positional.append(_value(node, 1, budget))
        keywords = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                raise LiteralError("'**' spreads are not literals")
            keywords[keyword.arg] = _value(keyword.value, 1, budget)
    except LiteralError:
        raise
    except _PARSE_ERRORS as err:
        raise LiteralError(f"not an argument list ({type(err).__name__})") from None
    return positional, keywords


def _parameters(function_src: str, entry: str) -> ast.arguments | None:
    try:
        tree = ast.parse(function_src)
    except _PARSE_ERRORS:
        return None
    found = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry:
            found = node.args
            if node in tree.body:
                break
    return found


def positional_args(text: str | None, function_src: str | None = None, entry: str = "f") -> str:
    """The argument list as positional literal source, keyword arguments placed by ``entry``'s signature.

    Args:
        text: an argument list (see :func:`parse_args`).
        function_src: the source defining ``entry`` (needed only when ``text`` has keyword arguments; it is parsed,
            never run).
        entry: the function's name.

    Returns:
        ``"v1, v2, ..."`` in :func:`literal_repr` spelling.

    Raises:
        LiteralError: when ``text`` does not parse, or its keywords do not fit the signature.

    >>> positional_args("b = [2], a = 'x'", "def g(a, b, c=3):\\n    return a", entry="g")
    "'x', [2]"
    >>> positional_args(" 1,  (2,) ")
    '1, (2,)'
    """
    positional, keywords = parse_args(text)
    if keywords:
        params = _parameters(function_src or "", entry)
        if params is None:
            raise LiteralError(f"keyword arguments need the signature of {entry!r}")
        names = [arg.arg for arg in params.posonlyargs + params.args]
        defaults = params.defaults
        first_default = len(names) - len(defaults)
        unknown = sorted(set(keywords) - set(names[len(positional) :]))
        if unknown:
            raise LiteralError(f"{entry}() gets unexpected or repeated keyword(s) {unknown}")
        last = max(names.index(name) for name in keywords)
        for index in range(len(positional), last + 1):
            name = names[index]
            if name in keywords:
                positional.append(keywords[name])
            elif index >= first_default:
                try:
                    positional.append(_value(defaults[index - first_default], 1, [MAX_LITERAL_NODES]))
                except LiteralError:
                    raise LiteralError(f"the default of {name!r} is not a literal") from None
            else:
                raise LiteralError(f"{entry}() is missing argument {name!r}")
    return ", ".join(literal_repr(value) for value in positional)


# --------------------------------------------------------------------------------------------- extraction


def _tag_spans(text: str) -> list[str]:
    """Contents of every closed answer span, in order (only the text up to the last closing tag is searched, so
    many unclosed tags cannot make the search quadratic)."""
    lower = text.lower()
    spans = []
    for pattern, close in ((_ANSWER_TAG_RE, "</answer>"), (_BRACKET_TAG_RE, "[/answer]")):
        end = lower.rfind(close)
        if end >= 0:
            spans += [(m.start(), m.group(1)) for m in pattern.finditer(text, 0, end + len(close))]
    return [span for _, span in sorted(spans)]


def _fences(text: str) -> list[tuple[str, str]]:
    """``(language tag, body)`` of every fenced block, in order."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE_RE.finditer(text)]


def _unfence(span: str) -> str:
    blocks = _fences(span)
    return blocks[-1][1].strip() if blocks else _strip_wrappers(span)


def _call_parts(node: ast.AST, source: str) -> str | None:
    """The argument text of a call node ``name(args)`` (``None`` when ``node`` is not a call of a name)."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name | ast.Attribute):
        return None
    func_end = node.func.end_col_offset
    segment = ast.get_source_segment(source, node)
    if segment is None or func_end is None:
        return None
    inner = segment[func_end - node.col_offset :].strip() if node.lineno == node.end_lineno else None
    if inner is None:  # a call over several lines: rebuild the arguments from their own segments
        parts = [ast.get_source_segment(source, arg) or "" for arg in node.args]
        parts += [f"{kw.arg}={ast.get_source_segment(source, kw.value) or ''}" for kw in node.keywords]
        return ", ".join(parts)
    return inner[1:-1].strip() if inner.startswith("(") and inner.endswith(")") else None


def _comparison(source: str) -> tuple[str, str] | None:
    """``(call arguments, expected text)`` of ``[assert] name(args) == expected`` (either side may be the call)."""
    source = source.strip()
    if source.startswith("assert"):
        source = source[len("assert") :].strip()
    try:
        tree = ast.parse(source, mode="eval")
    except _PARSE_ERRORS:
        return None
    node = tree.body
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
        return None
    left, right = node.left, node.comparators[0]
    for call, other in ((left, right), (right, left)):
        args = _call_parts(call, source)
        if args is not None:
            expected = ast.get_source_segment(source, other)
            if expected is not None:
                return args, expected.strip()
    return None


def _last_comparison(text: str) -> tuple[str, str] | None:
    """The last ``assert name(args) == expected`` in ``text`` (an assert may span up to 40 lines)."""
    lines = text.splitlines()
    starts = [index for index, line in enumerate(lines) if _ASSERT_RE.match(line)]
    for start in starts[::-1][:10]:
        first = lines[start].lstrip(" \t>")
        for end in range(start, min(start + 40, len(lines))):
            candidate = "\n".join([first, *lines[start + 1 : end + 1]])
            found = _comparison(candidate)
            if found is not None:
                return found
    return None


def _from_span(span: str, subtask: str) -> str | None:
    """The answer inside one candidate span (a tag's content, a fenced block, a line)."""
    span = _unfence(span)
    if not span:
        return None
    found = _comparison(span) or _last_comparison(span)
    if found is not None:
        return found[1] if subtask == "deduction" else found[0]
    loose = _LOOSE_CALL_RE.match(span) if len(span) <= 2000 else None  # "f(4) = 7", "f(4) -> 7", "f(4) returns 7"
    if loose is not None:
        args, value = loose.group(1).strip(), loose.group(2).strip().rstrip(".").strip()
        if subtask == "deduction" and is_literal(value):
            return value
        if subtask == "abduction" and _is_arg_list(args):
            return args
    if subtask == "deduction":
        return span if is_literal(span) else None
    try:  # abduction: a call "f(3, 4)", or a bare argument list "3, 4"
        tree = ast.parse(span, mode="eval")
        args = _call_parts(tree.body, span)
        if args is not None:
            return args
    except _PARSE_ERRORS:
        pass
    try:
        parse_args(span)
    except LiteralError:
        return None
    return span


def _is_arg_list(text: str) -> bool:
    try:
        parse_args(text)
    except LiteralError:
        return False
    return True


def _defines(code: str, entry: str | None) -> bool:
    if entry is None:
        return bool(re.search(r"(?m)^[ \t]*(?:async[ \t]+)?def\s+\w+\s*\(", code))
    return bool(re.search(rf"(?m)^[ \t]*(?:async[ \t]+)?def\s+{re.escape(entry)}\s*\(", code))


def _program(text: str, entry: str, language: str) -> str | None:
    spans = _tag_spans(text)
    if spans:
        return _unfence(spans[-1]) or None
    blocks = _fences(text)
    for wanted in (entry, None):
        for tag, body in reversed(blocks):
            if tag in ("", "python", "py", "python3") and _defines(body, wanted):
                return body.strip()
    if language != "python" and blocks:
        return blocks[-1][1].strip() or None
    stripped = text.strip()
    if _defines(stripped, None) and re.match(r"(?:from|import|def|async|@|#|class)\b", stripped):
        return stripped
    return None


def extract_code_answer(text: str | None, subtask: str, *, entry: str = "f", language: str = "python") -> str | None:
    """The answer written in a model response to a code-reasoning problem, or ``None``.

    Deduction (an output value) and abduction (an input argument list): the last ``<answer>...</answer>`` or
    ``[ANSWER]...[/ANSWER]`` span, else the last ``assert f(...) == X`` in the text, else the last fenced block,
    else the last ``... is X`` / ``Output: X`` phrase whose value is a literal. Inside a span, ``assert f(A) == X``
    and ``f(A) == X`` give ``X`` (deduction) or ``A`` (abduction); a call ``f(A)`` gives ``A``. Deduction answers
    must be Python literals; abduction answers are argument lists (``"[1, 2], 3"``, keywords allowed).

    Induction (a program): the last answer span (a fence inside it is unwrapped), else the last fenced
    ``python`` block defining ``entry``, else the last one defining any function, else (DSL tasks) the last fenced
    block of any language, else the whole text when it starts like Python code defining a function.

    Args:
        text: the response (``None`` gives ``None``).
        subtask: ``deduction``, ``abduction`` or ``induction``.
        entry: the function name the problem asks for (induction).
        language: ``python``, ``robustfill`` or ``deepcoder`` (induction: DSL programs are accepted for DSL tasks).

    Returns:
        The answer text, stripped, or ``None`` when there is none.

    >>> extract_code_answer("Tracing it... so [ANSWER]assert f(3) == 7[/ANSWER]", "deduction")
    '7'
    >>> extract_code_answer("Step by step: f([1, 2]) doubles.\\nassert f([1, 2]) == [2, 4]", "abduction")
    '[1, 2]'
    >>> extract_code_answer("The output is 'abc'.", "deduction"), extract_code_answer("<answer>f(2, 'x')</answer>", "abduction")
    ("'abc'", "2, 'x'")
    >>> extract_code_answer("```python\\ndef f(x):\\n    return x * 2\\n```", "induction")
    'def f(x):\\n    return x * 2'
    """
    if subtask not in SUBTASKS:
        raise ValueError(f"Unknown subtask {subtask!r}; expected one of {', '.join(SUBTASKS)}")
    if not text:
        return None
    text = str(text)
    if subtask == "induction":
        program = _program(text, entry, language)
        return program[:MAX_CODE_CHARS] if program else None
    spans = _tag_spans(text)
    if spans:
        return _from_span(spans[-1], subtask)
    opened = list(_OPEN_TAG_RE.finditer(text))
    if opened:  # an unclosed answer tag: read what follows the last one
        return _from_span(text[opened[-1].end() :][:MAX_TAIL_CHARS], subtask)
    text = text[-MAX_TAIL_CHARS:]
    found = _last_comparison(text)
    if found is not None:
        return found[1] if subtask == "deduction" else found[0]
    for _, body in reversed(_fences(text)):
        answer = _from_span(body, subtask)
        if answer is not None:
            return answer
    direct = _from_span(text, subtask)
    if direct is not None:
        return direct
    found = _inline_comparison(text)
    if found is not None:
        return found[1] if subtask == "deduction" else found[0]
    for match in list(_PROSE_RE.finditer(text))[::-1][:10]:
        if len(match.group(1)) > 1000:
            continue
        answer = _prose_value(match.group(1), subtask)
        if answer is not None:
            return answer
    return None


def _inline_comparison(text: str) -> tuple[str, str] | None:
    """The last ``name(args) == expected`` written inside a line of prose (``"I think f(3) == 7."``)."""
    for line in reversed(text.splitlines()[-50:]):
        if "==" not in line or len(line) > 2000:
            continue
        for match in list(_CALL_START_RE.finditer(line))[:10]:
            tail = line[match.start() :].strip().rstrip(".").strip()
            found = _comparison(tail)
            if found is not None:
                return found
    return None


def _prose_value(phrase: str, subtask: str) -> str | None:
    """The longest leading part of a prose phrase (``"[1, 2] for this input"``) that reads as an answer."""
    phrase = phrase.strip()[:300]
    cuts = [len(phrase)] + [m.start() for m in reversed(list(re.finditer(r"\s", phrase)))]
    for cut in cuts[:8]:
        answer = _from_span(phrase[:cut], subtask)
        if answer is not None:
            return answer
    return None


def bind_entry(code: str, entry: str) -> str | None:
    """``code`` ready to be called as ``entry``: unchanged when it defines ``entry``, else with ``entry = <its last
    top-level function>`` appended; ``None`` when it does not parse as Python or defines no function. The code is
    parsed, never run.

    >>> bind_entry("def g(x):\\n    return x", "f")
    'def g(x):\\n    return x\\n\\nf = g\\n'
    >>> bind_entry("x = 1", "f") is None, bind_entry("def f(:", "f") is None
    (True, True)
    """
    try:
        tree = ast.parse(code)
    except _PARSE_ERRORS:
        return None
    names = [node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    assigned = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    if entry in names or entry in assigned:
        return code
    if not names:
        return None
    return f"{code.rstrip()}\n\n{entry} = {names[-1]}\n"
