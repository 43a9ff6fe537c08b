"""The RobustFill and DeepCoder interpreters: hand-checked semantics, errors, limits, sampling and fuzzing."""

from __future__ import annotations

import random
import string

import pytest

from metamod.tasks.dsl import DSLS, DSLError, deepcoder, get_dsl, robustfill
from metamod.tasks.dsl.base import StepBudget

dc_run, rf_run = deepcoder.run, robustfill.run


def dc1(body: str, xs: list[int], **kwargs):
    """Run a one-list-input DeepCoder program ``a <- [int]`` followed by ``body``."""
    return dc_run("a <- [int]\n" + body, (xs,), **kwargs)


def assert_dsl_error(fn, *args, match: str | None = None, **kwargs) -> str:
    with pytest.raises(DSLError, match=match) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message and message
    return message


# ----------------------------------------------------------------------------------------- the registry


def test_registry_contract():
    assert sorted(DSLS) == ["deepcoder", "robustfill"]
    for key, dsl in DSLS.items():
        assert dsl.name == key and get_dsl(key) is dsl
        for member in ("parse", "run", "to_text", "sample_program", "sample_inputs", "describe"):
            assert callable(getattr(dsl, member))
        assert 200 < len(dsl.describe()) < 2000
    assert issubclass(DSLError, ValueError)
    assert_dsl_error(get_dsl, "lisp", match="expected one of deepcoder, robustfill")


# ------------------------------------------------------------------------------------ DeepCoder semantics

XS = [3, -1, 4, 1, -5]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("b <- HEAD a", 3),
        ("b <- LAST a", -5),
        ("b <- MINIMUM a", -5),
        ("b <- MAXIMUM a", 4),
        ("b <- REVERSE a", [-5, 1, 4, -1, 3]),
        ("b <- SORT a", [-5, -1, 1, 3, 4]),
        ("b <- SUM a", 2),
        ("b <- COUNT (>0) a\nc <- TAKE b a", [3, -1, 4]),
        ("b <- COUNT (>0) a\nc <- DROP b a", [1, -5]),
        ("b <- COUNT (<0) a\nc <- ACCESS b a", 4),  # 0-based: a[2]
    ],
)
def test_deepcoder_first_order(body, expected):
    assert dc1(body, XS) == expected


def test_deepcoder_take_drop_access_edges():
    prog = "a <- [int]\nn <- int\nb <- TAKE n a"
    assert dc_run(prog, ([1, 2, 3], 10)) == [1, 2, 3]
    assert dc_run(prog, ([1, 2, 3], 0)) == []
    assert dc_run(prog.replace("TAKE", "DROP"), ([1, 2, 3], 10)) == []
    # negative n follows Python slicing, as in the paper's Python reference
    neg = "a <- [int]\nb <- MINIMUM a\nc <- TAKE b a"
    assert dc_run(neg, ([-1, 5, 6],)) == [-1, 5]
    assert dc_run(neg.replace("TAKE", "DROP"), ([-1, 5, 6],)) == [6]
    access = "a <- [int]\nn <- int\nb <- ACCESS n a"
    assert dc_run(access, ([7, 8], 1)) == 8
    assert_dsl_error(dc_run, access, ([7, 8], 2), match=r"ACCESS 2 of a list of length 2 has no value \(NULL\)")
    assert_dsl_error(dc1, "b <- MINIMUM a\nc <- ACCESS b a", [-1, 2], match="NULL")  # negative index is NULL


@pytest.mark.parametrize("fn", ["HEAD", "LAST", "MINIMUM", "MAXIMUM"])
def test_deepcoder_null_on_empty(fn):
    assert_dsl_error(dc1, f"b <- {fn} a", [], match=rf"b <- {fn}: {fn} of an empty list has no value \(NULL\)")


def test_deepcoder_empty_lists_are_fine_elsewhere():
    assert dc1("b <- SUM a", []) == 0
    assert dc1("b <- SCANL1 (+) a", []) == []
    assert dc1("b <- SORT a\nc <- COUNT (>0) b", []) == 0


XM = [-3, -1, 0, 1, 2, 5]


