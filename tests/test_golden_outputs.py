"""Golden outputs: the simulated pipelines with fixed seeds produce exactly the recorded bytes.

The renovation (one loop engine, one role type, one method table) must keep every result byte for byte. This test
runs, through the CLI, small but complete versions of the simulated configs (a simulated debate rollout +
build-dataset + a short train + ``sim_debate``; an MRO rollout, ``mro_sim`` and ``mc2_sim``; ``marco_sim``; a
synthetic Bayesian Cheatsheet fit + its rows) and compares a sha256 of every output file with
``tests/fixtures/golden/digests.json``. Files are normalised only where they must be: the run's own temporary paths
become ``<root>`` / ``<tiny>``; what hashes those paths (settings fingerprints, the hex suffix of memory array
file names) and wall-clock timings (``timings``, ``this_run`` speeds) are dropped, peft's ``target_modules`` (a
set) is sorted; lock files (process ids) are skipped. Every answer, decision, metric, trace, memory state and dataset row is compared as it is.

Array files (``.npz`` memory states, the adapter's ``.safetensors``) are compared by value: integer, boolean and
text arrays by a sha256 of their bytes, float arrays by shape, dtype, the sum of magnitudes and four fixed random
+-1 projections, equal within a relative 1e-5 of that sum. Their last bits follow the CPU's BLAS kernels and thread
split (one thread against two moves a projector weight by 2e-10), so a byte digest would fail on another machine;
any real change (another seed, another step) moves a projection by orders of magnitude more.

A change that alters an output on purpose re-records the digests (``METAMOD_RECORD_GOLDEN=1 pytest
tests/test_golden_outputs.py``) and says why in its commit; the test names every file that differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from metamod.cli import main as cli

GOLDEN = Path(__file__).parent / "fixtures" / "golden" / "digests.json"
SKIPPED = {".lock", ".fingerprint.lock"}
TIMING = {"elapsed_s", "questions_per_s", "debate_rounds_per_s", "instances_per_s", "tokens_per_s"}


def _run(argv: list[str]) -> None:
    assert cli(argv) == 0, argv


def _mined(folder: Path) -> Path:
    """A small mined corpus: three topics x two domains x four paraphrases, hashing embeddings (no model)."""
    from metamod.memory.embed import HashingEmbedder

    topics = {
        "algebra": ["isolate the unknown", "check by substitution", "factor before expanding"],
        "physics": ["draw the forces", "check the units", "conserve energy"],
    }
    rows = []
    for domain, names in topics.items():
        for t, name in enumerate(names):
            for c in range(4):
                rows.append({"id": f"b{len(rows)}", "name": f"{name.replace(' ', '-')}-{c}",
                             "description": f"{name.capitalize()}, variant {c}.", "domain": domain,
                             "question_id": f"{domain}-{t}-{c}", "question": f"{domain} question on {name} {c}",
                             "correct": None})  # fmt: skip
    embedder = HashingEmbedder(n_features=64)
    folder.mkdir(parents=True)
    (folder / "behaviours.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    np.savez(folder / "embeddings.npz", behaviours=embedder.embed([r["description"] for r in rows]),
             queries=embedder.embed([r["question"] for r in rows]))  # fmt: skip
    (folder / "embeddings.json").write_text(json.dumps({"embedder": embedder.spec(), "rows": len(rows)}))
    return folder / "behaviours.jsonl"


def produce(root: Path, tiny: Path) -> None:
    """Every simulated pipeline, small, into ``root`` (about a minute on 2 cores)."""
    quiet = ["--progress", "false"]
    _run(["rollout", "--config", "configs/rollout/sim_arith.yaml", "--output_dir", str(root / "rollout"),
          "--limit", "24", *quiet])  # fmt: skip
    _run(["build-dataset", "--traces", str(root / "rollout" / "traces.jsonl"), "--output_dir", str(root / "dataset")])
    _run(["train", "--config", "configs/train/tiny_sim.yaml", "--model_name_or_path", str(tiny),
          "--build_tiny_model", "false", "--dataset_path", str(root / "dataset"), "--output_dir", str(root / "train"),
          "--warm_start_steps", "2", "--warm_start_batch_size", "8", "--max_steps", "2",
          "--per_device_train_batch_size", "8", "--report_to", "none", "--save_steps", "2"])  # fmt: skip
    _run(["eval", "--config", "configs/eval/sim_debate.yaml", "--moderator", str(root / "train"),
          "--output_dir", str(root / "sim_debate"), "--limit", "12", "--plots", "false"])  # fmt: skip
    _run(["rollout", "--config", "configs/rollout/mro_sim.yaml", "--output_dir", str(root / "mro_rollout"),
          "--limit", "12", *quiet])  # fmt: skip
    _run(["eval", "--config", "configs/eval/mro_sim.yaml", "--output_dir", str(root / "mro_sim"), "--limit", "12",
          "--plots", "false"])  # fmt: skip
    _run(["eval", "--config", "configs/eval/mc2_sim.yaml", "--output_dir", str(root / "mc2_sim"), "--limit", "20",
          "--plots", "false"])  # fmt: skip
    _run(["eval", "--config", "configs/eval/marco_sim.yaml", "--output_dir", str(root / "marco_sim"), "--limit", "6",
          "--seeds", "0", "--plots", "false"])  # fmt: skip
    behaviours = _mined(root / "mine")
    _run(["fit-cheatsheet", "--behaviours", str(behaviours), "--output_dir", str(root / "bc"), "--dim", "8",
          "--projector_options", "{epochs: 5, batch_size: 8, hidden: [16]}",
          "--hdp_params", "{sweeps: 10, burn_in: 5}"])  # fmt: skip
    _run(["eval", "--tasks", "arith", "--methods", "single_cot", "bc_static", "metacognitive_reuse",
          "kmeans_hard_refit", "bc_refit", "--reference_method", "single_cot", "--limit", "10", "--seeds", "0",
          "--debaters", "simulated", "--plots", "false", "--output_dir", str(root / "bc_eval"),
          "--memory_options", f"{{corpus: {root / 'bc'}, top_k: 2, refit_interval: 5}}",
          "--memory_model", str(tiny), "--memory_backend_options", "{device: cpu}", "--memory_max_tokens", "8",
          "--memory_batch_size", "5"])  # fmt: skip


ARRAYS_NAME = re.compile(rb"arrays-(\d+)-[0-9a-f]{8}\.npz")
HEX_ID = re.compile(r"[0-9a-f]{16}")


def _without_location(value):
    """A JSON value without what depends on where the run lives: settings hashes (they hash absolute paths:
    ``fingerprint(s)``, a row's ``settings`` hash) and wall-clock ``timings`` / ``this_run`` speeds."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ("fingerprint", "fingerprints", "timings") or (
                key == "settings" and isinstance(item, str) and HEX_ID.fullmatch(item)
            ):
                continue
            if key == "this_run" and isinstance(item, dict):
                item = {k: v for k, v in item.items() if k not in TIMING}
            if key == "target_modules" and isinstance(item, list):  # peft writes a set, in hash-seed order
                item = sorted(item)
            out[key] = _without_location(item)
        return out
    if isinstance(value, list):
        return [_without_location(v) for v in value]
    return value


