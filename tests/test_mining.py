"""Behaviour mining: parsers on malformed output, the batched stages, the mine-behaviours command (files, resume,
settings mismatch), the PCA / query projector, and the lm embedder."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from metamod.config import ConfigError, SettingsMismatchError
from metamod.files import read_jsonl
from metamod.llm.base import Generation
from metamod.memory.cheatsheet import mine as mine_module
from metamod.memory.cheatsheet.mine import MineConfig, build_behaviours, main, mine_behaviours
from metamod.memory.cheatsheet.mining import (
    dedupe_by_name,
    parse_behaviour_records,
    placeholderise,
    reflect_and_extract,
    solve,
)
from metamod.memory.cheatsheet.projector import PCAProjection, ProjectorOptions, QueryProjector, train_projector

# --------------------------------------------------------------------------------------------- parsers


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            '```json\n{"Work Backwards": "Start from the goal 24 and undo each step.", "Try pairs": "Pair 8 with 3."}\n```',
            [("work-backwards", "Start from the goal <n> and undo each step."), ("try-pairs", "Pair <n> with <n>.")],
        ),
        (
            '[{"name": "check_units", "description": "Convert 3 km to metres first."}, {"name": "x"}]',
            [("check-units", "Convert <n> km to metres first.")],
        ),
        (
            '{"behaviours": [{"list-changes": "Write each change down, in order."}, "sum-up: add the 2 parts"]}',
            [("list-changes", "Write each change down, in order."), ("sum-up", "add the <n> parts")],
        ),
        (
            "Behaviours:\n1. **Track Total**: keep a running total of 17 items.\n"
            "- `verify`: check the result against the question.\n"
            "* Guess and check - try 1/2 of the amount, then adjust.",
            [
                ("track-total", "keep a running total of <n> items."),
                ("verify", "check the result against the question."),
                ("guess-and-check", "try <n> of the amount, then adjust."),
            ],
        ),
        (
            "Name: share-equally\nDescription: divide the total by the number of groups\n",
            [("share-equally", "divide the total by the number of groups")],
        ),
    ],
)
def test_parser_reads_json_lines_and_markdown(text, expected):
    assert parse_behaviour_records(text, limit=5) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        None,
        "I feel lucky to be able to help with this! Here's a revised version of the note.",
        "24",
        '{"broken json": ',
        "[1, 2, 3]",
        "Step 1: Determine the total number of eggs in the cool room.\nStep 2: Multiply 14 by 2.",
        "So the answer is: 24 eggs in total\nWe need to: add all the numbers\nNote: 1 + 2 * 3 * 9 = 24",
        "Behaviours:\nReflection:\nsolution: wrong\ncombine: 5 + 3 = 8",
        "\x00\x01 ::: --- ***",
        "{" * 5000,
    ],
)
def test_parser_returns_nothing_for_garbage_headers_sentences_and_one_word_descriptions(text):
    assert parse_behaviour_records(text, limit=5) == []


def test_parser_drops_duplicate_names_and_respects_the_limit():
    text = (
        "add-up: add the parts together.\nAdd Up: add them again.\ncheck: check the sum twice.\nplan: plan ahead a bit."
    )
    assert parse_behaviour_records(text, limit=5) == [
        ("add-up", "add the parts together."),
        ("check", "check the sum twice."),
        ("plan", "plan ahead a bit."),
    ]
    assert [n for n, _ in parse_behaviour_records(text, limit=2)] == ["add-up", "check"]
    assert parse_behaviour_records(text, limit=0) == []


def test_placeholders_replace_numbers_and_keep_words_identifiers_and_existing_placeholders():
    assert placeholderise("Multiply 12 by 3.5, subtract -4 and 1,000, keep 2 of 7/8.") == (
        "Multiply <n> by <n>, subtract <n> and <n>, keep <n> of <n>."
    )
    assert placeholderise("Use two numbers, log2 and x1 for the 2nd step; keep <n> and <x>.") == (
        "Use two numbers, log2 and x1 for the 2nd step; keep <n> and <x>."
    )
    assert placeholderise("Solve 3x + 2 = 11.") == "Solve <n>x + <n> = <n>."
    # names: numbers collapse so that problem-specific labels dedupe
    assert parse_behaviour_records("add 17 and 12: add the two amounts 17 and 12.", 3) == [
        ("add-n-and-n", "add the two amounts <n> and <n>.")
    ]


def test_dedupe_by_name_keeps_the_first_of_each_name():
    records = [("a", "first"), ("b", "x"), ("a", "second"), ("c", "y"), ("b", "z")]
    assert dedupe_by_name(records) == [("a", "first"), ("b", "x"), ("c", "y")]
    assert dedupe_by_name([{"n": "a"}, {"n": "a"}], key=lambda r: r["n"]) == [{"n": "a"}]


# --------------------------------------------------------------------------------------------- the stages

SOLVE_MARK = "Solve the problem"
REFLECT_MARK = "Attempted solution:"
EXTRACT_MARK = "Turn notes on a solved problem"


class ScriptedGenerator:
    """A fake Generator: the solution / reflection / extraction depend on the question's first number."""

    name = "scripted"
    context_length = None

    def __init__(self, fail_on_call: int | None = None) -> None:
        self.calls: list[tuple[str, list[str], object]] = []
        self.fail_on_call = fail_on_call

    def chat(self, conversations, sampling):
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise KeyboardInterrupt("simulated crash")
        contents = [conv[-1]["content"] for conv in conversations]
        stage = next(
            s
            for s, mark in (("solve", SOLVE_MARK), ("reflect", REFLECT_MARK), ("extract", EXTRACT_MARK))
            if mark in contents[0]
        )
        self.calls.append((stage, contents, sampling))
        out = []
        for content in contents:
            number = re.findall(r"\d+", content.split("Notes:")[-1] if stage == "extract" else content)
            key = number[0] if number else "0"
            if stage == "solve":
                text = f"Add things up. <answer>{key}</answer>"
            elif stage == "reflect":
                text = f"Solution about {key} is plausible. Keep a running total."
            else:
                kind = ("alpha", "beta", "gamma")[int(key) % 3]
                text = f"running-total: keep a total starting at {key}.\n{kind}-case: case {key} needs care."
            out.append(Generation(text=text, prompt_tokens=10, completion_tokens=5))
        return out

    def count_tokens(self, conversation) -> int:
        return 0

    def stages(self) -> list[str]:
        return [stage for stage, _, _ in self.calls]