@pytest.mark.parametrize(
    ("lam", "expected"),
    [
        ("(+1)", [-2, 0, 1, 2, 3, 6]),
        ("(-1)", [-4, -2, -1, 0, 1, 4]),
        ("(*2)", [-6, -2, 0, 2, 4, 10]),
        ("(/2)", [-2, -1, 0, 0, 1, 2]),  # floor division: -3 // 2 == -2, -1 // 2 == -1
        ("(*(-1))", [3, 1, 0, -1, -2, -5]),
        ("(**2)", [9, 1, 0, 1, 4, 25]),
        ("(*3)", [-9, -3, 0, 3, 6, 15]),
        ("(/3)", [-1, -1, 0, 0, 0, 1]),
        ("(*4)", [-12, -4, 0, 4, 8, 20]),
        ("(/4)", [-1, -1, 0, 0, 0, 1]),
    ],
)
def test_deepcoder_map_lambdas(lam, expected):
    assert dc1(f"b <- MAP {lam} a", XM) == expected


@pytest.mark.parametrize(
    ("pred", "kept"),
    [("(>0)", [1, 2, 5]), ("(<0)", [-3, -1]), ("(%2==0)", [0, 2]), ("(%2==1)", [-3, -1, 1, 5])],
)
def test_deepcoder_predicates(pred, kept):
    assert dc1(f"b <- FILTER {pred} a", XM) == kept
    assert dc1(f"b <- COUNT {pred} a", XM) == len(kept)


@pytest.mark.parametrize(
    ("op", "zipped", "scanned"),
    [
        ("(+)", [5, 3], [3, 2, 4, 0]),
        ("(-)", [-3, -7], [3, 4, 2, 6]),
        ("(*)", [4, -10], [3, -3, -6, 24]),
        ("MIN", [1, -2], [3, -1, -1, -4]),
        ("MAX", [4, 5], [3, 3, 3, 3]),
    ],
)
def test_deepcoder_operators(op, zipped, scanned):
    assert dc_run(f"a <- [int]\nb <- [int]\nc <- ZIPWITH {op} a b", ([1, -2, 3], [4, 5])) == zipped
    assert dc1(f"b <- SCANL1 {op} a", [3, -1, 2, -4]) == scanned


def test_deepcoder_paper_example():
    prog = "a <- [int]\nb <- FILTER (<0) a\nc <- MAP (*4) b\nd <- SORT c\ne <- REVERSE d"
    assert dc_run(prog, ([-17, -3, 4, 11, 0, -5, -9, 13, 6, 6, -8, 11],)) == [-12, -20, -32, -36, -68]


def test_deepcoder_range_error_and_clamp():
    assert_dsl_error(dc1, "b <- MAP (*4) a", [100], match=r"b <- MAP: value 400 is outside .*\[-256, 255\]")
    assert dc1("b <- MAP (*4) a", [100, -100, 3], overflow="clamp") == [255, -256, 12]
    assert dc1("b <- MAP (*2) a", [127, -128]) == [254, -256]  # the range ends are inside
    assert_dsl_error(dc1, "b <- SUM a", [200, 100], match="value 300")
    assert dc1("b <- SUM a", [200, 100], overflow="clamp") == 255
    assert dc1("b <- SCANL1 (*) a", [16, 16, -1, 2], overflow="clamp") == [16, 255, -255, -256]
    assert_dsl_error(dc1, "b <- SCANL1 (*) a", [16, 16, -1, 2], match="value 256")
    assert_dsl_error(dc1, "b <- SORT a", [300], match="outside the DeepCoder range")  # inputs: both modes
    assert_dsl_error(dc1, "b <- SORT a", [300], overflow="clamp", match="outside the DeepCoder range")
    assert_dsl_error(dc1, "b <- SORT a", [1], overflow="wrap", match="overflow must be one of error, clamp")


