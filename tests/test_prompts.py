"""Prompt templates: overrides by name (`--prompts`), their validation, the CLI flag end to end, the tiny model."""

import hashlib
import os
from pathlib import Path

import pytest
import yaml
from datasets import load_from_disk

from metamod.cli import main
from metamod.config import ConfigError, config_to_dict
from metamod.llm.tiny import tiny_corpus
from metamod.prompts import (
    PROMPTS_ENV,
    active_prompts_file,
    format_responses,
    get_template,
    load_prompts_file,
    render,
    shipped_templates,
    template_fields,
    templates,
    use_prompts,
)
from metamod.rollout.state import moderator_messages

ROOT = Path(__file__).resolve().parent.parent
SIM_ROLLOUT = ROOT / "configs" / "rollout" / "sim_arith.yaml"

DECIDE = "ZEBRA-MODERATOR: say CONTINUE or STOP <answer>x</answer>.\nQ: {question}\n{responses}"


@pytest.fixture(autouse=True)
def _no_active_prompts():
    """Each test starts and ends without an active prompts file, whatever it does to the environment."""
    saved = os.environ.pop(PROMPTS_ENV, None)
    yield
    os.environ.pop(PROMPTS_ENV, None)
    if saved is not None:
        os.environ[PROMPTS_ENV] = saved


def _write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_override_replaces_template_by_name(tmp_path):
    path = _write(tmp_path / "p.yaml", {"moderator_decide": DECIDE, "agent_response": "[{index}] {response}"})
    shipped = render("moderator_decide", question="2+2?", responses="R")
    assert active_prompts_file() is None
    assert use_prompts(path) == path.resolve() and active_prompts_file() == path.resolve()
    assert os.environ[PROMPTS_ENV] == str(path.resolve())  # what subprocesses inherit
    assert render("moderator_decide", question="2+2?", responses="R") == "ZEBRA-MODERATOR: say CONTINUE or STOP " \
        "<answer>x</answer>.\nQ: 2+2?\nR"  # fmt: skip
    assert format_responses(["a", "b"]) == "[1] a\n\n[2] b"
    assert format_responses(["a"], shipped=True) == "Agent 1: a"
    assert "ZEBRA" in moderator_messages("q", ["x"], final=False)[0]["content"]
    assert templates()["judge"] == shipped_templates()["judge"]  # templates it does not name are untouched
    assert get_template("moderator_decide", shipped=True) == shipped_templates()["moderator_decide"]
    assert template_fields("moderator_decide") == {"question", "responses"}
    use_prompts(None)
    assert active_prompts_file() is None
    assert render("moderator_decide", question="2+2?", responses="R") == shipped


def test_edited_file_is_reread_not_cached_stale(tmp_path):
    path = _write(tmp_path / "p.yaml", {"agent_response": "A{index}: {response}"})
    use_prompts(path)
    assert render("agent_response", index=1, response="x") == "A1: x"
    _write(path, {"agent_response": "Agent #{index} wrote {response}, then more"})
    assert render("agent_response", index=1, response="x") == "Agent #1 wrote x, then more"
    other = _write(tmp_path / "q.yaml", {"agent_response": "B{index}: {response}"})
    use_prompts(other)
    assert render("agent_response", index=2, response="y") == "B2: y"


@pytest.mark.parametrize(
    "content, match",
    [
        ({"moderator_decid": DECIDE}, r"unknown template name 'moderator_decid'\. Valid names: .*moderator_decide"),
        (
            {"moderator_decide": "Decide. Q: {question}"},
            r"'moderator_decide' is missing placeholder\(s\) \['responses'\]",
        ),
        (
            {"moderator_decide": DECIDE + " {gold}"},
            r"'moderator_decide' has unknown placeholder\(s\) \['gold'\]\. Expected exactly the placeholders "
            r"\['question', 'responses'\]",
        ),
        ({"agent_response": "{index} {response} {}"}, r"unknown placeholder\(s\) \[''\]"),
        ({"agent_response": "{index} {response} }"}, "malformed braces"),
        ({"agent_response": 3}, "'agent_response' must be text"),
        ("moderator_decide: [unclosed\n  x: y\n", r"p\.yaml:\d+: not valid YAML"),
        ("- a\n- b\n", "must be a YAML mapping of template name: template text, got a list"),
        ("", "got an empty file"),
    ],
)
def test_bad_prompts_files_are_config_errors_naming_the_file(tmp_path, content, match):
    path = _write(tmp_path / "p.yaml", content)
    with pytest.raises(ConfigError, match=match) as info:
        use_prompts(path)
    assert str(path.resolve()) in str(info.value)
    assert active_prompts_file() is None  # nothing activated


def test_yaml_syntax_error_gives_the_line(tmp_path):
    path = _write(tmp_path / "p.yaml", "agent_response: 'Agent {index}: {response}'\njudge: [oops\n")
    with pytest.raises(ConfigError, match=r"p\.yaml:3: not valid YAML"):
        load_prompts_file(path)
    with pytest.raises(ConfigError, match="prompts file not found"):
        load_prompts_file(tmp_path / "missing.yaml")


def test_run_config_records_the_prompts_file(tmp_path):
    from dataclasses import dataclass, field

    @dataclass
    class Cfg:
        size: int = field(default=1, metadata={"help": "a size"})

    assert config_to_dict(Cfg()) == {"size": 1}
    path = _write(tmp_path / "p.yaml", {"agent_response": "A{index}: {response}"})
    use_prompts(path)
    record = config_to_dict(Cfg())
    assert record["prompts_file"] == str(path.resolve()) and len(record["prompts_sha256"]) == 64