def test_each_stage_is_one_batched_call_whose_prompts_hold_the_question_and_solution():
    from metamod.llm.base import SamplingConfig

    fake = ScriptedGenerator()
    questions = ["Tom has 3 apples.", "A bus holds 40 people."]
    solutions = solve(fake, SamplingConfig(temperature=0.0), questions)
    assert fake.stages() == ["solve"] and [q in c for q, c in zip(questions, fake.calls[0][1], strict=True)] == [
        True,
        True,
    ]
    records = reflect_and_extract(
        fake,
        SamplingConfig(temperature=0.0),
        list(zip(questions, [s.text for s in solutions], strict=True)),
        max_behaviours=1,
    )
    assert fake.stages() == ["solve", "reflect", "extract"]  # exactly one call per stage, all questions in it
    reflect_prompts, extract_prompts = fake.calls[1][1], fake.calls[2][1]
    assert all(q in p and s.text in p for q, s, p in zip(questions, solutions, reflect_prompts, strict=True))
    assert "Solution about 3 is plausible" in extract_prompts[0] and "<answer>" not in extract_prompts[0]
    assert fake.calls[2][2].stop == ["\nNotes:"]
    assert records == [[("running-total", "keep a total starting at <n>.")]] * 2  # max_behaviours=1


# --------------------------------------------------------------------------------------------- the command

TASKS = ["arith", "game24"]
TASK_OPTIONS = {"arith": {"task_split": "train", "task_levels": [1, 2]}}


def _config(tmp_path, **overrides) -> MineConfig:
    values = dict(
        tasks=TASKS,
        task_options=TASK_OPTIONS,
        limit=5,
        batch_size=2,
        embedder="hashing",
        embedder_options={"n_features": 64},
        output_dir=str(tmp_path / "mine"),
    )
    values.update(overrides)
    return MineConfig(**values)


def _files(folder) -> dict[str, object]:
    npz = np.load(folder / "embeddings.npz")
    return {
        "mined": [{k: v for k, v in r.items() if k != "seconds"} for r in read_jsonl(folder / "mined.jsonl")],
        "behaviours": read_jsonl(folder / "behaviours.jsonl"),
        "npz": {k: npz[k].tolist() for k in npz.files},
        "meta": json.loads((folder / "embeddings.json").read_text()),
    }