def test_deepcoder_bad_inputs():
    prog = "a <- [int]\nn <- int\nb <- TAKE n a"
    for bad in [([1], 1.5), ([1], True), ([True], 1), ([[1]], 1), (3, 1), (None, 1), ("ab", 1), ({1: 2}, 1)]:
        assert_dsl_error(dc_run, prog, bad, match="input")
    assert_dsl_error(dc_run, prog, ([1],), match=r"takes 2 input\(s\) \(a: \[int\], n: int\), got 1")
    assert_dsl_error(dc_run, prog, "ab", match="inputs must be a tuple")
    assert_dsl_error(dc_run, prog, (list(range(101)), 1), match="at most 100")
    assert dc_run(prog, ((1, 2, 3), 2)) == [1, 2]  # a tuple is read as a list


# ------------------------------------------------------------------------------------- DeepCoder syntax


def test_deepcoder_syntax_variants():
    canonical = "a <- [int]\nb <- int\nc <- SORT a\nd <- TAKE b c"
    for text in [
        canonical,
        "a <- [int] | b <- int | c <- SORT a | d <- TAKE b c",
        "a = [ int ]; b ← int; c = sort a  # comment\n\nd <- Take b c",
    ]:
        assert deepcoder.to_text(text) == canonical
    prog = deepcoder.parse("x <- [int]\ny <- [int]\nz <- ZIPWITH (min) x y\nw <- MAP (* -1) z")
    assert [line.lam for line in prog.lines] == ["MIN", "(*(-1))"]
    assert prog.input_types == ("[int]", "[int]") and prog.output_type == "[int]"
    assert deepcoder.parse(prog) is prog and deepcoder.parse(str(prog)) == prog


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a <- [int]\nb <- FOO a", r"line 2: unknown function 'FOO'; expected one of HEAD,"),
        ("a <- [int]\nb <- TAKE a", r"line 2: TAKE takes 2 arguments \(int, \[int\]\), got 1"),
        ("a <- [int]\nb <- SORT a a", r"SORT takes 1 argument \(\[int\]\), got 2"),
        ("a <- [int]\nb <- TAKE a a", r"line 2: argument 1 of TAKE must be int, but 'a' is \[int\]"),
        ("a <- [int]\nb <- HEAD a\nc <- SORT b", r"line 3: argument 1 of SORT must be \[int\], but 'b' is int"),
        ("a <- [int]\nb <- SORT z", r"undefined variable 'z'"),
        ("a <- [int]\nb <- TAKE 3 a", r"undefined variable '3' \(DeepCoder has no literals"),
        ("a <- [int]\na <- SORT a", r"variable 'a' is already defined"),
        ("a <- [int]\nb <- MAP a", r"MAP needs an int -> int lambda first, .* got nothing"),
        ("a <- [int]\nb <- MAP (>0) a", r"MAP needs an int -> int lambda first"),
        ("a <- [int]\nb <- FILTER (+1) a", r"FILTER needs an int -> bool predicate"),
        ("a <- [int]\nb <- ZIPWITH (+1) a a", r"ZIPWITH needs an int -> int -> int operator"),
        ("a <- [int]\nb <- HEAD (+1) a", r"HEAD takes no lambda, got '\(\+1\)'"),
        ("a <- [int]\nb <- MAP (*5) a", r"unknown lambda '\(\*5\)'"),
        ("a <- [int]\nb <- SORT a\nc <- int", r"line 3: input 'c' is declared after a statement"),
        ("b <- SORT a", r"undefined variable 'a'|declares no inputs"),
        ("a <- [int]", r"no statements"),
        ("", r"declares no inputs"),
        ("a <- [int]\nSORT a", r"line 2: expected 'variable <- FUNCTION args'"),
        ("a <- [int]\nhead <- SORT a", r"'head' is not a valid variable name"),
        ("a <- [int]\nb <- SORT a )", r"unexpected '\)'"),
        ("a <- [int]\nb <-", r"nothing after the arrow"),
        ("a <- float\nb <- SORT a", r"unknown function 'float'"),
    ],
)
def test_deepcoder_parse_errors(text, match):
    assert_dsl_error(deepcoder.parse, text, match=match)


