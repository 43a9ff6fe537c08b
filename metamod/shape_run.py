"""``metamod shape-run``: a paper config end to end on a CPU, as shipped except for what a CPU cannot hold.

A GPU config that has never run costs GPU-days when it fails on a node. ``shape-run`` runs one through the real
command (``metamod eval`` / ``rollout`` / ``train`` / ``mine-behaviours`` / ``fit-cheatsheet``: config parsing,
checks, every method, memory and option as written) with only these changes, all written into
``<output_dir>/shape_config.yaml`` beside the outputs:

- **models**: every model reference (debaters, agents, MRO roles, moderator and its base, judge, memory LLM, the
  model being trained) becomes one local model, the offline tiny random model by default (``--model``: e.g. the
  embedded SmolLM2 where a role must write parseable text); vLLM backends become ``hf``; embedder folders become the
  ``hashing`` embedder. The tiny model writes noise: the run checks shapes, budgets and data flow, not accuracy;
- **prompt budgets as on the node**: each backend keeps the config's ``max_model_len`` (else ``default_context``)
  and reserves the config's ``max_tokens``; tokens are counted with the conservative estimate
  (:func:`metamod.llm.budget.estimate_tokens`), since the real tokenizer is absent; generations are capped at
  ``generation_cap`` tokens (the reserve is not); every prompt sent goes to ``prompts.jsonl``;
- **data**: each task reads its fixture (a few rows in the dataset's real column schema, ``fixtures`` folder's
  ``manifest.json``: task -> task options) with the config's own task options, ``questions`` per task;
- **size**: the first seed only; memory batches of ``memory_batch_size`` questions (so every memory observes and
  serves at least once per task); training runs ``max_steps`` steps without vLLM;
- **inputs made by other paper configs** are made by their shape runs first, in ``<output_dir>/deps/``: a train
  config's dataset (the paper rollout config, then ``build-dataset`` with the train config's row options), the
  cheatsheet eval's corpus and the fit's behaviours (``fit_cheatsheet_paper`` on ``behaviours_fixture``, a made-up
  corpus in the mined schema, since the tiny model mines nothing parseable; or ``mine_paper`` first).

>>> shape_kind("configs/eval/mc2_paper.yaml"), shape_kind("configs/memory/fit_cheatsheet_paper.yaml")
('eval', 'fit')
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from metamod.errors import ConfigError, load_json

logger = logging.getLogger(__name__)

#: the command each kind of config runs with
COMMANDS = {"eval": "eval", "rollout": "rollout", "train": "train", "mine": "mine-behaviours", "fit": "fit-cheatsheet"}
#: the paper configs whose outputs other paper configs read
ROLLOUT_FOR_TRAIN = "configs/rollout/paper_gsm8k_mmlu_llama8b.yaml"
MINE_CONFIG = "configs/memory/mine_paper.yaml"
FIT_CONFIG = "configs/memory/fit_cheatsheet_paper.yaml"
PROMPT_LOG = "prompts.jsonl"
SHAPE_CONFIG = "shape_config.yaml"
REPORT = "shape_report.json"
#: BackendConfig options that only a GPU / vLLM engine reads
_GPU_ONLY = ("tensor_parallel_size", "gpu_memory_utilization", "enable_lora", "max_lora_rank", "hf_overrides", "dtype")


@dataclass
class ShapeRunConfig:
    """``metamod shape-run``: which paper config, with which stand-ins (module docstring)."""

    paper_config: str = field(
        default="", metadata={"help": "The config to run (configs/eval|rollout|train|memory/...)."}
    )
    fixtures: str = field(
        default="tests/fixtures/datasets",
        metadata={"help": "Folder with manifest.json (task -> task options of its fixture file) and the files."},
    )
    output_dir: str | None = field(default=None, metadata={"help": "Where to run (default runs/shape/<config>)."})
    model: str | None = field(
        default=None, metadata={"help": "The model every role uses (default: the tiny model, built once)."}
    )
    questions: int = field(default=4, metadata={"help": "Questions per task."})
    memory_batch_size: int = field(default=2, metadata={"help": "Questions per memory batch (>= 2 batches a task)."})
    generation_cap: int = field(default=8, metadata={"help": "Most tokens generated per call (budgets unchanged)."})
    default_context: int = field(
        default=8192, metadata={"help": "The context assumed for a backend whose config names no max_model_len."}
    )
    max_steps: int = field(default=2, metadata={"help": "Training steps of a train config."})
    deps_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where the shape runs of other paper configs that this one reads go (default <output_dir>/deps; "
            "share one folder between shape runs to make each once: they resume)."
        },
    )
    dependency_model: str | None = field(
        default=None,
        metadata={
            "help": "The model of the mining dependency (its behaviours must parse, e.g. smollm2-135m-instruct); "
            "default: model."
        },
    )
    behaviours_fixture: str | None = field(
        default="tests/fixtures/behaviours/behaviours.jsonl",
        metadata={
            "help": "A behaviours.jsonl (the mined schema) the fit dependency reads instead of the mining shape run's "
            "output (the tiny model mines nothing parseable): embedded with hashing, then fitted as configured. "
            "null: mine with dependency_model instead."
        },
    )
    dependency_generation_cap: int = field(
        default=96, metadata={"help": "generation_cap of the mining dependency (a behaviour line must fit)."}
    )

    def __post_init__(self) -> None:
        if not self.paper_config:
            raise ConfigError("shape-run needs --paper_config <a config under configs/>")
        for name in ("questions", "memory_batch_size", "generation_cap", "default_context", "max_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")


def shape_kind(path: str | Path) -> str:
    """Which command a config belongs to, from its folder (and, under configs/memory, its name)."""
    path = Path(path)
    folder = path.parent.name
    if folder in ("eval", "rollout", "train"):
        return folder
    if folder == "memory":
        return "fit" if path.name.startswith("fit_") else "mine"
    raise ConfigError(f"{path}: shape-run knows configs under configs/eval, rollout, train and memory")


def load_fixtures(folder: str | Path) -> dict[str, dict[str, Any]]:
    """``task -> task options`` of the fixtures in ``folder`` (``manifest.json``; file paths made absolute)."""
    folder = Path(folder)
    manifest = load_json(folder / "manifest.json", what="fixtures manifest")
    out = {}
    for task, options in manifest.items():
        options = dict(options)
        if "task_data_files" in options:
            options["task_data_files"] = str((folder / options["task_data_files"]).resolve())
        out[task] = options
    return out


# --------------------------------------------------------------------------------------------- stand-ins


@dataclass
class _StandIn:
    """What replaces a config's models, data and sizes."""

    model: str
    fixtures: dict[str, dict[str, Any]]
    prompt_log: str
    run: ShapeRunConfig

    def backend(self, options: dict[str, Any] | None, *, max_tokens: int | None = None) -> dict[str, Any]:
        """Backend options for the stand-in model: CPU hf, the config's context kept, the estimate, the log."""
        options = {k: v for k, v in dict(options or {}).items() if k not in _GPU_ONLY and k != "backend"}
        options.update(
            device="cpu",
            max_model_len=options.get("max_model_len") or self.run.default_context,
            token_estimate=True,
            generation_cap=self.run.generation_cap,
            prompt_log=self.prompt_log,
        )
        options.pop("model", None)
        return options

    def task_options(self, task: str, options: dict[str, Any] | None) -> dict[str, Any]:
        """The config's options of ``task`` over its fixture, ``questions`` questions."""
        base = task.split("@", 1)[0]
        if base not in self.fixtures:
            raise ConfigError(f"shape-run: no fixture for task {base!r} (add it to {self.run.fixtures}/manifest.json)")
        out = {k: v for k, v in dict(options or {}).items() if k not in ("task_source",)}
        out.update(self.fixtures[base])
        out["task_limit"] = self.run.questions
        return out