def test_mine_command_writes_the_corpus(tmp_path, monkeypatch):
    fake = ScriptedGenerator()
    monkeypatch.setattr(mine_module, "build_mining_generator", lambda config: fake)
    out = tmp_path / "mine"
    argv = ["--tasks", *TASKS, "--task_options", json.dumps(TASK_OPTIONS), "--limit", "5", "--batch_size", "2", "--embedder", "hashing",
            "--embedder_options", "{n_features: 64}", "--output_dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert len(fake.calls) == 3 * 5  # 10 questions in batches of 2, three stages each
    mined = read_jsonl(out / "mined.jsonl")
    assert [r["id"] for r in mined][:2] == ["arith/arith-0-0", "arith/arith-0-1"] and len(mined) == 10
    row = mined[0]
    assert set(row) >= {"solution", "reflection", "extraction", "records", "answer", "correct", "tokens", "gold"}
    assert row["tokens"]["solve"] == {"prompt": 10, "completion": 5}
    behaviours = read_jsonl(out / "behaviours.jsonl")
    assert behaviours[0]["id"] == "b00000" and set(behaviours[0]) == {
        "id", "name", "description", "domain", "question_id", "question", "correct"
    }  # fmt: skip
    names = {(b["domain"], b["name"]) for b in behaviours}
    assert len(names) == len(behaviours)  # deduplicated within each domain
    assert {d for d, _ in names} == {"arith", "game24"} and ("arith", "running-total") in names
    assert all("<n>" in b["description"] for b in behaviours)
    npz = np.load(out / "embeddings.npz")
    assert npz["behaviours"].shape == npz["queries"].shape == (len(behaviours), 64)
    assert npz["behaviours"].dtype == np.float32
    meta = json.loads((out / "embeddings.json").read_text())
    assert meta["rows"] == len(behaviours) and meta["embedder"]["name"] == "hashing"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["questions"] == 10 and summary["behaviours"] == len(behaviours)
    assert summary["behaviours_before_dedupe"] == 20 and set(summary["per_domain"]) == {"arith", "game24"}
    assert summary["tokens"]["extract"] == {"prompt": 100, "completion": 50}
    # a rerun finds everything done: no generator calls, identical files
    before = _files(out)
    monkeypatch.setattr(mine_module, "build_mining_generator", lambda config: pytest.fail("no work left"))
    assert main(argv) == 0 and _files(out) == before


def test_resume_after_a_crash_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    whole = _config(tmp_path, output_dir=str(tmp_path / "whole"))
    mine_behaviours(whole, generator=ScriptedGenerator())
    crashed = _config(tmp_path, output_dir=str(tmp_path / "crashed"))
    with pytest.raises(KeyboardInterrupt):
        mine_behaviours(crashed, generator=ScriptedGenerator(fail_on_call=7))  # inside batch 2 (of 0..4)
    assert len(read_jsonl(tmp_path / "crashed" / "mined.jsonl")) == 4
    resumed = ScriptedGenerator()
    summary = mine_behaviours(crashed, generator=resumed)
    assert len(resumed.calls) == 3 * 3 and summary["new_questions"] == 6
    seeds = [s.seed for _, _, s in resumed.calls]
    assert seeds[:3] == [6, 7, 8]  # batch 2 samples with the seeds an uninterrupted run uses
    assert _files(tmp_path / "crashed") == _files(tmp_path / "whole")


def test_resume_with_other_settings_is_refused_in_one_line(tmp_path):
    mine_behaviours(_config(tmp_path), generator=ScriptedGenerator())
    with pytest.raises(SettingsMismatchError) as err:
        mine_behaviours(_config(tmp_path, temperature=0.2), generator=ScriptedGenerator())
    message = str(err.value)
    assert "\n" not in message and "temperature: 0.7 -> 0.2" in message and "--overwrite true" in message
    # the embedder only changes the final files: allowed, and they are rebuilt
    mine_behaviours(_config(tmp_path, embedder_options={"n_features": 32}), generator=ScriptedGenerator())
    assert np.load(tmp_path / "mine" / "embeddings.npz")["behaviours"].shape[1] == 32
    # overwrite starts over with the new settings
    fake = ScriptedGenerator()
    mine_behaviours(_config(tmp_path, temperature=0.2, extract_temperature=0.0, overwrite=True), generator=fake)
    assert len(fake.calls) == 15
    assert [s.temperature for _, _, s in fake.calls[:3]] == [0.2, 0.2, 0.0]


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"tasks takes task names now, as rollout and eval do"):
        MineConfig(tasks=[{"task": "arith", "domain": "arith", "options": {"levels": [1]}}])
    with pytest.raises(ConfigError, match=r"task_options\['arith'\]: unknown key\(s\) \['levels'\]"):
        MineConfig(tasks=["arith"], task_options={"arith": {"levels": [1]}})
    with pytest.raises(ConfigError, match=r"domains has a label for 'gsm8k', which is not in tasks \['arith'\]"):
        MineConfig(tasks=["arith"], domains={"gsm8k": "math"})
    with pytest.raises(KeyError, match="Unknown task 'arithmetic'"):
        MineConfig(tasks=["arithmetic"])
    with pytest.raises(ConfigError, match="dedupe must be one of"):
        MineConfig(dedupe="none")
    with pytest.raises(ConfigError, match="embedder='bert' is not known"):
        MineConfig(embedder="bert")
    with pytest.raises(ConfigError, match=r"backend_options: unknown key\(s\) \['colour'\]"):
        MineConfig(backend_options={"colour": 1}).backend_config()
    with pytest.raises(ConfigError, match=r"task_options\['game24'\]: task_levels is not an option of task 'game24'"):
        MineConfig(tasks=["game24"], task_options={"game24": {"task_levels": [1]}})  # fails before any work