def test_deepcoder_size_limits():
    assert_dsl_error(deepcoder.parse, "a <- [int]\n" + "b <- SORT a\n" * 3 + " " * 10_000, match="characters")
    long = "a <- [int]\n" + "\n".join(f"v{i} <- SORT {'a' if i == 0 else f'v{i - 1}'}" for i in range(41))
    assert_dsl_error(deepcoder.parse, long, match="at most 40")
    many = "\n".join(f"i{k} <- int" for k in range(6)) + "\nb <- HEAD i0"
    assert_dsl_error(deepcoder.parse, many, match="at most 5")
    assert_dsl_error(deepcoder.parse, 42, match="must be text")


def test_deepcoder_step_budget():
    prog = "a <- [int]\nb <- SORT a\nc <- REVERSE b\nd <- MAP (+1) c"
    assert dc_run(prog, (list(range(50)),), max_steps=1000)[0] == 50
    assert_dsl_error(dc_run, prog, (list(range(50)),), max_steps=100, match="step budget exceeded")
    assert_dsl_error(StepBudget, -1, match="max_steps must be >= 1")


# ----------------------------------------------------------------------------------- RobustFill semantics

S = "Ann-Marie SMITH 42, zip 9a7 bob"


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        ("GetToken(Word, -1)", "bob"),
        ("GetToken(Number, 1)", "42"),
        ("GetToken(Number, -1)", "7"),
        ("GetToken(Word, 2)", "Marie"),
        ("GetToken(Word, 5)", "a"),
        ("GetToken(Alphanum, -2)", "9a7"),
        ("GetToken(AllCaps, 1)", "A"),
        ("GetToken(AllCaps, 3)", "SMITH"),
        ("GetToken(ProperCase, -1)", "Marie"),
        ("GetToken(Lower, 1)", "nn"),
        ("GetToken(Digit, 2)", "2"),
        ("GetToken(Char, 1)", "A"),
        ("GetToken(Char, -1)", "b"),
        ("GetFirst(Word, 2)", "AnnMarie"),
        ("GetAll(Number)", "4297"),
        ("GetAll(ProperCase)", "AnnMarie"),
        ('GetUpto(",")', "Ann-Marie SMITH 42,"),
        ('GetFrom(",")', " zip 9a7 bob"),
        ("GetUpto(Number)", "Ann-Marie SMITH 42"),
        ("GetFrom(Number)", ", zip 9a7 bob"),
        ('Replace(" ", "_")', "Ann-Marie_SMITH_42,_zip_9a7_bob"),
        ("ToCase(AllCaps)", S.upper()),
        ("ToCase(Lower)", S.lower()),
        ("ToCase(Proper)", "Ann-Marie Smith 42, Zip 9A7 Bob"),
        ("GetSpan(AllCaps, -1, Start, Number, 1, End)", "SMITH 42"),
        ('GetSpan(" ", 1, End, ",", 1, Start)', "SMITH 42"),
        ("GetSpan(Word, 1, End, Word, 2, Start)", "-"),
    ],
)
def test_robustfill_functions_and_types(program, expected):
    assert rf_run(program, (S,)) == expected


@pytest.mark.parametrize(
    ("k1", "k2", "expected"),
    [(1, 3, "abc"), (-3, -1, "def"), (2, 100, "bcdef"), (4, 2, ""), (-100, 2, "ab"), (3, 3, "c"), (7, 9, "")],
)
def test_robustfill_substr(k1, k2, expected):
    assert rf_run(f"SubStr({k1}, {k2})", ("abcdef",)) == expected


def test_robustfill_concat_compose_and_nesting():
    prog = 'Concat(GetToken(Word, 1), ConstStr(" "), ToCase(AllCaps, GetToken(Word, -1)))'
    assert rf_run(prog, ("Hello big World",)) == "Hello WORLD"
    assert rf_run("Compose(ToCase(Lower), GetToken(Word, 2))", ("Hello BIG World",)) == "big"
    deep = 'Compose(ToCase(AllCaps, GetToken(Word, 1)), GetFrom(" "))'  # attaches to the innermost call
    assert robustfill.parse(deep) == robustfill.parse('ToCase(AllCaps, GetToken(Word, 1, GetFrom(" ")))')
    assert rf_run(deep, ("ab cd ef",)) == "CD"
    assert rf_run("Trim(SubStr(3, -1))", ("a   b  ",)) == "b"
    assert rf_run("Trim()", ("  hi there \t",)) == "hi there"
    assert rf_run("GetAll(Number)", ("no digits",)) == ""
    assert rf_run('concat(consTstr("a\\"b\\\\"), gettoken(proper, 1))', ("x Yz",)) == 'a"b\\Yz'
    assert rf_run('ConstStr("\\n")', ("",)) == "\n"