def test_tiny_model_corpus_ignores_prompt_overrides(tmp_path):
    shipped = tiny_corpus(seed=0, num_problems=12)
    path = _write(tmp_path / "p.yaml", {"moderator_decide": DECIDE, "agent_response": "[{index}] {response}"})
    use_prompts(path)
    overridden = tiny_corpus(seed=0, num_problems=12)
    assert overridden == shipped
    assert not any("ZEBRA" in doc for doc in overridden)


def test_cli_flag_end_to_end(tmp_path, capsys):
    prompts = _write(tmp_path / "prompts.yaml", {"moderator_decide": DECIDE})
    run, data = tmp_path / "run", tmp_path / "ds"
    rollout = ["rollout", "--config", str(SIM_ROLLOUT), "--limit", "3", "--output_dir", str(run)]
    assert main([*rollout, "--prompts", str(prompts)]) == 0
    assert PROMPTS_ENV not in os.environ  # the dispatcher restores the caller's environment
    saved = yaml.safe_load((run / "rollout_config.yaml").read_text())
    assert saved["prompts_file"] == str(prompts.resolve()) and len(saved["prompts_sha256"]) == 64
    # the flag also goes before the command
    assert main(["--prompts", str(prompts), "build-dataset", "--traces", str(run), "--output_dir", str(data),
                 "--validation_fraction", "0"]) == 0  # fmt: skip
    rows = load_from_disk(str(data))["train"]
    decide = [r for r in rows if not r["is_final_round"]]
    assert decide and all(r["prompt"][0]["content"].startswith("ZEBRA-MODERATOR") for r in decide)
    assert all("ZEBRA" not in r["prompt"][0]["content"] for r in rows if r["is_final_round"])
    assert "prompts_sha256" in yaml.safe_load((data / "build_dataset_config.yaml").read_text())
    # resuming the rollout under other prompts is refused by the resume check
    capsys.readouterr()
    assert main(rollout) == 2
    err = capsys.readouterr().err
    assert "different settings" in err and "prompts_sha256" in err
    # a bad prompts file is one config-error line, exit 2
    bad = _write(tmp_path / "bad.yaml", {"judge": "no placeholders"})
    assert main([*rollout, "--prompts", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("metamod rollout: error: ") and str(bad.resolve()) in err and "'judge'" in err
    assert len(err.splitlines()) == 1
    assert main(["rollout", "--prompts"]) == 2
    assert "--prompts needs a path" in capsys.readouterr().err


def test_environment_variable_is_validated_by_the_dispatcher(tmp_path, capsys):
    os.environ[PROMPTS_ENV] = str(tmp_path / "gone.yaml")
    assert main(["rollout", "--config", str(SIM_ROLLOUT), "--output_dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "prompts file not found" in err and f"${PROMPTS_ENV}" in err
    assert os.environ[PROMPTS_ENV] == str(tmp_path / "gone.yaml")  # restored as it was


def test_build_dataset_renders_rows_with_the_prompts_the_traces_were_made_with(tmp_path, capsys, caplog):
    prompts = _write(tmp_path / "prompts.yaml", {"moderator_decide": DECIDE})
    run, other_run = tmp_path / "run", tmp_path / "other"
    rollout = ["rollout", "--config", str(SIM_ROLLOUT), "--limit", "3"]
    assert main([*rollout, "--output_dir", str(run), "--prompts", str(prompts)]) == 0
    assert main([*rollout, "--output_dir", str(other_run)]) == 0  # the shipped templates

    def rows(data) -> list[str]:
        return [r["prompt"][0]["content"] for r in load_from_disk(str(data))["train"] if not r["is_final_round"]]

    # no --prompts: the traces' own prompts file renders the rows, and is no longer in effect afterwards
    build = ["build-dataset", "--traces", str(run), "--validation_fraction", "0"]
    assert main([*build, "--output_dir", str(tmp_path / "ds")]) == 0
    assert rows(tmp_path / "ds") and all(r.startswith("ZEBRA-MODERATOR") for r in rows(tmp_path / "ds"))
    assert PROMPTS_ENV not in os.environ
    saved = yaml.safe_load((tmp_path / "ds" / "build_dataset_config.yaml").read_text())
    assert saved["prompts_sha256"] == hashlib.sha256(prompts.read_bytes()).hexdigest()
    from metamod.rollout.snapshots import build_dataset

    build_dataset(run, None, validation_fraction=0)  # the library call restores the shipped templates too
    assert active_prompts_file() is None
    # an explicit other wording is the user's choice: built, with a warning naming both
    caplog.clear()
    assert main(["--prompts", str(_write(tmp_path / "p2.yaml", {"judge": "Judge Q: {question}\n{responses}"})), *build,
                 "--output_dir", str(tmp_path / "ds2")]) == 0  # fmt: skip
    assert not any(r.startswith("ZEBRA") for r in rows(tmp_path / "ds2"))
    assert any("traces were made with" in m and str(prompts.resolve()) in m for m in caplog.messages)
    # traces made with different prompts in one dataset: refused
    capsys.readouterr()
    assert main(["build-dataset", "--traces", str(run), str(other_run), "--output_dir", str(tmp_path / "ds3")]) == 2
    assert "made with different prompts" in capsys.readouterr().err
    # the prompts file changed since the rollout: one line, nothing written
    prompts.write_text(prompts.read_text() + "\n# edited\n")
    assert main([*build, "--output_dir", str(tmp_path / "ds4")]) == 2
    err = capsys.readouterr().err.strip()
    assert "has changed since" in err and str(prompts.resolve()) in err and len(err.splitlines()) == 1
    assert not (tmp_path / "ds4").exists()