def _embedder(options: dict[str, Any]) -> dict[str, Any]:
    """Memory / miner options with any model-backed embedder replaced by ``hashing``."""
    out = dict(options)
    if out.get("embedder") not in (None, "hashing"):
        out["embedder"] = "hashing"
    for key in ("embedder_model", "embedder_options"):
        out.pop(key, None)
    return out


def _with_stand_in_tasks(cfg: dict[str, Any], stand: _StandIn) -> dict[str, Any]:
    """A rollout, eval or mine-behaviours config (one task-selection shape: ``tasks``, ``task_options``, ``limit``) over the fixtures."""
    tasks = cfg.get("tasks") or ["arith"]
    cfg["task_options"] = {t: stand.task_options(t, (cfg.get("task_options") or {}).get(t)) for t in tasks}
    cfg["limit"] = stand.run.questions
    return cfg


def shape_eval(raw: dict[str, Any], stand: _StandIn, out: Path, deps: dict[str, str]) -> dict[str, Any]:
    """An eval config with the stand-ins (module docstring)."""
    cfg = _with_stand_in_tasks(copy.deepcopy(raw), stand)
    cfg["seeds"] = list(cfg.get("seeds") or [0])[:1]
    cfg["output_dir"] = str(out)
    cfg["plots"] = False
    if cfg.get("debaters", "simulated") != "simulated":
        cfg["debaters"] = "hf"
        cfg["debater_model"] = stand.model
        cfg["debater_backend_options"] = stand.backend(cfg.get("debater_backend_options"))
    for role in ("moderator", "moderator_base", "judge_model"):
        if cfg.get(role):
            cfg[role] = stand.model
    if cfg.get("moderator") or cfg.get("moderator_base") or "judge" in (cfg.get("methods") or []):
        cfg["moderator_backend"] = "hf"
        cfg["moderator_backend_options"] = stand.backend(cfg.get("moderator_backend_options"))
    if "judge_backend" in cfg:
        cfg["judge_backend"] = "hf"
    cfg["memory_backend"] = "hf"
    cfg["memory_model"] = stand.model
    cfg["memory_backend_options"] = stand.backend(cfg.get("memory_backend_options"))
    cfg["memory_batch_size"] = stand.run.memory_batch_size
    options = _embedder(cfg.get("memory_options") or {})
    if "corpus" in options:
        options["corpus"] = deps["corpus"]
    cfg["memory_options"] = options
    if cfg.get("task_memory_options"):
        cfg["task_memory_options"] = {t: _embedder(o) for t, o in cfg["task_memory_options"].items()}
    return cfg