@pytest.mark.parametrize(
    ("program", "text", "match"),
    [
        ("GetToken(Word, 3)", "two words", r"'two words' has 2 Word matches, so match 3 does not exist"),
        ("GetToken(Word, -3)", "two words", r"match -3 does not exist"),
        ('GetUpto("@")', "no at", r"GetUpto\(\"@\"\): 'no at' has no '@' match"),
        ("GetFrom(Number)", "abc", r"has no Number match"),
        ("GetFirst(Word, 3)", "two words", r"has only 2 Word matches, fewer than 3"),
        ("GetSpan(Word, 2, Start, Word, 1, End)", "ab cd", r"the span would end \(at 2\) before it starts \(at 3\)"),
        ("GetSpan(Digit, 1, Start, Word, 1, End)", "ab cd", r"has 0 Digit matches"),
    ],
)
def test_robustfill_missing_matches_fail(program, text, match):
    assert_dsl_error(rf_run, program, (text,), match=match)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("Concat(Foo(1))", r"unknown function 'Foo' at position 8; expected one of ConstStr, SubStr"),
        ("Concat(GetToken(Word))", r"GetToken takes 2 parameters \(type, index\) .*; got 1 at position 21"),
        ("GetToken(Word, 1, 2)", r"got an extra argument '2' at position 19"),
        ('ConstStr("a", GetToken(Word, 1))', r"ConstStr takes 1 parameter \(text\); got an extra argument"),
        ('GetToken("x", 1)', r"GetToken: expected a token type \(Number, Word, .*\) at position 10"),
        ("GetToken(Word, 0)", r"expected a non-zero index in -100..100, got 0 at position 16"),
        ("SubStr(1, 101)", r"expected a non-zero position in -100..100, got 101"),
        ("GetFirst(Word, 0)", r"expected a count >= 1"),
        ("ToCase(Upside)", r"expected a case \(Proper, AllCaps, Lower\)"),
        ("GetSpan(Word, 1, Middle, Word, 1, End)", r"expected a boundary \(Start or End\)"),
        ('Replace("ab", "c")', r"expected a quoted single character"),
        ('GetUpto("")', r"expected a token type or a quoted single character"),
        ('ConstStr("")', r"expected a quoted string of 1..50"),
        ('ConstStr("abc)', r"unterminated string starting at position 10"),
        ("GetToken(Word, 1) x", r"unexpected 'x' at position 19 after the end"),
        ("Concat(Concat(Trim()))", r"Concat may only be the outermost function"),
        ('Compose(ConstStr("a"), Trim())', r"never reads its input"),
        ("Concat(", r"expected a function name at position 8, got end of text"),
        ("GetToken(Word, 12345678)", r"too large"),
        ("Trim(]", r"unexpected character '\]'"),
        ("", r"expected a function name at position 1"),
    ],
)
def test_robustfill_parse_errors(text, match):
    assert_dsl_error(robustfill.parse, text, match=match)


def test_robustfill_limits_and_budget():
    deep = "ToCase(Lower, " * 11 + "Trim()" + ")" * 11
    assert_dsl_error(robustfill.parse, deep, match="nest more than 10")
    assert rf_run("ToCase(Lower, " * 9 + "Trim()" + ")" * 9, (" AB ",)) == "ab"
    assert_dsl_error(robustfill.parse, "Concat(" + "Trim(), " * 30 + "Trim())", match="more than 30 parts")
    assert_dsl_error(rf_run, "Trim()", ("x" * 1001,), match="at most 1000")
    assert_dsl_error(rf_run, "Trim()", ("x" * 200,), max_steps=100, match="step budget exceeded")
    for bad in ["abc", ("a", "b"), (3,), None, [None]]:
        assert_dsl_error(rf_run, "Trim()", bad, match="inputs must be a one-element tuple")
    assert rf_run("Trim()", [" a "]) == "a"
    assert_dsl_error(robustfill.Program, (), match="at least one expression")


