"""The dataset fixtures (tests/fixtures/datasets): each loads through its task's local-file path, in the real schema,
with canary golds that never reach a question, and together with every paper config's task options."""

import json
from pathlib import Path

import pytest
import yaml

from metamod.tasks import TaskConfig
from metamod.tasks.code.problem import CODE_KINDS
from tests.fixtures.datasets import CANARY_GOLDS, FIXTURES, NO_CANARY, ROOT, options_for

PAPER_CONFIGS = sorted((ROOT / "configs" / "eval").glob("*paper*.yaml")) + [
    ROOT / "configs" / "memory" / "mine_paper.yaml",
    ROOT / "configs" / "rollout" / "paper_gsm8k_mmlu_llama8b.yaml",
    ROOT / "configs" / "rollout" / "mc2_paper_mro_math500_llama8b.yaml",
]


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # FIXTURES paths are relative to the repository root


def _secrets(example) -> list[str]:
    """The hidden parts of an example's gold: the gold itself, or the secret inside a code gold's JSON."""
    if example.kind == "code_input":
        return [json.loads(example.gold)["input"]]
    if example.kind == "code_function":
        return [output for _, output in json.loads(example.gold)["tests"]]
    return [example.gold]


def _paper_task_options() -> list[tuple[str, str, dict]]:
    """(config file, task, its TaskConfig options) for every task every paper config names."""
    found = []
    for path in PAPER_CONFIGS:
        config = yaml.safe_load(path.read_text())
        name = path.relative_to(ROOT).as_posix()
        for task in config.get("tasks") or []:
            if isinstance(task, str):  # eval: task_options keyed by task
                found.append((name, task, dict((config.get("task_options") or {}).get(task, {}))))
            elif "options" in task:  # mining: {task, domain, options without the task_ prefix}
                found.append((name, task["task"], {f"task_{k}": v for k, v in task["options"].items()}))
            else:  # rollout: a list of TaskConfig mappings
                found.append((name, task["task"], {k: v for k, v in task.items() if k != "task"}))
        if "task" in config:  # rollout: one TaskConfig block at the top level
            found.append((name, config["task"], {k: v for k, v in config.items() if k.startswith("task_")}))
    return found


@pytest.mark.parametrize("task", sorted(FIXTURES))
def test_fixture_loads_with_canary_golds(task):
    loaded = TaskConfig(task=task, **FIXTURES[task]).load()
    examples = list(loaded.examples())
    assert 4 <= len(examples) <= 6, (task, len(examples))
    assert getattr(loaded, "skipped_ids", []) == [], f"{task}: every fixture row must be a valid example"
    for example in examples:
        assert example.question.strip() and example.gold.strip(), example.id
    secrets = [secret for example in examples for secret in _secrets(example)]
    for canary in CANARY_GOLDS.get(task, []):
        if examples[0].kind in CODE_KINDS:
            assert any(canary in secret for secret in secrets), (task, canary)
        else:
            assert canary in secrets, (task, canary, secrets)
        for example in examples:  # a canary stands for a hidden answer: never in what a model is shown
            shown = example.question + json.dumps(example.meta, default=str)
            assert canary not in shown, (task, example.id, canary)


def test_fixture_tables_are_complete():
    assert set(CANARY_GOLDS) | set(NO_CANARY) == set(FIXTURES) and not set(CANARY_GOLDS) & set(NO_CANARY)
    for task, options in FIXTURES.items():
        path = Path(options["task_data_files"])
        assert not path.is_absolute() and (ROOT / path).exists(), task
        assert Path(options_for(task)["task_data_files"]).is_absolute()
    readme = (ROOT / "tests" / "fixtures" / "datasets" / "README.md").read_text()
    for task in FIXTURES:
        assert f"`{task}`" in readme, f"README.md has no row for {task}"


def test_every_paper_config_task_loads_its_fixture():
    """A CPU shape run of a paper config: its own task options, with the fixture file in place of the hub."""
    found = _paper_task_options()
    assert {task for _, task, _ in found} == set(FIXTURES)
    for name, task, options in found:
        merged = {**options, **FIXTURES[task]}
        examples = list(TaskConfig(task=task, **merged).load().examples())
        assert 4 <= len(examples) <= 6, (name, task, merged, len(examples))


def test_code_fixtures_are_consistent():
    """Code golds are true: each output is what its code returns on its input, each program fits its pairs."""
    from metamod import sandbox

    if not sandbox.capabilities().namespaces:
        pytest.skip("the sandbox needs user + network namespaces on this host")
    from metamod.tasks.code.grading import grade_code

    def examples(task, **extra):
        return list(TaskConfig(task=task, **FIXTURES[task], **extra).load().examples())

    for task in ("cruxeval_i", "livecodebench_i"):  # runs each function on its reference input in the sandbox
        for example in examples(task):
            assert grade_code(json.loads(example.gold)["input"], example.gold, example.kind).correct, example.id
    for example in examples("robustfill", task_grade_pairs="all"):  # the reference is in metamod's DSL syntax
        assert grade_code(json.loads(example.gold)["reference"], example.gold, example.kind).correct, example.id
    deepcoder = [  # RHDA writes "x0 = INPUT | x1 = Map (*3) x0"; the same programs in metamod's syntax
        "a <- [int] | b <- MAP (*3) a | c <- SCANL1 (+) b",
        "a <- [int] | b <- SORT a | c <- REVERSE b",
        "a <- [int] | b <- [int] | c <- ZIPWITH (-) a b",
        "a <- [int] | b <- FILTER (%2==1) a | c <- MAP (*4) b",
    ]
    list_function = [
        "def f(xs):\n    return [x * 1009 for x in xs]",
        "def f(xs):\n    return [sum(xs) * 313 + len(xs)]",
        "def f(xs):\n    return [x + 7000 for x in reversed(xs)]",
        "def f(xs):\n    return [x * x * 11 for x in xs if x > 20]",
    ]
    mini_arc = [
        "def f(g):\n    return [row[::-1] for row in g]",
        "def f(g):\n    return [list(r) for r in zip(*g)]",
        "def f(g):\n    return [[6 if v == 3 else v for v in row] for row in g]",
        "def f(g):\n    return [g[-1]] + g[:-1]",
    ]
    for task, programs in (("deepcoder", deepcoder), ("list_function", list_function), ("mini_arc", mini_arc)):
        for example, program in zip(examples(task, task_grade_pairs="all"), programs, strict=True):
            assert grade_code(program, example.gold, example.kind).correct, (example.id, program)
