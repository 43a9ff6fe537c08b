"""``metamod merge-shards``: merge the ``traces.shard-i-of-K.jsonl`` files of a sharded rollout into one file.

``metamod merge-shards --inputs runs/x --output runs/x/traces.jsonl``: debate and MRO traces alike, de-duplicated by
id, in the original example order (:func:`metamod.rollout.traces.merge_shards`); a missing shard of K is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from metamod.config import ConfigError, parse_config
from metamod.rollout.traces import merge_shards, read_traces


@dataclass
class MergeConfig:
    """Inputs and output of ``metamod merge-shards``."""

    inputs: list[str] = field(
        default_factory=list,
        metadata={"help": "Shard files, or one folder holding traces.shard-*-of-*.jsonl files."},
    )
    output: str = field(default="", metadata={"help": "Merged traces file (e.g. runs/x/traces.jsonl)."})

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ConfigError("merge-shards needs inputs: shard files or a folder with traces.shard-*-of-*.jsonl")
        if not self.output:
            raise ConfigError("merge-shards needs output, e.g. --output runs/x/traces.jsonl")


def shard_files(inputs: list[str]) -> list[Path]:
    """Expand folders to their ``traces.shard-*-of-*.jsonl`` files and check that no shard of K is missing."""
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = sorted(path.glob("traces.shard-*-of-*.jsonl"))
            if not found:
                raise FileNotFoundError(f"{path} holds no traces.shard-*-of-*.jsonl files")
            files.extend(found)
        else:
            files.append(path)
    by_k: dict[int, set[int]] = {}
    for f in files:
        parts = f.name.split(".")
        if len(parts) == 3 and parts[1].startswith("shard-"):
            _, i, _, k = parts[1].split("-")
            by_k.setdefault(int(k), set()).add(int(i))
    for k, seen in by_k.items():
        missing = sorted(set(range(k)) - seen)
        if missing:
            raise FileNotFoundError(f"shard file(s) {missing} of {k} missing among the inputs; run them or list them")
    return files


def merge_main(argv: list[str] | None = None) -> int:
    """``metamod merge-shards --inputs runs/x --output runs/x/traces.jsonl``."""
    (config,) = parse_config([MergeConfig], argv, prog="metamod merge-shards")
    files = shard_files(config.inputs)
    counts = merge_shards(files, config.output)
    num = sum(1 for _ in read_traces(config.output, validate=False))
    print(
        f"merged {counts['inputs']} file(s) -> {config.output}: {num} traces "
        f"({counts['duplicates']} duplicate(s) dropped)"
    )
    return 0