def shape_rollout(raw: dict[str, Any], stand: _StandIn, out: Path, deps: dict[str, str]) -> dict[str, Any]:
    """A rollout config with the stand-ins: its debaters or MRO roles, its task block(s)."""
    cfg = _with_stand_in_tasks(copy.deepcopy(raw), stand)
    for key in ("debaters", "roles"):
        value = cfg.get(key)
        if isinstance(value, list):
            cfg[key] = [{"backend": "hf", "model": stand.model, **stand.backend(v)} for v in value]
        elif isinstance(value, dict):
            if "backend" in value or "model" in value:
                cfg[key] = {"backend": "hf", "model": stand.model, **stand.backend(value)}
            else:
                cfg[key] = {r: {"backend": "hf", "model": stand.model, **stand.backend(v)} for r, v in value.items()}
    cfg["output_dir"] = str(out)
    cfg["progress"] = False
    return cfg


def shape_train(raw: dict[str, Any], stand: _StandIn, out: Path, deps: dict[str, str]) -> dict[str, Any]:
    """A train config with the stand-ins: the model, the dataset made by the paper rollout, a few steps on CPU."""
    cfg = {k: v for k, v in copy.deepcopy(raw).items() if not k.startswith("vllm_")}
    cfg.update(
        model_name_or_path=stand.model,
        dataset_path=deps["dataset"],
        use_vllm=False,
        bf16=False,
        dtype="float32",
        gradient_checkpointing=False,
        max_steps=stand.run.max_steps,
        save_steps=stand.run.max_steps,
        output_dir=str(out),
        report_to="none",
        logging_steps=1,
    )
    cfg.pop("build_dataset_config", None)
    return cfg


def shape_mine(raw: dict[str, Any], stand: _StandIn, out: Path, deps: dict[str, str]) -> dict[str, Any]:
    """A mine-behaviours config with the stand-ins: its task selection over the fixtures, the model."""
    cfg = _with_stand_in_tasks(_embedder(copy.deepcopy(raw)), stand)
    cfg["backend"] = "hf"
    cfg["model"] = stand.model
    cfg["backend_options"] = stand.backend(cfg.get("backend_options"))
    cfg["output_dir"] = str(out)
    return cfg


def shape_fit(raw: dict[str, Any], stand: _StandIn, out: Path, deps: dict[str, str]) -> dict[str, Any]:
    """A fit-cheatsheet config on the behaviours its mine config's shape run made."""
    cfg = copy.deepcopy(raw)
    cfg["behaviours"] = deps["behaviours"]
    cfg["output_dir"] = str(out)
    return cfg


SHAPERS = {"eval": shape_eval, "rollout": shape_rollout, "train": shape_train, "mine": shape_mine, "fit": shape_fit}


# --------------------------------------------------------------------------------------------- running


def _model(run: ShapeRunConfig, root: Path) -> str:
    if run.model:
        return run.model
    from metamod.llm.tiny import ensure_tiny_model

    # positions far past every paper context, so the tiny model never cuts what the budget let through
    return str(ensure_tiny_model(root / "tiny-model", max_position_embeddings=131072))


