"""Adapter folders: finding the one to export (final adapter or a ``checkpoint-*``) and checking that it loads.

:func:`check_adapter` is what ``metamod export`` (and :func:`metamod.train.hub.push_to_hub`) run before anything
is copied or uploaded, and ``metamod eval --moderator`` before its output folder is touched: ``adapter_config.json`` must parse, the weights file must read (``safetensors.safe_open``:
header and tensors), the tensor names must be the LoRA A/B pairs of the configured ``target_modules``, the shapes
must carry the configured rank ``r`` (or its ``rank_pattern`` override) and every value must be finite. Problems
raise :class:`metamod.config.ConfigError` naming the file and what is wrong. :func:`check_resume_checkpoint` does
the same for the checkpoint ``metamod train --resume_from_checkpoint`` would load.

>>> checkpoint_step(Path("run/checkpoint-40"))
40
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metamod.config import ConfigError
from metamod.errors import InputError, load_json

logger = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_WEIGHTS_BIN = "adapter_model.bin"
#: tensor-name suffixes of a saved LoRA adapter (PEFT drops the adapter name when saving)
_LORA_TENSOR = re.compile(
    r"^(?P<module>.+)\.(?P<kind>lora_A|lora_B)\.weight$|^(?P<emb>.+)\.(?P<ekind>lora_embedding_[AB])$"
)
#: other LoRA tensors a valid adapter may hold (lora_bias, DoRA magnitudes)
_LORA_EXTRA = re.compile(r"\.lora_B\.bias$|\.lora_magnitude_vector(\.weight)?$")


# ---------------------------------------------------------------- finding the adapter


def checkpoint_step(path: Path) -> int:
    """The step number of a ``checkpoint-<step>`` folder (-1 when the name has no number)."""
    match = re.fullmatch(r"checkpoint-(\d+)", path.name)
    return int(match.group(1)) if match else -1


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """``checkpoint-*`` sub-folders of ``run_dir`` that hold an adapter, oldest first."""
    run_dir = Path(run_dir)
    found = [p for p in run_dir.glob("checkpoint-*") if p.is_dir() and (p / ADAPTER_CONFIG).is_file()]
    return sorted(found, key=checkpoint_step)


def resolve_adapter_dir(adapter: str | os.PathLike, checkpoint: str | None = None) -> Path:
    """Find the adapter folder to export and check that it is complete.

    Args:
        adapter: an adapter folder, or a training output dir holding ``checkpoint-*`` folders.
        checkpoint: ``None`` (the adapter at the top of ``adapter``), ``"latest"``, ``"checkpoint-<step>"`` or
            ``"<step>"``.

    Returns:
        The folder holding ``adapter_config.json`` and the adapter weights.

    Raises:
        FileNotFoundError: missing folder, missing ``adapter_config.json`` or weights, unknown checkpoint (the
            message lists what exists and what to pass).
    """
    root = Path(adapter)
    if not root.is_dir():
        raise FileNotFoundError(f"adapter folder {root} does not exist (pass --adapter <metamod train output_dir>)")
    checkpoints = list_checkpoints(root)
    names = [p.name for p in checkpoints]
    if checkpoint is not None and str(checkpoint) != "":
        checkpoint = str(checkpoint)
        if not checkpoints:
            raise FileNotFoundError(
                f"--checkpoint {checkpoint!r} given but {root} holds no checkpoint-* adapter folder"
            )
        if checkpoint == "latest":
            chosen = checkpoints[-1]
        else:
            name = checkpoint if checkpoint.startswith("checkpoint-") else f"checkpoint-{checkpoint}"
            if name not in names:
                raise FileNotFoundError(f"checkpoint {name} not found in {root}; available: {', '.join(names)}")
            chosen = root / name
        logger.info("Exporting checkpoint %s", chosen)
        root = chosen
    elif not (root / ADAPTER_CONFIG).is_file():
        if checkpoints:
            raise FileNotFoundError(
                f"{root} has no {ADAPTER_CONFIG} (no final adapter) but holds checkpoints {', '.join(names)}; pass "
                f"--checkpoint latest (= {names[-1]}) or --adapter {checkpoints[-1]}"
            )
        present = sorted(p.name for p in root.iterdir())[:10]
        raise FileNotFoundError(
            f"{root} is not a PEFT adapter folder: {ADAPTER_CONFIG} is missing (found: {present or 'nothing'}). "
            f"Pass the output_dir of `metamod train`, which holds {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS}."
        )
    if not (root / ADAPTER_WEIGHTS).is_file() and not (root / ADAPTER_WEIGHTS_BIN).is_file():
        raise FileNotFoundError(f"{root} has {ADAPTER_CONFIG} but no adapter weights ({ADAPTER_WEIGHTS} is missing)")
    return root


def read_adapter_config(adapter_dir: Path) -> dict[str, Any]:
    """``adapter_config.json`` as a dict (a :class:`~metamod.config.ConfigError` when it is not a JSON object)."""
    path = Path(adapter_dir) / ADAPTER_CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; expected the adapter's PEFT config next to its weights")
    try:  # UTF-8 whatever the locale, the bad byte named by line and column (an ASCII locale named "ascii" here)
        data = load_json(path, what="PEFT adapter config (a JSON object)")
    except InputError as err:
        raise ConfigError(str(err)) from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


# ---------------------------------------------------------------- what the adapter holds


def adapter_tensor_shapes(adapter_dir: str | os.PathLike) -> tuple[Path, dict[str, tuple[int, ...]]]:
    """Read the adapter's weights file and return ``(file, {tensor name: shape})``.

    ``adapter_model.safetensors`` is opened with ``safetensors.safe_open`` (header and every tensor, so a
    truncated or overwritten file fails here); an old ``adapter_model.bin`` is loaded with ``weights_only``.

    Raises:
        ConfigError: the file cannot be read, or a tensor holds NaN/inf (names the file and the tensor).
    """
    import torch

    adapter_dir = Path(adapter_dir)
    path = adapter_dir / ADAPTER_WEIGHTS
    tensors: dict[str, Any] = {}
    if path.is_file():
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (safe_open is no dict)
        except (SafetensorError, OSError, RuntimeError, ValueError) as err:
            raise ConfigError(
                f"{path} is not a readable safetensors file ({err}); it is corrupt or truncated: export another "
                "checkpoint (--checkpoint) or retrain"
            ) from err
    else:
        path = adapter_dir / ADAPTER_WEIGHTS_BIN
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, ValueError, EOFError) as err:
            raise ConfigError(f"{path} could not be loaded ({err}); it is corrupt or truncated") from err
        if not isinstance(state, Mapping):
            raise ConfigError(f"{path} must hold a state dict (name -> tensor), got {type(state).__name__}")
        tensors = dict(state)
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise ConfigError(f"{path}: entry {name!r} is not a tensor ({type(tensor).__name__})")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ConfigError(f"{path}: tensor {name} holds NaN or inf values; the adapter is broken (retrain)")
    return path, {name: tuple(t.shape) for name, t in tensors.items()}


def _module_rank(module: str, r: int, rank_pattern: Mapping[str, Any]) -> int:
    """The rank PEFT gives ``module``: the first ``rank_pattern`` key matching its name, else ``r``."""
    for pattern, rank in rank_pattern.items():
        if re.match(rf"(?:^|.*\.){pattern}$", module):
            return int(rank)
    return r


def _is_target(module: str, targets: Any) -> bool:
    if isinstance(targets, str):
        return targets == "all-linear" or re.fullmatch(targets, module) is not None
    if isinstance(targets, (list, tuple, set)):
        return any(module == t or module.endswith("." + str(t)) for t in targets)
    return True  # no target_modules recorded: nothing to compare against


def lora_problems(shapes: Mapping[str, tuple[int, ...]], adapter_config: Mapping[str, Any]) -> list[str]:
    """What is wrong with a LoRA adapter's tensors given its ``adapter_config.json`` (``[]`` when nothing is).

    Checked: there are LoRA tensors; every adapted module has both its A and B matrix; every adapted module is one
    of ``target_modules``; A's first and B's second dimension equal the rank (``r``, or its ``rank_pattern``
    override). Adapters of other PEFT types are not checked here.

    Args:
        shapes: ``{tensor name: shape}`` as saved by PEFT (``base_model.model.<module>.lora_A.weight``, ...).
        adapter_config: the adapter's config.

    Returns:
        One message per problem.

    >>> cfg = {"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"]}
    >>> ok = {"base_model.model.layers.0.q_proj.lora_A.weight": (4, 64),
    ...       "base_model.model.layers.0.q_proj.lora_B.weight": (64, 4)}
    >>> lora_problems(ok, cfg)
    []
    >>> lora_problems(ok, {**cfg, "r": 8})[0]
    'layers.0.q_proj: lora_A.weight has shape (4, 64) but r = 8 (the rank must be its first dimension)'
    >>> lora_problems({"base_model.model.layers.0.k_proj.lora_A.weight": (4, 64)}, cfg)
    ['layers.0.k_proj: has lora_A but no lora_B', 'layers.0.k_proj: adapted but not in target_modules [q_proj]']
    """
    if str(adapter_config.get("peft_type", "LORA")).upper() != "LORA":
        return []
    r = adapter_config.get("r")
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        return [f"{ADAPTER_CONFIG} has no valid LoRA rank r (got {r!r})"]
    rank_pattern = adapter_config.get("rank_pattern") or {}
    targets = adapter_config.get("target_modules")
    modules: dict[str, dict[str, tuple[int, ...]]] = {}
    problems = []
    for name, shape in shapes.items():
        match = _LORA_TENSOR.match(name)
        if match:
            module = match.group("module") or match.group("emb")
            kind = match.group("kind") or match.group("ekind")
            modules.setdefault(module.removeprefix("base_model.model."), {})[kind] = shape
        elif "lora_" in name and not _LORA_EXTRA.search(name):
            problems.append(f"unexpected tensor {name} (not a LoRA A/B weight)")
    if not modules:
        return [f"no LoRA weights (no *.lora_A.weight / *.lora_B.weight tensors among {len(shapes)})", *problems]
    for module, kinds in sorted(modules.items()):
        a_kind, b_kind = ("lora_embedding_A", "lora_embedding_B") if "lora_embedding_A" in kinds or (
            "lora_embedding_B" in kinds) else ("lora_A", "lora_B")  # fmt: skip
        a, b = kinds.get(a_kind), kinds.get(b_kind)
        if a is None or b is None:
            have, missing = (a_kind, b_kind) if b is None else (b_kind, a_kind)
            problems.append(f"{module}: has {have} but no {missing}")
        if not _is_target(module, targets):
            listed = ", ".join(map(str, targets)) if isinstance(targets, (list, tuple)) else targets
            problems.append(f"{module}: adapted but not in target_modules [{listed}]")
        rank = _module_rank(module, r, rank_pattern)
        label = "r" if rank == r else "rank_pattern rank"
        suffix = "" if a_kind.startswith("lora_embedding") else ".weight"
        if a is not None and (len(a) < 2 or a[0] != rank):
            problems.append(
                f"{module}: {a_kind}{suffix} has shape {a} but {label} = {rank} (the rank must be its first dimension)"
            )
        if b is not None and (len(b) < 2 or b[1] != rank):
            problems.append(
                f"{module}: {b_kind}{suffix} has shape {b} but {label} = {rank} (the rank must be its second dimension)"
            )
    return problems


def check_adapter(adapter_dir: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """Check that an adapter folder loads: its config parses and its weights match it (see :func:`lora_problems`).

    Args:
        adapter_dir: the folder holding ``adapter_config.json`` and the adapter weights.

    Returns:
        ``{tensor name: shape}`` of the weights.

    Raises:
        ConfigError: naming the file and everything that is wrong (at most ten problems are listed).
    """
    config = read_adapter_config(Path(adapter_dir))
    path, shapes = adapter_tensor_shapes(adapter_dir)
    _refuse(
        lora_problems(shapes, config),
        f"{path} does not match {Path(adapter_dir) / ADAPTER_CONFIG}",
        ". The adapter would not load; export another checkpoint (--checkpoint) or retrain",
    )
    return shapes


def _refuse(problems: list[str], what: str, hint: str) -> None:
    """One :class:`ConfigError` for ``problems`` (at most ten listed), or nothing when there are none."""
    if problems:
        more = f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise ConfigError(f"{what}: {'; '.join(problems[:10])}{more}{hint}")


def base_weight_shapes(base_dir: str | os.PathLike) -> dict[str, tuple[int, ...]] | None:
    """``{weight name: shape}`` of a local base model's safetensors files, from their headers only (no tensor is
    read); None when ``base_dir`` is not a local folder of safetensors (a Hub id, an old ``.bin`` model)."""
    from safetensors import SafetensorError, safe_open

    folder = Path(base_dir).expanduser()
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="numpy") as handle:
                for name in handle.keys():  # noqa: SIM118 (safe_open is no dict)
                    shapes[name] = tuple(handle.get_slice(name).get_shape())
        except (SafetensorError, OSError, ValueError) as err:
            raise ConfigError(f"{file}: the base model's weights do not read ({err})") from err
    return shapes


def base_model_problems(shapes: Mapping[str, tuple[int, ...]], base: Mapping[str, tuple[int, ...]]) -> list[str]:
    """How the LoRA tensors ``shapes`` fail to fit the base model's weights ``base`` (``{name: shape}``): a target
    module the base does not have, or A/B matrices whose input/output sizes differ from the module's.

    >>> base = {"model.layers.0.self_attn.q_proj.weight": (64, 32)}
    >>> ok = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": (4, 32),
    ...       "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": (64, 4)}
    >>> base_model_problems(ok, base)
    []
    >>> base_model_problems({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": (4, 48)}, base)
    ['model.layers.0.self_attn.q_proj: lora_A takes 48 inputs, the base module 32']
    """
    problems = []
    for name, shape in shapes.items():
        for part, axis, what in ((".lora_A.weight", 1, "inputs"), (".lora_B.weight", 0, "outputs")):
            if not name.endswith(part):
                continue
            module = name[: -len(part)].removeprefix("base_model.model.")
            module = re.sub(r"\.lora_[AB]\.[^.]+$", "", module)
            weight = base.get(f"{module}.weight")
            if weight is None:
                problems.append(f"{module}: no such module in the base model")
            elif len(shape) != 2 or len(weight) != 2 or shape[axis] != weight[axis]:
                got = shape[axis] if len(shape) == 2 else shape
                problems.append(f"{module}: {part[1:7]} takes {got} {what}, the base module {weight[axis]}")
    return problems


def check_adapter_fits_base(adapter_dir: str | os.PathLike, base_dir: str | os.PathLike) -> None:
    """Fail naming the adapter and the base model when the adapter's LoRA matrices do not fit a LOCAL base model's
    weights (read from the safetensors headers; a Hub base is not checked here: it loads later, offline or not).

    Raises:
        ConfigError: every mismatch (at most ten listed).
    """
    base = base_weight_shapes(base_dir)
    if base is None:
        return
    _, shapes = adapter_tensor_shapes(adapter_dir)
    _refuse(
        base_model_problems(shapes, base),
        f"adapter {adapter_dir} does not fit the base model {base_dir}",
        "; pass the base it was trained on (--base_model / moderator_base)",
    )


# ---------------------------------------------------------------- resuming training


def check_resume_checkpoint(resume_from_checkpoint: Any, output_dir: str | os.PathLike) -> str | None:
    """The checkpoint folder ``metamod train --resume_from_checkpoint`` names, checked before any model loads.

    ``true`` means the latest ``checkpoint-<step>`` of ``output_dir`` (what ``transformers`` resumes from). The
    checkpoint's adapter (:func:`check_adapter`: config, weights, shapes) or full model weights (safetensors
    header) and its ``trainer_state.json`` must load, so a missing or corrupt checkpoint is a one-line error
    and nothing is written.

    Args:
        resume_from_checkpoint: the option's value (``None``/``false``: a fresh start; ``true``; a folder).
        output_dir: the run folder (searched for ``true``).

    Returns:
        The checkpoint folder, or ``None`` for a fresh start.

    Raises:
        ConfigError: no checkpoint to resume from, or one that would not load (naming the file).

    >>> check_resume_checkpoint(None, "runs/x") is None and check_resume_checkpoint("false", "runs/x") is None
    True
    """
    from metamod.errors import check_safetensors, load_json

    value = resume_from_checkpoint
    text = str(value).strip().lower()
    if value is None or value is False or text in ("", "false", "none", "null"):
        return None
    if value is True or text == "true":
        from transformers.trainer_utils import get_last_checkpoint

        folder = Path(output_dir)
        last = get_last_checkpoint(str(folder)) if folder.is_dir() else None
        if last is None:
            raise ConfigError(
                f"resume_from_checkpoint=true but {folder} holds no checkpoint-<step> folder to resume from; expected "
                "the output_dir of an interrupted run (drop resume_from_checkpoint to start fresh)"
            )
        checkpoint = Path(last)
    else:
        checkpoint = Path(str(value)).expanduser()
        if not checkpoint.is_dir():
            raise ConfigError(
                f"resume_from_checkpoint {str(value)!r} is not a folder; expected a checkpoint-<step> folder of a "
                "run (or true: the latest one in output_dir)"
            )
    if (checkpoint / ADAPTER_CONFIG).is_file():
        check_adapter(checkpoint)
    elif (checkpoint / "model.safetensors").is_file():
        check_safetensors(checkpoint / "model.safetensors", what="checkpoint weights")
    state = checkpoint / "trainer_state.json"
    if state.is_file():
        load_json(state, what="trainer state (JSON object) of the checkpoint")
    return str(checkpoint)