def test_global_dedupe_keeps_one_behaviour_per_name():
    rows = [
        {"id": "a/1", "domain": "a", "question": "q", "correct": True, "records": [["x", "d1"], ["y", "d2"]]},
        {"id": "b/1", "domain": "b", "question": "q", "correct": None, "records": [["x", "d3"]]},
    ]
    assert [b["domain"] for b in build_behaviours(rows, dedupe="domain")[0]] == ["a", "a", "b"]
    assert [(b["name"], b["description"]) for b in build_behaviours(rows, dedupe="global")[0]] == [
        ("x", "d1"), ("y", "d2")
    ]  # fmt: skip


# --------------------------------------------------------------------------------------------- projector


def test_pca_shapes_cap_and_order(caplog):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 16)) * np.linspace(5, 0.1, 16)
    pca = PCAProjection(n_components=4).fit(X)
    Z = pca.transform(X)
    assert Z.shape == (200, 4) and Z.dtype == np.float32
    assert np.all(np.diff(pca.explained_variance_) <= 0)
    assert np.allclose(Z.mean(axis=0), 0, atol=1e-4)
    small = PCAProjection(n_components=128)
    with caplog.at_level("WARNING"):
        small.fit(X[:10])
    assert small.n_components_ == 10 and "capped at 10" in caplog.text
    assert PCAProjection(n_components=128).fit(X).n_components_ == 16
    with pytest.raises(ValueError, match="expected 16"):
        pca.transform(np.zeros((1, 3)))


def _synthetic_pairs(n=600, d0=24, d=6, seed=0):
    rng = np.random.default_rng(seed)
    Q = rng.normal(size=(n, d0)).astype(np.float32)
    A = rng.normal(size=(d0, d)).astype(np.float32) / np.sqrt(d0)
    return Q, np.tanh(Q @ A).astype(np.float32)


