"""The Bayesian Cheatsheet paper's tasks: AIME'25, Omni-MATH, PhysReason, NuminaMath-CoT and Camel Physics.

Each loader runs on a small local file written here in the real column layout of its hub source (see
docs/tasks.md, "Bayesian Cheatsheet tasks"); hub access is replaced by fakes that check the ids, configs, splits and
files asked for.
"""

import json
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metamod.errors import InputError
from metamod.tasks import TASKS, load_task, physreason, task_options
from metamod.tasks import reasoning_benchmarks as rb
from metamod.tasks.base import Example
from metamod.tasks.grading import is_equivalent


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------------------------------------------- registry


def test_registry_names_and_options():
    assert {"aime25", "omni_math", "physreason", "numina_math", "camel_physics"} <= set(TASKS)
    assert task_options(TASKS["physreason"]) == [
        "data_files",
        "include_images",
        "limit",
        "seed",
        "sub_questions",
        "use_captions",
        "variant",
    ]
    assert "min_difficulty" in task_options(TASKS["omni_math"]) and "max_difficulty" in task_options(TASKS["omni_math"])
    assert "require_gold" in task_options(TASKS["numina_math"])
    assert set(task_options(TASKS["camel_physics"])) == {"data_files", "boxed_gold", "require_gold", "limit", "seed"}
    # no hub is touched until examples are requested
    assert load_task("aime25").source == "opencompass/AIME2025[AIME2025-I+AIME2025-II/test]"
    assert load_task("physreason", variant="mini").source == "zhibei1204/PhysReason/PhysReason-mini.zip"


# ---------------------------------------------------------------------------------------------------- AIME'25


def test_aime25_local_file_and_degree_gold(tmp_path):
    path = _jsonl(
        tmp_path / "aime25.jsonl",
        [
            {"question": "Find the sum of all bases b > 9 ...", "answer": "70"},
            {"question": "An angle question ...", "answer": "336^\\circ"},
            {"question": "A problem with a broken answer", "answer": "x + 1"},
        ],
    )
    task = load_task("aime25", data_files=path)
    examples = list(task.examples())
    assert [(ex.id, ex.gold, ex.kind) for ex in examples] == [
        ("aime25-test-0", "70", "math"),
        ("aime25-test-1", "336", "math"),
    ]
    assert task.skipped_ids == ["aime25-test-2"]
    assert is_equivalent("The answer is \\boxed{336}", examples[1].gold, examples[1].kind)


def test_aime25_hub_joins_both_configs(monkeypatch):
    calls = []

    def fake_hub(path, config, split):
        calls.append((path, config, split))
        return {"question": [f"{config} problem {i}" for i in range(2)], "answer": ["1", "2"]}

    monkeypatch.setattr(rb, "load_hub_table", fake_hub)
    examples = list(load_task("aime25").examples())
    assert calls == [("opencompass/AIME2025", "AIME2025-I", "test"), ("opencompass/AIME2025", "AIME2025-II", "test")]
    assert [ex.id for ex in examples] == [
        "aime25-AIME2025-I-0",
        "aime25-AIME2025-I-1",
        "aime25-AIME2025-II-0",
        "aime25-AIME2025-II-1",
    ]
    assert examples[2].meta["split"] == "AIME2025-II" and examples[2].question == "AIME2025-II problem 0"


# ---------------------------------------------------------------------------------------------------- Omni-MATH

_OMNI_ROWS = [
    {
        "domain": ["Mathematics -> Algebra -> Intermediate Algebra -> Inequalities", "Mathematics -> Number Theory"],
        "difficulty": 7.5,
        "problem": "Find the least constant C such that ...",
        "solution": "... hence \\boxed{\\frac{1}{8}}.",
        "answer": "\\frac{1}{8}",
        "source": "imo_shortlist",
    },
    {
        "domain": ["Mathematics -> Discrete Mathematics -> Combinatorics"],
        "difficulty": 3.0,
        "problem": "How many subsets ...",
        "solution": "...",
        "answer": "$2^{n-1}$",
        "source": "hmmt",
    },
    {
        "domain": ["Mathematics -> Geometry -> Plane Geometry -> Triangulations"],
        "difficulty": 5.0,
        "problem": "Prove that ...",
        "solution": "...",
        "answer": "",
        "source": "usamo",
    },
]


