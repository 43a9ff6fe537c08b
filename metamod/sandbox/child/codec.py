r"""Inside the sandbox: the JSON records sent to the host, and the literals the host sends in.

It runs inside the sandbox (bundled by :mod:`metamod.sandbox.launcher`): builtin modules only, never ``os``.
JSON is written by hand (``json`` would import ``re`` and double the start-up time); values are encoded with exact
one-key tags for the types JSON lacks, which :func:`metamod.sandbox.functions.decode_value` reverses on the host.

>>> encode((1, {"a": [None, 2.5]}, {3}, b"hi"), [1000])
'{"tuple":[1,{"dict":[["a",[null,2.5]]]},{"set":[3]},{"bytes":"6869"}]}'
>>> literal("[1, -2], {'k': (3+4j,)}, set()")
([1, -2], {'k': ((3+4j),)}, set())
>>> literal("__import__('os')")
Traceback (most recent call last):
...
ValueError: malformed node or string: Call is not a literal
>>> js('say "hi"\n')
'"say \\"hi\\"\\u000a"'
"""

import posix

_ESCAPES = {i: f"\\u{i:04x}" for i in range(32)}
_ESCAPES.update({34: '\\"', 92: "\\\\"})


class Unencodable(Exception):
    """A value that has no exact JSON encoding here (not made of literal types, too deep or too large)."""


def js(text):
    """``text`` as a JSON string literal (lone surrogates become ``\\uXXXX`` escapes when written)."""
    return '"' + str.translate(text, _ESCAPES) + '"'


def encode(value, budget, depth=0):
    """The tagged JSON of a literal value; ``budget`` is a one-item list holding the characters still allowed.

    The value is read through its REAL type's C methods (``list.__iter__``, ``dict.items``, ``int.__repr__`` ...),
    whatever a subclass overrides, so what is graded is what the object holds; the type is ``type(value)``, which
    a ``__class__`` property cannot fake.

    >>> class Liar(list):
    ...     def __iter__(self):
    ...         return iter([42])
    >>> encode(Liar([1, 2]), [100])
    '[1,2]'
    """
    if depth > 100:
        raise Unencodable("nested deeper than 100")
    kind = type(value)
    if value is None:
        out = "null"
    elif value is True or value is False:
        out = "true" if value else "false"
    elif issubclass(kind, int):
        try:
            out = int.__repr__(value)
        except ValueError:
            raise Unencodable("integer too large") from None
    elif issubclass(kind, float):
        out = float.__repr__(value)
        out = {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}.get(out, out)
    elif issubclass(kind, str):
        out = js(str.__str__(value))
    elif issubclass(kind, list):
        out = "[" + ",".join([encode(v, budget, depth + 1) for v in list.__iter__(value)]) + "]"
    elif issubclass(kind, tuple):
        out = '{"tuple":[' + ",".join([encode(v, budget, depth + 1) for v in tuple.__iter__(value)]) + "]}"
    elif issubclass(kind, (set, frozenset)):
        base = set if issubclass(kind, set) else frozenset
        items = [encode(v, budget, depth + 1) for v in base.__iter__(value)]
        out = '{"' + base.__name__ + '":[' + ",".join(items) + "]}"
    elif issubclass(kind, dict):
        pairs = dict.items(value)
        items = ["[" + encode(k, budget, depth + 1) + "," + encode(v, budget, depth + 1) + "]" for k, v in pairs]
        out = '{"dict":[' + ",".join(items) + "]}"
    elif issubclass(kind, (bytes, bytearray)):
        base = bytes if issubclass(kind, bytes) else bytearray
        out = '{"' + base.__name__ + '":"' + base.hex(value) + '"}'
    elif issubclass(kind, complex):
        real, imag = complex.real.__get__(value), complex.imag.__get__(value)
        out = '{"complex":[' + encode(real, budget) + "," + encode(imag, budget) + "]}"
    elif value is Ellipsis:
        out = '{"ellipsis":0}'
    else:
        raise Unencodable(f"a {kind.__name__} is not a literal value")
    budget[0] -= len(out)
    if budget[0] < 0:
        raise Unencodable("value too large to send back")
    return out


def literal(source):
    """``source`` (an expression made of Python literals) as a value: ``ast.literal_eval`` without importing ast."""
    import _ast

    tree = compile(source, "<input>", "eval", _ast.PyCF_ONLY_AST).body

    def number(node):
        value = convert(node)
        if type(value) not in (int, float, complex):
            raise ValueError("malformed node or string")
        return value

    def convert(node):
        if isinstance(node, _ast.Constant):
            return node.value
        if isinstance(node, _ast.Tuple):
            return tuple(map(convert, node.elts))
        if isinstance(node, _ast.List):
            return list(map(convert, node.elts))
        if isinstance(node, _ast.Set):
            return set(map(convert, node.elts))
        if (
            isinstance(node, _ast.Call)
            and isinstance(node.func, _ast.Name)
            and node.func.id == "set"
            and node.args == node.keywords == []
        ):
            return set()
        if isinstance(node, _ast.Dict):
            if len(node.keys) != len(node.values) or None in node.keys:
                raise ValueError("malformed node or string")
            return dict(zip(map(convert, node.keys), map(convert, node.values), strict=True))
        if isinstance(node, _ast.UnaryOp) and isinstance(node.op, (_ast.UAdd, _ast.USub)):
            value = number(node.operand)
            return +value if isinstance(node.op, _ast.UAdd) else -value
        if isinstance(node, _ast.BinOp) and isinstance(node.op, (_ast.Add, _ast.Sub)):
            left, right = number(node.left), number(node.right)
            if type(left) in (int, float) and type(right) is complex:
                return left + right if isinstance(node.op, _ast.Add) else left - right
        raise ValueError(f"malformed node or string: {type(node).__name__} is not a literal")

    return convert(tree)


def short_error(exc, limit=300):
    """``"TypeError: message"``, cut to ``limit`` characters (never raises)."""
    try:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except BaseException:  # a user exception whose __str__ fails
        text = type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Channel:
    """A record pipe: one ``<nonce> <json>`` line per record (just ``<json>`` without a nonce), written unbuffered."""

    def __init__(self, fd, nonce):
        self.fd, self.prefix = fd, nonce + " " if nonce else ""

    def send(self, body):
        data = (self.prefix + body + "\n").encode("utf-8", "backslashreplace")
        while data:
            data = data[posix.write(self.fd, data) :]
