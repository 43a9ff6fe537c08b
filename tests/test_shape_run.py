"""Every paper config, end to end on a CPU (``metamod shape-run``): it completes, memories start cold per task, no
prompt exceeds its budget, and a gold canary holds: no fixture gold reaches any prompt, memory file or training
prompt, and only the methods each paper defines to use gold-derived signals are marked ``uses_gold``.

Marked ``shape`` (``make test-shape``, run by ``.ci/run`` after the default tier): about four minutes on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from metamod.llm.budget import estimate_tokens, question_of
from metamod.shape_run import ROLLOUT_FOR_TRAIN, ShapeRunConfig, shape_kind, shape_run
from metamod.tasks import TaskConfig
from tests.fixtures.datasets import CANARY_GOLDS, FIXTURES, ROOT

pytestmark = pytest.mark.shape

PAPER_CONFIGS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").glob("**/*paper*.yaml"))
BEHAVIOURS = str(ROOT / "tests" / "fixtures" / "behaviours" / "behaviours.jsonl")

#: per eval config, the methods its paper defines to use gold-derived signals (and nothing else may):
#: MC² tags each reflection success / failure from the correctness flag (C.1, C.4); no other method of the four
#: papers reads gold (BoT learns from every answered question, DC / ACE curate without labels, MARCO learns from
#: the interpreter's checks, the moderator's paper rewards never score the answer)
DECLARED_GOLD = {
    "configs/eval/mc2_paper.yaml": {"mc2", "mro_micro", "reasoner_updates"},
    "configs/eval/mc2_paper_qwen3.yaml": {"mc2", "mro_micro", "reasoner_updates"},
}


def test_every_paper_config_is_covered():
    assert len(PAPER_CONFIGS) >= 15, PAPER_CONFIGS  # 8 eval, 3 train, 2 rollout, mining and fitting
    kinds = {shape_kind(p) for p in PAPER_CONFIGS}
    assert kinds == {"eval", "rollout", "train", "mine", "fit"}


@pytest.fixture(scope="module")
def shape_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shape")


@pytest.fixture(scope="module")
def shape_model(shape_root) -> str:
    """The tiny model every role of every shape run uses (positions past every paper context), built once."""
    from metamod.llm.tiny import ensure_tiny_model

    return str(ensure_tiny_model(shape_root / "tiny-model", max_position_embeddings=131072))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


class Canaries:
    """The fixture golds a run must hide, per task: a task's canaries that none of its own questions shows.

    ``cruxeval_o`` and ``cruxeval_i`` read one file: the input deduction shows is the gold abduction hides, and the
    reverse, so a prompt is checked against the canaries of the task whose question it holds (:func:`question_of`);
    a prompt that holds no question (a memory writer's) against those no question of the run shows.
    """

    def __init__(self, task_options: dict[str, dict]):
        self.questions: dict[str, str] = {}
        self.secret: dict[str, list[str]] = {}
        for task, options in task_options.items():
            base = task.split("@", 1)[0]
            shown = [ex.prompt_text() for ex in TaskConfig(task=base, **options).load().examples()]
            self.questions.update({f"{task}\n{i}": q for i, q in enumerate(shown)})
            self.secret[task] = [c for c in CANARY_GOLDS.get(base, []) if not any(c in q for q in shown)]
        everywhere = "\n".join(self.questions.values())
        self.anywhere = sorted({c for cs in self.secret.values() for c in cs if c not in everywhere})

    def leaks(self, text: str, task: str | None = None) -> list[str]:
        """The canaries ``text`` shows (of ``task``, or of the task whose question it holds, else of the run)."""
        if task is None:
            found = question_of(text, self.questions)
            task = found.split("\n", 1)[0] if found else None
        return [c for c in (self.secret[task] if task else self.anywhere) if c in text]


def _task_options(kind: str, shaped: dict) -> dict[str, dict]:
    """The task options a shape run loaded its questions with (eval: the shaped config's; else the fixtures')."""
    if kind == "eval":
        return {
            t: {k: v for k, v in shaped["task_options"][t].items() if k.startswith("task_")} for t in shaped["tasks"]
        }
    if kind == "train":
        shaped = yaml.safe_load((ROOT / ROLLOUT_FOR_TRAIN).read_text())
    # rollout, train and mine-behaviours: the task selection shared with eval (no fixture options: the fixtures')
    return {t: FIXTURES[t.partition("@")[0]] for t in shaped.get("tasks") or []}


@pytest.mark.parametrize("paper_config", PAPER_CONFIGS)
def test_paper_config_shape_run(paper_config, shape_root, shape_model):
    out = shape_root / Path(paper_config).stem
    report = shape_run(
        ShapeRunConfig(
            paper_config=str(ROOT / paper_config),
            fixtures=str(ROOT / "tests" / "fixtures" / "datasets"),
            output_dir=str(out),
            model=shape_model,
            questions=3,
            deps_dir=str(shape_root / "deps"),
            behaviours_fixture=BEHAVIOURS,
        )
    )
    run = Path(report["output_dir"])
    kind = report["kind"]
    canaries = Canaries(_task_options(kind, yaml.safe_load(Path(report["shape_config"]).read_text())))
    # ---- no prompt exceeds its budget: every prompt sent fits the config's context minus its max_tokens
    prompts = _lines(Path(report["prompt_log"]))
    assert prompts or kind in ("train", "fit"), "every model call goes through the prompt budget, which logs it"
    for prompt in prompts:
        assert estimate_tokens(prompt["messages"]) + prompt["max_tokens"] <= prompt["context"], prompt["model"]
    # ---- gold canary: no fixture gold in any prompt a model read
    for prompt in prompts:
        text = "\n".join(m["content"] for m in prompt["messages"])
        assert not canaries.leaks(text), f"{paper_config}: gold {canaries.leaks(text)} in a prompt"
    if kind == "eval":
        _check_eval(paper_config, run, canaries)
    elif kind == "train":
        _check_train(run, Path(report["deps"]["dataset"]), canaries)
    elif kind == "rollout":
        assert _lines(run / "traces.jsonl"), "the rollout wrote traces"
    elif kind == "mine":
        assert (run / "behaviours.jsonl").is_file() and (run / "embeddings.npz").is_file()
    elif kind == "fit":
        assert (run / "corpus.json").is_file()


def _check_eval(paper_config: str, run: Path, canaries: Canaries) -> None:
    document = json.loads((run / "results.json").read_text())
    rows = _lines(run / "samples.jsonl")
    assert rows and document["results"], "the evaluation completed with rows"
    methods = set(document["config"]["methods"])
    assert all(set(r["methods"]) == methods for r in rows[:1])
    # ---- declared gold use is exactly what the paper defines
    used = {m for m, reason in document["gold_use"].items() if reason}
    assert used == DECLARED_GOLD.get(paper_config, set()), document["gold_use"]
    # ---- every memory starts cold per task: one folder per (seed, method, task), observing that task alone, and the
    # first memory batch of every task is served nothing
    folders = sorted(p.parent for p in run.glob("memory-seed*/*/manifest.json"))
    assert not list(run.glob("memory-seed*/manifest.json")), "a memory carried over the run's tasks"
    for folder in folders:
        observed = json.loads((folder / "manifest.json").read_text())["extra"]["observed"]
        assert list(observed) == [folder.name], f"{folder} observed {list(observed)}"
    warm_start = bool(
        document["config"].get("memory_path") or (document["config"].get("memory_options") or {}).get("corpus")
    )
    for row in rows:  # without a warm start (a fitted corpus, memory_path) nothing learned can be served at first
        if row.get("memory_batch") == 0 and not warm_start:
            served = {i for r in row["methods"].values() for i in r.get("memory_items") or []} - {"generic"}
            assert not served, f"{row['task']} started warm: {sorted(served)}"
    # ---- gold canary in every memory file (its state, summaries, guidance logs), against its task's golds
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix in (".json", ".jsonl"):
                leaks = canaries.leaks(path.read_text(), task=folder.name)
                assert not leaks, f"gold {leaks} in {path}"
    # ---- the prompt budget is reported for every method
    for task_results in document["results"].values():
        for metrics in task_results.values():
            assert {"prompt_cut_questions", "prompt_too_long_questions"} <= set(metrics)


def _check_train(run: Path, dataset: Path, canaries: Canaries) -> None:
    from datasets import load_from_disk

    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["global_step"] >= 1 and summary["gold_use"] is None
    assert (run / "adapter_model.safetensors").is_file()
    for split in load_from_disk(str(dataset)).values():
        for prompt in split["prompt"]:
            text = "\n".join(m["content"] for m in prompt)
            assert not canaries.leaks(text), f"gold {canaries.leaks(text)} in a training prompt"