# ------------------------------------------------------------------------------------ shared: round trip


@pytest.mark.parametrize("name", ["deepcoder", "robustfill"])
def test_sampled_programs_round_trip_and_grow(name):
    dsl = DSLS[name]
    for level in range(1, 6):
        for seed in range(4):
            prog = dsl.sample_program(random.Random(seed), level)
            text = dsl.to_text(prog)
            assert dsl.parse(text) == prog and dsl.to_text(text) == text
            if name == "deepcoder":
                assert len(prog.lines) == level and 1 <= len(prog.inputs) <= 3
            else:
                assert len(prog.parts) == level
                depth = max(len(robustfill._chain(p)) for p in prog.parts)
                assert depth <= (1 if level <= 2 else 2 if level <= 4 else 3)


@pytest.mark.parametrize("name", ["deepcoder", "robustfill"])
def test_sampling_is_deterministic_and_non_degenerate(name):
    dsl = DSLS[name]
    texts = set()
    for seed in range(6):
        level = seed % 5 + 1
        a, b = dsl.sample_program(random.Random(seed), level), dsl.sample_program(random.Random(seed), level)
        assert dsl.to_text(a) == dsl.to_text(b)
        xa, xb = dsl.sample_inputs(random.Random(99), a, 8), dsl.sample_inputs(random.Random(99), b, 8)
        assert xa == xb and len(xa) == 8 and len({repr(x) for x in xa}) == 8
        outputs = [dsl.run(a, x) for x in xa]
        assert len({repr(o) for o in outputs}) >= 2
        for k in range(len(xa[0])):
            assert not all(o == x[k] for o, x in zip(outputs, xa, strict=True))
        texts.add(dsl.to_text(a))
    assert len(texts) == 6
    assert_dsl_error(dsl.sample_program, random.Random(0), 0, match="level must be an int in 1..5")
    assert_dsl_error(dsl.sample_program, random.Random(0), 6, match="level must be an int in 1..5")
    assert_dsl_error(dsl.sample_inputs, random.Random(0), a, 0, match="n must be an int in 1..100")


def test_sample_inputs_for_given_programs():
    xs = DSLS["deepcoder"].sample_inputs(random.Random(5), "a <- [int]\nb <- MAP (**2) a\nc <- MAP (*4) b", 10)
    assert all(max((abs(v) for v in x[0]), default=0) <= 7 for x in xs)  # only inputs that stay in range
    assert len({repr(dc_run("a <- [int]\nb <- HEAD a", x)) for x in xs if x[0]}) >= 2
    xs = DSLS["robustfill"].sample_inputs(random.Random(5), 'GetUpto("@")', 5)
    assert all("@" in x[0] for x in xs)
    assert_dsl_error(DSLS["robustfill"].sample_inputs, random.Random(0), "GetToken(Word, 100)", 3, match="found only")
    assert_dsl_error(DSLS["deepcoder"].sample_inputs, random.Random(0), "a <- [int]\nb <- ACCESS a a", 3)


# -------------------------------------------------------------------------------------------- fuzzing

_DC_PIECES = [
    "a",
    "b",
    "c",
    " ",
    "\n",
    "<-",
    "=",
    "[int]",
    "int",
    "(+1)",
    "(*(-1))",
    "MIN",
    "(",
    ")",
    "|",
    ";",
    "MAP",
    "TAKE",
    "HEAD",
    "SCANL1",
    "ZIPWITH",
    "3",
    "-",
    "#",
    "(%2==1)",
    "[",
    "]",
    "é",
    "\x00",
]
_RF_PIECES = [
    "Concat(",
    "GetToken(",
    "Word",
    "Number",
    ", ",
    "1",
    "-1",
    "0",
    ")",
    "(",
    '"',
    '" "',
    "'@'",
    "\\",
    "Compose(",
    "ToCase(",
    "Lower",
    "GetSpan(",
    "Start",
    "SubStr(",
    "Trim()",
    "ConstStr(",
    ",",
    "é",
    "\x00",
]