def test_omni_math_meta_keeps_the_hierarchical_domain(tmp_path):
    task = load_task("omni_math", data_files=_jsonl(tmp_path / "test.jsonl", _OMNI_ROWS))
    first, second = list(task.examples())
    assert (first.id, first.gold, first.kind) == ("omni_math-test-0", "\\frac{1}{8}", "math")
    assert second.gold == "2^{n-1}"  # the enclosing $...$ is dropped
    assert first.meta["domain"] == _OMNI_ROWS[0]["domain"]  # as given, every path
    assert first.meta["domain_path"] == ["Mathematics", "Algebra", "Intermediate Algebra", "Inequalities"]
    assert (first.meta["domain_top"], second.meta["domain_top"]) == ("Algebra", "Discrete Mathematics")
    assert (first.meta["difficulty"], first.meta["competition"]) == (7.5, "imo_shortlist")
    assert first.meta["source"].endswith("test.jsonl")  # the file, not the competition
    assert task.skipped_ids == ["omni_math-test-2"]  # no answer
    assert is_equivalent("\\boxed{0.125}", first.gold, "math")


def test_omni_math_difficulty_range_and_limit(tmp_path):
    rows = [dict(_OMNI_ROWS[0], difficulty=d, problem=f"p{d}") for d in (1.0, 2.5, 4.0, 6.5, 9.0)]
    rows.append(dict(_OMNI_ROWS[0], difficulty=None, problem="no difficulty"))
    path = _jsonl(tmp_path / "omni.jsonl", rows)
    task = load_task("omni_math", data_files=path, min_difficulty=2.5, max_difficulty=6.5)
    assert [ex.meta["difficulty"] for ex in task.examples()] == [2.5, 4.0, 6.5]  # inclusive; no-difficulty row out
    assert task.skipped_ids == []  # left out by the option, not skipped
    assert len(load_task("omni_math", data_files=path)) == 6
    sample = [ex.id for ex in load_task("omni_math", data_files=path, limit=3, seed=1).examples()]
    assert len(sample) == 3 and sample == sorted(sample, key=lambda i: int(i.rsplit("-", 1)[1]))
    with pytest.raises(ValueError, match="min_difficulty 7 is above max_difficulty 2"):
        load_task("omni_math", data_files=path, min_difficulty=7, max_difficulty=2)
    with pytest.raises(ValueError, match="max_difficulty must be a number"):
        load_task("omni_math", data_files=path, max_difficulty="hard")


def test_omni_math_reads_parquet_with_list_domains(tmp_path):
    path = tmp_path / "omni.parquet"
    pq.write_table(pa.Table.from_pylist(_OMNI_ROWS[:2]), path)
    examples = list(load_task("omni_math", data_files=str(path)).examples())
    assert [ex.meta["domain_top"] for ex in examples] == ["Algebra", "Discrete Mathematics"]
    assert examples[0].meta["difficulty"] == 7.5


# ---------------------------------------------------------------------------------------------------- PhysReason


def _physreason_problem(n_parts: int, *, captions: str = "", answers: list | None = None) -> dict:
    structure = {"context": "A block of mass m slides down a frictionless incline of angle theta."}
    structure.update({f"sub_question_{k}": f"Question {k} about the block." for k in range(1, n_parts + 1)})
    return {
        "question_structure": structure,
        "answer": answers if answers is not None else [f"${k}.5 \\mathrm{{~m/s}}$" for k in range(1, n_parts + 1)],
        "explanation_steps": {f"sub_question_{k}": {"step_1": "..."} for k in range(1, n_parts + 1)},
        "difficulty": "medium",
        "image_captions": captions,
    }


