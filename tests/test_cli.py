"""The `metamod` dispatcher and the shared config parser."""

from dataclasses import dataclass, field

import pytest

from metamod.cli import COMMANDS, main
from metamod.config import ConfigError, parse_config
from metamod.registry import import_dotted


@dataclass
class _Opts:
    size: int = field(default=1, metadata={"help": "a size"})
    name: str = field(default="x", metadata={"help": "a name"})


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


def test_every_command_entry_point_imports():
    for entry, _ in COMMANDS.values():
        assert callable(import_dotted(entry))


def test_unknown_command_fails_listing_commands(capsys):
    assert main(["nope"]) == 2
    assert "Valid commands: rollout" in capsys.readouterr().err


def test_config_error_is_reported_not_raised(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: arith\nnot_a_key: 3\n")
    assert main(["rollout", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not_a_key" in err and "Valid keys" in err


def test_yaml_then_cli_override(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("size: 3\nname: y\n")
    (opts,) = parse_config([_Opts], ["--config", str(cfg), "--size", "5"])
    assert (opts.size, opts.name) == (5, "y")


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--siz", "2"], "Unknown argument"),  # no silent abbreviation
        (["--config"], "needs a path"),
        (["--config", "/nonexistent.yaml"], "not found"),
    ],
)
def test_config_errors(argv, match):
    with pytest.raises(ConfigError, match=match):
        parse_config([_Opts], argv)


def test_yaml_must_be_a_mapping(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        parse_config([_Opts], ["--config", str(cfg)])