def _dependencies(kind: str, raw: dict[str, Any], run: ShapeRunConfig, out: Path) -> dict[str, str]:
    """Run the shape runs whose outputs this config reads (module docstring); their paths by name."""
    deps: dict[str, str] = {}
    folder = Path(run.deps_dir).resolve() if run.deps_dir else out / "deps"
    sub = {"fixtures": run.fixtures, "model": run.model, "questions": run.questions}
    if kind == "train":
        rollout = shape_run(ShapeRunConfig(paper_config=ROLLOUT_FOR_TRAIN, output_dir=str(folder / "rollout"), **sub))
        from metamod.rollout.snapshots import build_dataset

        options = {
            "validation_fraction": float(raw.get("dataset_validation_fraction", 0.1)),
            "single_template": bool(raw.get("dataset_single_template", False)),
            "keep_agents": raw.get("dataset_keep_agents"),
        }
        dataset = folder / ("dataset-" + "-".join(f"{k}={v}" for k, v in options.items()))
        if not dataset.exists():
            build_dataset(rollout["output_dir"], dataset, **options)
        deps["dataset"] = str(dataset)
    if kind == "fit" or (kind == "eval" and "corpus" in (raw.get("memory_options") or {})):
        if run.behaviours_fixture:
            deps["behaviours"] = _embedded_fixture(Path(run.behaviours_fixture), folder / "behaviours-fixture")
        else:
            miner = {**sub, "model": run.dependency_model or run.model, "generation_cap": run.dependency_generation_cap}
            mined = shape_run(ShapeRunConfig(paper_config=MINE_CONFIG, output_dir=str(folder / "mine"), **miner))
            deps["behaviours"] = str(Path(mined["output_dir"]) / "behaviours.jsonl")
        if kind == "eval":
            fit = shape_run(
                ShapeRunConfig(paper_config=FIT_CONFIG, output_dir=str(folder / "fit"), **sub),
                behaviours=deps["behaviours"],
            )
            deps["corpus"] = fit["output_dir"]
    return deps


def _embedded_fixture(source: Path, folder: Path) -> str:
    """``source`` (behaviours in the mined schema) copied into ``folder`` with its hashing embeddings beside it."""
    from metamod.memory.cheatsheet.corpus import BEHAVIOURS_FILE, read_behaviours
    from metamod.memory.cheatsheet.mine import write_embeddings
    from metamod.memory.embed import build_embedder

    folder.mkdir(parents=True, exist_ok=True)
    behaviours = read_behaviours(source)
    (folder / BEHAVIOURS_FILE).write_text(source.read_text())
    write_embeddings(folder, behaviours, build_embedder("hashing"))
    return str(folder / BEHAVIOURS_FILE)


def shape_run(run: ShapeRunConfig, *, behaviours: str | None = None) -> dict[str, Any]:
    """Run ``run.paper_config`` with the stand-ins; returns the report (also in ``<output_dir>/shape_report.json``)."""
    from metamod.cli import main as metamod
    from metamod.files import atomic_write_json

    config_path = Path(run.paper_config)
    kind = shape_kind(config_path)
    raw = yaml.safe_load(config_path.read_text()) or {}
    out = Path(run.output_dir or f"runs/shape/{config_path.stem}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    stand = _StandIn(_model(run, out.parent), load_fixtures(run.fixtures), str(out / PROMPT_LOG), run)
    deps = {"behaviours": behaviours} if behaviours else _dependencies(kind, raw, run, out)
    target = out / "run"
    shaped = SHAPERS[kind](raw, stand, target, deps)
    shaped.pop("env", None)
    shape_config = out / SHAPE_CONFIG
    shape_config.write_text(
        f"# shape run of {config_path} (metamod shape-run)\n" + yaml.safe_dump(shaped, sort_keys=False)
    )
    logger.info("shape-run %s: metamod %s --config %s", config_path, COMMANDS[kind], shape_config)
    code = metamod([COMMANDS[kind], "--config", str(shape_config)])
    if code != 0:
        raise RuntimeError(f"shape-run {config_path}: metamod {COMMANDS[kind]} exited {code}")
    report = {
        "config": str(config_path),
        "kind": kind,
        "command": COMMANDS[kind],
        "output_dir": str(target),
        "prompt_log": stand.prompt_log,
        "shape_config": str(shape_config),
        "deps": deps,
    }
    atomic_write_json(out / REPORT, report, indent=2, sort_keys=False)
    return report


def main(argv: list[str] | None = None) -> int:
    """``metamod shape-run --paper_config configs/eval/mc2_paper.yaml [--fixtures DIR] [--output_dir DIR]``."""
    from metamod.config import parse_config

    (config,) = parse_config([ShapeRunConfig], argv, prog="metamod shape-run")
    report = shape_run(config)
    prompts = Path(report["prompt_log"])
    count = sum(1 for _ in prompts.open()) if prompts.is_file() else 0
    print(json.dumps({**report, "prompts_sent": count}, indent=2))
    return 0