def _physreason_zip(path: Path) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("PhysReason-mini/", "")
        archive.writestr("PhysReason-mini/cee_001/problem.json", json.dumps(_physreason_problem(3)))
        archive.writestr(
            "PhysReason-mini/comp_017/problem.json",
            json.dumps(_physreason_problem(2, captions="The incline rises to the right.")),
        )
        archive.writestr("PhysReason-mini/comp_017/images/fig1.png", b"\x89PNG")
        archive.writestr("__MACOSX/PhysReason-mini/._cee_001", b"junk")
    return str(path)


def test_physreason_expands_sub_questions(tmp_path):
    task = load_task("physreason", data_files=_physreason_zip(tmp_path / "PhysReason-mini.zip"), variant="mini")
    examples = list(task.examples())
    assert [ex.id for ex in examples] == [
        "physreason-cee_001-1",
        "physreason-cee_001-2",
        "physreason-cee_001-3",
        "physreason-comp_017-1",
        "physreason-comp_017-2",
    ]
    third = examples[2]
    assert third.kind == "approx" and third.gold == "3.5 \\mathrm{~m/s}"
    assert third.question.startswith("A block of mass m")
    assert "(1) Question 1 about the block.\n(2) Question 2 about the block." in third.question
    assert third.question.endswith("Answer part (3): Question 3 about the block.")
    assert "1.5" not in third.question and "2.5" not in third.question  # earlier answers are never shown
    assert third.meta | {"source": None} == {
        "source": None,
        "split": "mini",
        "row": 2,
        "problem_id": "cee_001",
        "part": 3,
        "num_parts": 3,
        "difficulty": "medium",
        "has_images": False,
        "variant": "mini",
    }
    figure = examples[3]
    assert figure.meta["has_images"] is True
    assert "Figure description: The incline rises to the right." in figure.question
    assert is_equivalent("3.49 m/s", third.gold, third.kind) and not is_equivalent("4 m/s", third.gold, third.kind)


def test_physreason_options(tmp_path):
    path = _physreason_zip(tmp_path / "PhysReason-mini.zip")
    last = list(load_task("physreason", data_files=path, sub_questions="last").examples())
    assert [ex.id for ex in last] == ["physreason-cee_001-3", "physreason-comp_017-2"]
    text_only = load_task("physreason", data_files=path, include_images=False)
    assert [ex.meta["problem_id"] for ex in text_only.examples()] == ["cee_001"] * 3
    assert text_only.left_out_images == 1
    no_captions = list(load_task("physreason", data_files=path, use_captions=False).examples())
    assert not any("Figure description" in ex.question for ex in no_captions)
    assert len(load_task("physreason", data_files=path, limit=2, seed=0)) == 2
    with pytest.raises(ValueError, match="variant must be one of full, mini"):
        load_task("physreason", variant="tiny")
    with pytest.raises(ValueError, match="sub_questions must be one of all, last"):
        load_task("physreason", data_files=path, sub_questions="first")