def _fuzz_ok(fn, *args) -> None:
    try:
        fn(*args)
    except DSLError as err:
        assert "\n" not in str(err)


@pytest.mark.parametrize(("name", "pieces"), [("deepcoder", _DC_PIECES), ("robustfill", _RF_PIECES)])
def test_fuzz_random_text_only_raises_dsl_error(name, pieces):
    dsl = DSLS[name]
    rng = random.Random(1234)
    inputs = ([1, -2, 3], 2, [4]) if name == "deepcoder" else ("Ann SMITH 12@x.org",)
    for _ in range(1500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 25)))
        if rng.random() < 0.3:
            text = "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 40)))
        _fuzz_ok(dsl.parse, text)
        _fuzz_ok(dsl.run, text, inputs[: rng.randint(0, len(inputs))])
    for text in ["(" * 5000, ")" * 5000, "Concat(" * 3000, "a <- " * 3000, '"' * 999, "-" * 9000]:
        _fuzz_ok(dsl.parse, text)


@pytest.mark.parametrize("name", ["deepcoder", "robustfill"])
def test_fuzz_truncated_and_mutated_programs(name):
    dsl = DSLS[name]
    rng = random.Random(77)
    prog = dsl.sample_program(random.Random(3), 4)
    text = dsl.to_text(prog)
    inputs = dsl.sample_inputs(random.Random(3), prog, 2)
    for cut in range(len(text)):
        _fuzz_ok(dsl.run, text[:cut], inputs[0])
    for _ in range(400):
        chars = list(text)
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(len(chars))
            op = rng.random()
            if op < 0.4:
                del chars[k]
            elif op < 0.7:
                chars.insert(k, rng.choice(string.printable))
            else:
                chars[k] = rng.choice(string.printable)
        _fuzz_ok(dsl.run, "".join(chars), inputs[1])


@pytest.mark.parametrize("name", ["deepcoder", "robustfill"])
def test_fuzz_bad_input_values(name):
    dsl = DSLS[name]
    prog = dsl.sample_program(random.Random(8), 3)
    weird = [None, 1.5, True, -(10**30), "x" * 2000, [None], [[1]], {"a": 1}, (), b"ab", [10**6], [True, 1], "ab"]
    for value in weird:
        for args in [(value,), (value, value), (value, 1, [1]), value]:
            _fuzz_ok(dsl.run, prog, args)


def test_robustfill_to_text_quotes_and_sources():
    for text in [
        'Concat(ConstStr("a\\"b\\\\c\\n"), Trim(SubStr(3, -1)), GetUpto("\'"), Replace(" ", "\\t"))',
        'Concat(ConstStr("Word"), GetSpan(",", 1, End, Word, -1, Start, ToCase(Lower)))',
    ]:
        prog = robustfill.parse(text)
        assert robustfill.to_text(prog) == text and robustfill.parse(robustfill.to_text(prog)) == prog
    assert robustfill.parse('ConstStr("Word")').parts[0].params == ("Word",)  # a literal, not the type


def test_hand_built_programs_are_checked():
    line = deepcoder.Line("b", "SORT", None, ("a",))
    assert deepcoder.run(deepcoder.Program((("a", "[int]"),), (line,)), ([2, 1],)) == [1, 2]
    assert_dsl_error(deepcoder.Program, (("a", "[int]"),), (deepcoder.Line("b", ["SORT"], None, ("a",)),))
    assert_dsl_error(deepcoder.Program, (("a", "[int]"),), (deepcoder.Line("b", "TAKE", None, ("a", "a")),))
    assert_dsl_error(robustfill.Program, (robustfill.Expr("GetToken", ("Word", 0)),), match="non-zero index")
    assert_dsl_error(robustfill.Program, (robustfill.Expr("ConstStr", ("a",), robustfill.Expr("Trim", ())),))
    assert_dsl_error(robustfill.run, 42, ("x",), match="must be text")