def test_projector_training_reduces_the_mse_and_numpy_inference_equals_torch():
    import torch

    Q, T = _synthetic_pairs()
    options = ProjectorOptions(hidden=[64, 32], epochs=40, batch_size=64, lr=3e-3, seed=1)
    proj = train_projector(Q, T, options, groups=np.arange(len(Q)) // 3)
    first, last = proj.history_[0], proj.history_[-1]
    assert last["train_mse"] < 0.3 * first["train_mse"] and last["held_out_mse"] < 0.5 * first["held_out_mse"]
    assert proj.train_mse_ == last["train_mse"] and len(proj.history_) == 41
    # numpy inference equals the torch network with the same weights
    net = torch.nn.Sequential(
        torch.nn.Linear(24, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 6)
    )
    with torch.no_grad():
        for layer, (w, b) in zip([net[0], net[2], net[4]], proj.weights, strict=True):
            layer.weight.copy_(torch.from_numpy(w.T)), layer.bias.copy_(torch.from_numpy(b))
        expected = net(torch.from_numpy(Q[:50])).numpy()
    assert np.allclose(proj.transform(Q[:50]), expected, atol=1e-5)
    # same seed, same weights; state round trip gives identical outputs
    again = train_projector(Q, T, options, groups=np.arange(len(Q)) // 3)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(proj.weights, again.weights, strict=True))
    loaded = QueryProjector.from_state_arrays(proj.state_arrays())
    assert np.array_equal(loaded.transform(Q), proj.transform(Q)) and loaded.options == options
    assert loaded.held_out_mse_ == proj.held_out_mse_


def test_projector_defaults_follow_the_paper_and_pca_round_trips():
    options = ProjectorOptions()
    assert (options.hidden, options.epochs, options.batch_size, options.lr, options.weight_decay) == (
        [512, 256], 10, 256, 1e-4, 1e-4
    )  # fmt: skip
    Q, T = _synthetic_pairs(n=40, d0=12, d=5)
    proj = train_projector(Q, T, ProjectorOptions(epochs=1))
    assert [w.shape for w, _ in proj.weights] == [(12, 512), (512, 256), (256, 5)]
    pca = PCAProjection(n_components=3).fit(Q)
    assert np.array_equal(PCAProjection.from_state_arrays(pca.state_arrays()).transform(Q), pca.transform(Q))
    with pytest.raises(ValueError, match="row-aligned"):
        train_projector(Q, T[:3])


# --------------------------------------------------------------------------------------------- lm embedder


def test_lm_embedder_mean_pools_the_embedded_model():
    from metamod.llm.embedded import is_prepared

    if not is_prepared("smollm2-135m-instruct"):
        pytest.skip("the embedded SmolLM2 is not prepared here (run `metamod model prepare` once); lm test skipped")
    from metamod.memory.embed import build_embedder

    emb = build_embedder("lm", batch_size=2, max_length=64)
    texts = ["Add the two amounts.", "Check the units before adding anything at all.", "", "Add the two amounts."]
    vecs = emb.embed(texts)
    assert vecs.shape == (4, 576) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs[[0, 1, 3]], axis=1), 1.0, atol=1e-5) and not vecs[2].any()
    assert np.array_equal(vecs[0], vecs[3])
    emb._cache.clear()  # embed the text again, now alone in its batch
    emb.batch_size = 1
    alone = emb.embed([texts[1]])
    assert np.allclose(alone[0], vecs[1], atol=1e-5)  # right padding: the batch does not change a row
    spec = emb.spec()
    assert spec["name"] == "lm" and spec["dim"] == 576 and spec["max_length"] == 64


def test_the_shipped_smol_config_parses():
    from pathlib import Path

    from metamod.config import parse_config

    path = Path(__file__).resolve().parent.parent / "configs" / "memory" / "mine_smol.yaml"
    (config,) = parse_config([MineConfig], ["--config", str(path)])
    assert [config.domain(t) for t in config.tasks] == ["arith", "game24"] and config.embedder == "lm"
    assert config.task_configs()["arith"].task_levels == [1, 2, 3, 4, 5]
    assert all(tc.task_limit == 30 for tc in config.task_configs().values())
    assert config.sampling("extract", 0).temperature < config.sampling("solve", 0).temperature


def test_hashing_users_never_import_torch():
    import subprocess
    import sys

    code = (
        "import sys; from metamod.memory.embed import build_embedder, check_embedder; "
        "check_embedder('lm'); build_embedder('hashing', n_features=32).embed(['x']); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_reflection_records_read_method_sentences_and_skip_verdicts():
    from metamod.memory.cheatsheet.mining import reflection_records

    text = (
        "No, the attempted solution is wrong.\n1. Convert both lengths to centimetres before adding 3 and 40.\n"
        "2. Then subtract the 12 cm that were cut off from the total length.\nThe answer is 28.\n24"
    )
    found = reflection_records(text, 5)
    assert found == [
        ("convert-both-lengths-centimetres", "Convert both lengths to centimetres before adding <n> and <n>."),
        ("subtract-cm-were-cut", "Then subtract the <n> cm that were cut off from the total length."),
    ]
    assert reflection_records(text, 1) == found[:1]
    assert reflection_records("", 3) == [] and reflection_records(None, 3) == []


def test_records_from_chooses_the_source_without_remining():
    from metamod.memory.cheatsheet.mine import build_behaviours

    row = {
        "id": "arith/a",
        "domain": "arith",
        "question": "Q",
        "correct": None,
        "records": [["combine-quantities", "Add the amounts <n> and <n> to the total."]],
        "reflection": "First convert every amount to cents before adding the prices together.",
        "extraction": "",
    }
    names = {
        src: [b["name"] for b in build_behaviours([row], records_from=src)[0]]
        for src in ("extraction", "reflection", "both")
    }
    assert names == {
        "extraction": ["combine-quantities"],
        "reflection": ["convert-amount-cents-before"],
        "both": ["combine-quantities", "convert-amount-cents-before"],
    }