def test_physreason_folder_and_jsonl_sources(tmp_path):
    folder = tmp_path / "PhysReason_full"
    for problem_id, problem in (("p_a", _physreason_problem(1)), ("p_b", _physreason_problem(2, answers=["$x$"]))):
        (folder / problem_id).mkdir(parents=True)
        (folder / problem_id / "problem.json").write_text(json.dumps(problem), encoding="utf-8")
    examples = list(load_task("physreason", data_files=str(folder)).examples())
    # a single-part problem is asked as is; a problem with fewer answers than parts keeps the answered parts
    assert [(ex.id, ex.gold) for ex in examples] == [
        ("physreason-p_a-1", "1.5 \\mathrm{~m/s}"),
        ("physreason-p_b-1", "x"),
    ]
    assert examples[0].question.endswith("\n\nQuestion 1 about the block.")
    rows = [dict(_physreason_problem(2), problem_id="r1"), dict(_physreason_problem(1), problem_id="r2")]
    from_jsonl = list(load_task("physreason", data_files=_jsonl(tmp_path / "pr.jsonl", rows)).examples())
    assert [ex.id for ex in from_jsonl] == ["physreason-r1-1", "physreason-r1-2", "physreason-r2-1"]
    bad = _jsonl(tmp_path / "bad.jsonl", [{"problem_id": "x", "answer": ["1"]}])
    with pytest.raises(InputError, match="problem 'x' needs 'question_structure'"):
        load_task("physreason", data_files=bad)
    empty = tmp_path / "empty.zip"
    zipfile.ZipFile(empty, "w").close()
    with pytest.raises(InputError, match="no problem.json files found"):
        load_task("physreason", data_files=str(empty))


def test_physreason_hub_fetches_the_variant_zip(tmp_path, monkeypatch):
    fetched = []
    archive = _physreason_zip(tmp_path / "PhysReason-full.zip")

    def fake_fetch(repo_id, filename):
        fetched.append((repo_id, filename))
        return Path(archive)

    monkeypatch.setattr(physreason, "hub_file", fake_fetch)
    task = load_task("physreason")
    assert fetched == []
    assert len(list(task.examples())) == 5
    assert fetched == [("zhibei1204/PhysReason", "PhysReason-full.zip")]


# ---------------------------------------------------------------------------------------------------- NuminaMath-CoT

_NUMINA_ROWS = [
    {
        "source": "olympiads",
        "problem": "Find all f with f(x+y) = f(x) + f(y) ...",
        "solution": "First $\\boxed{0}$ is a candidate; in the end \\[ \\boxed{f(x) = \\frac{x^{2}}{\\{a\\}}} \\]",
        "messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}],
    },
    {
        "source": "cn_k12",
        "problem": "Explain why the sum of two odd numbers is even.",
        "solution": "Write them as 2a+1 and 2b+1; the sum is 2(a+b+1).",
        "messages": [],
    },
    {"source": "synthetic_math", "problem": "  ", "solution": "\\boxed{3}", "messages": []},
]


def test_numina_gold_is_the_last_boxed_with_nested_braces(tmp_path):
    task = load_task("numina_math", data_files=_jsonl(tmp_path / "numina.jsonl", _NUMINA_ROWS))
    first, second = list(task.examples())
    assert first.gold == "f(x) = \\frac{x^{2}}{\\{a\\}}"
    assert (first.id, first.kind, first.meta["origin"], first.meta["has_gold"]) == (
        "numina_math-train-0",
        "math",
        "olympiads",
        True,
    )
    # no \boxed{}: kept for mining with an empty gold that nothing matches
    assert (second.gold, second.meta["has_gold"], second.meta["origin"]) == ("", False, "cn_k12")
    assert not is_equivalent("even", second.gold, second.kind)
    assert Example.from_dict(second.to_dict()).gold == ""  # the empty gold survives a round trip
    assert task.skipped_ids == ["numina_math-train-2"]  # no question


def test_numina_require_gold_skips_unboxed_solutions(tmp_path):
    task = load_task("numina_math", data_files=_jsonl(tmp_path / "numina.jsonl", _NUMINA_ROWS), require_gold=True)
    assert [ex.id for ex in task.examples()] == ["numina_math-train-0"]
    assert task.skipped_ids == ["numina_math-train-1", "numina_math-train-2"]


