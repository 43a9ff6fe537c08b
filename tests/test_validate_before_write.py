"""Validate before writing (docs/contracts.md): every writing command checks what it will read before it locks or
writes anything. One test per finding of the reliability review (R1-R13): exit 2, ONE line naming the thing, and a
folder left as it was (usually: never created)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from metamod.cli import main as cli
from metamod.evaluate.config import EvalConfig
from metamod.evaluate.harness import evaluate
from metamod.files import FolderLock
from metamod.memory import MemoryConfig


def _fails(argv: list[str], capsys, *needles: str) -> str:
    """Run the CLI; it must exit 2 with one error line holding every needle. Returns the line."""
    capsys.readouterr()
    assert cli(argv) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert len(err) == 1, err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    return err[0]


def _snapshot(folder: Path) -> dict[str, bytes] | None:
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------ R1, R3: memory folders

EVAL_MEMORY = ["eval", "--methods", "mro", "mc2", "--reference_method", "mro", "--limit", "10", "--seeds", "0"]
EVAL_MEMORY += ["--max_iterations", "3", "--plots", "false", "--memory_options", "{writer: rule}"]


@pytest.fixture(scope="module")
def saved_memory(tmp_path_factory) -> Path:
    """A memory folder saved by a (simulated) run: what ``--memory_path`` warm-starts from."""
    tmp = tmp_path_factory.mktemp("saved")
    config = EvalConfig(methods=["mro", "mc2"], limit=10, seeds=[0], plots=False, max_iterations=3,
                        reference_method="mro", output_dir=str(tmp / "run"))  # fmt: skip
    evaluate(config, MemoryConfig(memory_options={"writer": "rule"}))
    return tmp / "run" / "memory-seed0-mc2" / "arith"


def _edit_manifest(folder: Path, **changes) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(changes)
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "case, needle",
    [
        ("absent", "is missing"),
        ("a-file", "is a file, not a folder"),
        ("no-manifest", "without manifest.json"),
        ("corrupt-manifest", "not valid JSON"),
        ("another-kind", "holds a 'bot' memory but this is 'mca'"),
        ("arrays-missing", "names array file 'arrays-7.npz', which is missing"),
        ("arrays-corrupt", "memory arrays do not load"),  # R3
    ],
)
def test_r1_a_bad_memory_path_fails_before_the_eval_folder_is_touched(saved_memory, tmp_path, capsys, case, needle):
    path = tmp_path / "memory"
    if case != "absent":
        shutil.copytree(saved_memory, path)
    if case == "a-file":
        shutil.rmtree(path)
        path.write_text("not a folder")
    elif case == "no-manifest":
        (path / "manifest.json").unlink()
    elif case == "corrupt-manifest":
        (path / "manifest.json").write_text('{"format": "metamod-memory",')
    elif case == "another-kind":
        _edit_manifest(path, memory="bot")
    elif case == "arrays-missing":
        _edit_manifest(path, arrays="arrays-7.npz")
    elif case == "arrays-corrupt":
        _edit_manifest(path, arrays="arrays-7.npz")
        (path / "arrays-7.npz").write_bytes(b"PK\x03\x04 cut short")
    out = tmp_path / "eval"
    _fails([*EVAL_MEMORY, "--memory_path", str(path), "--output_dir", str(out)], capsys, needle, str(path))
    assert not out.exists()  # no .lock, .fingerprint.json, config.yaml or empty samples
    good = tmp_path / "good"
    shutil.copytree(saved_memory, good)
    assert cli([*EVAL_MEMORY, "--memory_path", str(good), "--output_dir", str(out)]) == 0


# ------------------------------------------------------------------------------------------ R2: adapters


def test_r2_a_rank_mismatched_moderator_adapter_fails_before_the_eval_folder_is_touched(
    tmp_path, capsys, tiny_model_dir
):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora).save_pretrained(tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    config["r"] = 8  # the weights carry rank 4
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(config))
    out = tmp_path / "eval"
    argv = ["eval", "--methods", "moderator", "--limit", "2", "--seeds", "0", "--plots", "false"]
    argv += ["--moderator", str(tmp_path / "adapter"), "--output_dir", str(out)]
    _fails(argv, capsys, "adapter_model.safetensors does not match", "rank")
    assert not out.exists()


# ------------------------------------------------------------------------------------------ R3, R4, R11: fit-cheatsheet


def _mined(folder: Path, rows: int = 8) -> Path:
    behaviours = [
        {"id": f"b{i}", "name": f"step-{i}", "description": f"Check step {i} twice.", "domain": "math" if i % 2 else "physics",
         "question_id": f"q{i}", "question": f"question {i}", "correct": None}
        for i in range(rows)
    ]  # fmt: skip
    folder.mkdir(parents=True)
    (folder / "behaviours.jsonl").write_text("".join(json.dumps(b) + "\n" for b in behaviours))
    rng = np.random.default_rng(0)
    np.savez(folder / "embeddings.npz", behaviours=rng.normal(size=(rows, 16)), queries=rng.normal(size=(rows, 16)))
    (folder / "embeddings.json").write_text(
        json.dumps({"embedder": {"kind": "hashing", "n_features": 16}, "rows": rows})
    )
    return folder / "behaviours.jsonl"


FIT = ["--dim", "4", "--projector_options", "{epochs: 2, batch_size: 4, hidden: [8]}"]


def test_r3_a_corrupt_embeddings_file_is_one_line(tmp_path, capsys):
    mined = _mined(tmp_path / "mine")
    (tmp_path / "mine" / "embeddings.npz").write_bytes(b"PK\x03\x04 cut short")
    out = tmp_path / "bc"
    argv = ["fit-cheatsheet", "--behaviours", str(mined), "--output_dir", str(out), *FIT]
    _fails(argv, capsys, "embeddings.npz: behaviour embeddings do not load")
    assert not out.exists()


def test_r4_an_unknown_hdp_option_fails_before_any_fitting(tmp_path, capsys):
    mined = _mined(tmp_path / "mine")
    out = tmp_path / "bc"
    argv = ["fit-cheatsheet", "--behaviours", str(mined), "--output_dir", str(out), *FIT]
    _fails([*argv, "--hdp_params", "{sweepz: 3}"], capsys, "hdp_params: unknown option 'sweepz'", "sweeps")
    _fails([*argv, "--hdp_params", "{kernel: numpy}"], capsys, "hdp_params: kernel='numpy': expected one of ('auto'")
    _fails([*argv, "--projector_options", "{epochz: 3}"], capsys, "projector_options: unknown option 'epochz'")
    assert not out.exists()


def test_r11_a_second_fit_cheatsheet_into_the_same_folder_is_refused(tmp_path, capsys):
    mined = _mined(tmp_path / "mine")
    out = tmp_path / "bc"
    argv = ["fit-cheatsheet", "--behaviours", str(mined), "--output_dir", str(out), *FIT]
    argv += ["--hdp_params", "{sweeps: 4, burn_in: 2}"]
    with FolderLock(out):  # another fit-cheatsheet at work
        before = _snapshot(out)
        _fails(argv, capsys, f"{out} is in use by process")
        assert _snapshot(out) == before
    assert cli(argv) == 0 and (out / "corpus.json").is_file()


# ------------------------------------------------------------------------------------------ R5, R6: dataset, train


def test_r5_trace_lines_that_are_json_but_not_objects_are_refused(tmp_path, capsys):
    traces = tmp_path / "traces.jsonl"
    traces.write_text('[1, 2]\n"text"\n')
    out = tmp_path / "dataset"
    _fails(["build-dataset", "--traces", str(traces), "--output_dir", str(out)], capsys,
           f"{traces}:1", "a trace must be a JSON object, got a list")  # fmt: skip
    assert not out.exists()


def test_r6_a_negative_learning_rate_fails_before_the_warm_start(tmp_path, capsys):
    out = tmp_path / "train"
    argv = ["train", "--config", "configs/train/tiny_sim.yaml", "--output_dir", str(out)]
    _fails([*argv, "--learning_rate", "-1"], capsys, "learning_rate must be > 0, got -1")
    _fails([*argv, "--warm_start_learning_rate", "0"], capsys, "warm_start_learning_rate must be > 0")
    assert not out.exists()


# ------------------------------------------------------------------------------------------ R7: export


def test_r7_export_has_a_lock_and_the_one_error_path(tmp_path, capsys, tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from metamod.train.export import export_lock

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora).save_pretrained(tmp_path / "adapter")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(tmp_path / "adapter")
    out = tmp_path / "export"
    argv = ["export", "--adapter", str(tmp_path / "adapter"), "--output_dir", str(out)]
    with export_lock(out):  # another export to the same folder at work
        _fails(argv, capsys, f"{out} is in use by process")
    assert not out.exists()
    assert cli(argv) == 0
    before = _snapshot(out)
    _fails(argv, capsys, "is not empty; pass --overwrite")  # exit 2, not export's own exit 1
    assert _snapshot(out) == before
    assert list(tmp_path.iterdir()) == [tmp_path / "adapter", out] or sorted(tmp_path.iterdir()) == sorted(
        [tmp_path / "adapter", out]
    )  # no lock file or staging folder beside the export


# ------------------------------------------------------------------------------------------ R8, R9: rollout task files

ROLLOUT = ["rollout", "--tasks", "local", "--debaters", "simulated", "--max_rounds", "2", "--progress", "false"]


def _local_file(path) -> list[str]:
    """The options of a rollout over the local math file ``path``."""
    return ["--task_options", json.dumps({"local": {"task_kind": "math", "task_data_files": str(path)}})]


def test_r8_a_task_file_without_a_usable_row_is_refused(tmp_path, capsys):
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "1+1?", "answer": null}\n{"question": "", "answer": "2"}\n')
    out = tmp_path / "run"
    argv = [*ROLLOUT, *_local_file(data), "--output_dir", str(out)]
    _fails(argv, capsys, "task 'local' has no usable question", str(data))
    assert not out.exists()  # no empty traces, summary or fingerprint


def test_r9_an_edited_task_file_is_other_settings(tmp_path, capsys):
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "answer": "4"}\n')
    out = tmp_path / "run"
    argv = [*ROLLOUT, *_local_file(data), "--output_dir", str(out)]
    assert cli(argv) == 0
    before = _snapshot(out)
    data.write_text('{"question": "1+1?", "answer": "3"}\n{"question": "2+2?", "answer": "4"}\n')  # a gold fixed
    _fails(argv, capsys, "task_file_signatures", "--overwrite true")
    assert _snapshot(out) == before
    assert cli([*argv, "--overwrite", "true"]) == 0
    golds = [json.loads(line)["gold"] for line in (out / "traces.jsonl").read_text().splitlines()]
    assert golds == ["3", "4"]


# ------------------------------------------------------------------------------------------ R12, R13: sweep, seeds

SWEEP = ["sweep", "--config", "configs/eval/sim_debate.yaml", "--set", "limit=2", "--set", "seeds=[0]"]
SWEEP += ["--set", "methods=[majority_vote, consensus]", "--set", "reference_method=null"]


def test_r12_sweep_checks_every_run_before_writing_and_speaks_in_one_line(tmp_path, capsys):
    out = tmp_path / "sweep"
    _fails([*SWEEP, "--param", "bogus.key", "--values", "1", "2", "--output_dir", str(out)], capsys,
           "--param bogus.key=1", "Unknown key(s) ['bogus']")  # fmt: skip
    _fails([*SWEEP, "--param", "max_rounds", "--values", "3", "0", "--output_dir", str(out)], capsys,
           "--param max_rounds=0", "max_rounds")  # fmt: skip
    _fails([*SWEEP, "--param", "max_rounds", "--values", "--output_dir", str(out)], capsys, "--values")
    _fails([*SWEEP, "--param", "max_rounds", "--values", "2", "--bogus", "x"], capsys, "unrecognized arguments")
    assert not out.exists()  # no generated sub-config was written (nor blamed)
    with FolderLock(out):
        _fails([*SWEEP, "--param", "max_rounds", "--values", "2", "--output_dir", str(out)], capsys, "is in use")


def test_r13_negative_seeds_are_refused(tmp_path, capsys):
    out = tmp_path / "eval"
    argv = ["eval", "--config", "configs/eval/sim_debate.yaml", "--limit", "2", "--output_dir", str(out)]
    _fails([*argv, "--seeds", "-1"], capsys, "-1 is not a seed; expected integers >= 0")
    assert not out.exists()


def test_r13_a_bad_trace_is_named_by_file_line_and_id(tmp_path, capsys):
    from metamod.rollout.traces import example_trace

    good, bad = example_trace(), example_trace()
    bad["id"], bad["num_rounds"] = "q2", "three"
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    out = tmp_path / "dataset"
    _fails(["build-dataset", "--traces", str(traces), "--output_dir", str(out)], capsys, f"{traces}:2: trace 'q2'")
    assert not out.exists()


def test_r13_an_adapter_config_that_is_not_utf8_names_the_byte_not_a_codec(tmp_path, capsys):
    from metamod.llm.adapter_files import read_adapter_config

    (tmp_path / "adapter_config.json").write_bytes(b'{"r": 4,\n "x": "\xff"}')
    with pytest.raises(Exception, match=r"adapter_config\.json:2:8: byte 0xff is not valid UTF-8"):
        read_adapter_config(tmp_path)


def test_an_adapter_that_does_not_fit_its_base_model_is_refused_by_eval_and_export(tmp_path, capsys, tiny_model_dir):
    """Part 2 of the issue: adapters are checked against the base model (its safetensors headers), before writing."""
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    adapter = tmp_path / "adapter"
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora).save_pretrained(adapter)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(adapter)
    weights = load_file(adapter / "adapter_model.safetensors")
    name = next(k for k in weights if k.endswith("q_proj.lora_A.weight"))
    weights[name] = weights[name].new_zeros((weights[name].shape[0], weights[name].shape[1] + 8))  # wider input
    save_file(weights, str(adapter / "adapter_model.safetensors"))
    eval_out, export_out = tmp_path / "eval", tmp_path / "export"
    argv = ["eval", "--methods", "moderator", "--limit", "2", "--seeds", "0", "--plots", "false"]
    _fails([*argv, "--moderator", str(adapter), "--output_dir", str(eval_out)], capsys,
           "does not fit the base model", "lora_A takes")  # fmt: skip
    _fails(
        ["export", "--adapter", str(adapter), "--output_dir", str(export_out)], capsys, "does not fit the base model"
    )
    assert not eval_out.exists() and not export_out.exists()