def _normalised(path: Path, root: Path, tiny: Path) -> bytes:
    data = path.read_bytes()
    for old, new in ((str(root), "<root>"), (str(tiny), "<tiny>")):
        data = data.replace(old.encode(), new.encode())
    data = ARRAYS_NAME.sub(rb"arrays-\1.npz", data)
    if path.suffix == ".json":
        data = json.dumps(_without_location(json.loads(data)), sort_keys=True).encode()
    elif path.suffix == ".jsonl":
        rows = [json.loads(line) for line in data.splitlines() if line.strip()]
        data = "".join(json.dumps(_without_location(r), sort_keys=True) + "\n" for r in rows).encode()
    return data


ARRAY_FILES = (".npz", ".safetensors")
RELATIVE_TOLERANCE = 1e-5


def _arrays(path: Path) -> dict[str, np.ndarray]:
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    from safetensors.numpy import load_file

    return load_file(str(path))


def array_summary(path: Path) -> dict[str, dict]:
    """``{array name: summary}`` of an array file (module docstring): exact for non-float arrays, by value for floats.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> np.savez(folder / "a.npz", w=np.array([0.5, -1.0]), n=np.array([1, 2]))
    >>> summary = array_summary(folder / "a.npz")
    >>> summary["w"]["abs_sum"], sorted(summary["n"])
    (1.5, ['dtype', 'sha256', 'shape'])
    """
    out = {}
    for name, value in sorted(_arrays(path).items()):
        entry = {"shape": list(value.shape), "dtype": str(value.dtype)}
        if value.dtype.kind == "f":
            flat = value.astype(np.float64).ravel()
            signs = np.random.default_rng(0).choice([-1.0, 1.0], size=(4, flat.size))
            entry.update(abs_sum=float(np.abs(flat).sum()), projections=(signs @ flat).tolist())
        else:
            entry["sha256"] = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        out[name] = entry
    return out


def same_output(found: str | dict, recorded: str | dict) -> bool:
    """Whether a file's digest (or an array file's summary) is the recorded one, floats within the tolerance."""
    if isinstance(found, str) or isinstance(recorded, str):
        return found == recorded
    if set(found) != set(recorded):
        return False
    for name, entry in found.items():
        old = recorded[name]
        if {k: v for k, v in entry.items() if k not in ("abs_sum", "projections")} != {
            k: v for k, v in old.items() if k not in ("abs_sum", "projections")
        }:
            return False
        if "abs_sum" in entry:
            scale = RELATIVE_TOLERANCE * max(old["abs_sum"], 1e-12)
            values = [entry["abs_sum"], *entry["projections"]]
            if not np.allclose(values, [old["abs_sum"], *old["projections"]], rtol=0.0, atol=scale):
                return False
    return True


def digests(root: Path, tiny: Path) -> dict[str, str | dict]:
    """``{relative path: sha256, or an array file's summary}`` of every output file (see the module docstring)."""
    out: dict[str, str | dict] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name in SKIPPED or "train" in path.relative_to(root).parts[:1]:
            continue
        name = ARRAYS_NAME.sub(rb"arrays-\1.npz", str(path.relative_to(root)).encode()).decode()
        out[name] = _digest(path, root, tiny)
    # training writes timings everywhere; what it must reproduce is the adapter
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        out[f"train/{name}"] = _digest(root / "train" / name, root, tiny)
    return out


def _digest(path: Path, root: Path, tiny: Path) -> str | dict:
    if path.suffix in ARRAY_FILES:
        return array_summary(path)
    return hashlib.sha256(_normalised(path, root, tiny)).hexdigest()


def test_simulated_outputs_are_the_recorded_bytes(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("golden")
    produce(root, tiny_model_dir)
    found = digests(root, tiny_model_dir)
    if os.environ.get("METAMOD_RECORD_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"recorded {len(found)} digests in {GOLDEN}")
    recorded = json.loads(GOLDEN.read_text())
    changed = sorted(k for k in set(found) & set(recorded) if not same_output(found[k], recorded[k]))
    missing, extra = sorted(set(recorded) - set(found)), sorted(set(found) - set(recorded))
    assert not (changed or missing or extra), f"changed {changed}; missing {missing}; new {extra}"