def test_numina_hub_converts_only_the_needed_columns(monkeypatch):
    calls = []

    def fake_hub(path, config, split, columns=None):
        calls.append((path, config, split, list(columns)))
        return {column: [row[column] for row in _NUMINA_ROWS[:1]] for column in columns}

    monkeypatch.setattr(rb, "load_hub_table", fake_hub)
    examples = list(load_task("numina_math", limit=20000).examples())
    assert calls == [("AI-MO/NuminaMath-CoT", None, "train", ["problem", "solution", "source"])]
    assert [ex.gold for ex in examples] == ["f(x) = \\frac{x^{2}}{\\{a\\}}"]


# ---------------------------------------------------------------------------------------------------- Camel Physics

_CAMEL_ROWS = [
    {
        "role_1": "Physicist_RoleType.ASSISTANT",
        "topic;": "Quantum mechanics",
        "sub_topic": "The Schrödinger equation and its solutions",
        "message_1": "What is the ground-state energy of an electron in a 1 nm box?",
        "message_2": "Using E = h^2/(8 m L^2) we get about 0.376 eV.",
    },
    {
        "role_1": "Physicist_RoleType.ASSISTANT",
        "topic;": "Optics",
        "sub_topic": "Snell's law",
        "message_1": "Light enters water at 30 degrees; find the refraction angle.",
        "message_2": "sin(r) = sin(30)/1.33, so r = \\boxed{22.1^\\circ}.",
    },
]


def test_camel_physics_rows_have_no_gold_by_default(tmp_path):
    path = tmp_path / "camel.parquet"
    pq.write_table(pa.Table.from_pylist(_CAMEL_ROWS), path)
    examples = list(load_task("camel_physics", data_files=str(path)).examples())
    assert [(ex.id, ex.gold, ex.kind, ex.meta["has_gold"]) for ex in examples] == [
        ("camel_physics-train-0", "", "approx", False),
        ("camel_physics-train-1", "", "approx", False),
    ]
    assert examples[0].question == _CAMEL_ROWS[0]["message_1"]
    assert (examples[0].meta["topic"], examples[0].meta["sub_topic"]) == (
        "Quantum mechanics",
        _CAMEL_ROWS[0]["sub_topic"],
    )
    assert not is_equivalent("0.376 eV", examples[0].gold, examples[0].kind)
    boxed = load_task("camel_physics", data_files=str(path), boxed_gold=True, require_gold=True)
    assert [(ex.id, ex.gold, ex.meta["has_gold"]) for ex in boxed.examples()] == [
        ("camel_physics-train-1", "22.1^\\circ", True)
    ]
    assert boxed.skipped_ids == ["camel_physics-train-0"]


def test_camel_physics_reads_the_hub_zip_layout(tmp_path, monkeypatch):
    archive = tmp_path / "physics.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for number, row in enumerate(_CAMEL_ROWS, start=1):
            record = {key.rstrip(";"): value for key, value in row.items()}
            handle.writestr(f"physics/1_{number}_1.json", json.dumps(record))
        handle.writestr("physics/readme.txt", "not a record")
    local = list(load_task("camel_physics", data_files=str(archive)).examples())
    assert [ex.id for ex in local] == ["camel_physics-1_1_1", "camel_physics-1_2_1"]
    assert local[1].meta["topic"] == "Optics"
    fetched = []
    monkeypatch.setattr(rb, "hub_file", lambda repo_id, filename: fetched.append((repo_id, filename)) or archive)
    assert len(list(load_task("camel_physics", limit=1).examples())) == 1
    assert fetched == [("camel-ai/physics", "physics.zip")]


def test_bad_zip_and_missing_path(tmp_path):
    bad = tmp_path / "physics.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="not a readable zip archive"):
        load_task("camel_physics", data_files=str(bad))
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(broken, "w") as handle:
        handle.writestr("PhysReason-mini/p1/problem.json", "{not json")
    with pytest.raises(InputError, match="p1/problem.json is not valid UTF-8 JSON"):
        load_task("physreason", data_files=str(broken))
    with pytest.raises(FileNotFoundError, match="nothing.zip"):
        load_task("physreason", data_files=str(tmp_path / "nothing.zip"))
