"""``metamod sweep``: one eval config, one setting varied over values, one eval run per value, a table and plots.

::

    metamod sweep --config configs/eval/marco_sim.yaml --param method_options.marco.iterations --values 1 2 3 4
    metamod sweep --config configs/eval/marco_sim.yaml --param memory_options.condense_every --values 1 2 4 8 16 \\
        --set methods=[marco] --output_dir runs/sweep/marco_tc

``--param`` is a dotted path into the eval config (``max_iterations``, ``method_options.<method>.<key>``,
``memory_options.<key>``, ``code_simulation.<key>``, ...); each value is read as YAML (``2``, ``true``, ``[1, 2]``).
``--set key=value`` (repeatable) overrides other keys for every run the same way. Each run is a normal ``metamod
eval`` in ``<output_dir>/<param>=<value>/`` with its resolved config saved there (``sweep_config.yaml``), so an
interrupted sweep resumes run by run and any run can be repeated alone. The sweep writes ``sweep.json`` (every
metric of every task and method per value) and one plot per metric (``sweep-<metric>.png``: the metric against the
value, one line per method and task).

>>> set_path({"method_options": {"marco": {"agents": 2}}}, "method_options.marco.iterations", 3)
{'method_options': {'marco': {'agents': 2, 'iterations': 3}}}
>>> set_path({"max_iterations": 3}, "max_iterations.x", 1)
Traceback (most recent call last):
...
metamod.errors.ConfigError: --param max_iterations.x: max_iterations is 3, not a mapping
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import yaml

from metamod.config import ConfigError
from metamod.errors import anticipated_message, load_yaml_text, read_text
from metamod.files import atomic_write_json, atomic_write_text, write_after_checks

logger = logging.getLogger(__name__)

SWEEP_FILE = "sweep.json"
DEFAULT_METRICS = ("accuracy", "pair_accuracy", "tokens_per_question")


def set_path(config: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``config`` with the dotted ``path`` set to ``value`` (missing mappings are created)."""
    out = copy.deepcopy(config)
    keys = path.split(".")
    if not all(keys):
        raise ConfigError(f"--param {path!r}: empty key in the dotted path")
    node = out
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--param {path}: {'.'.join(keys[: i + 1])} is {child!r}, not a mapping")
        node = child
    node[keys[-1]] = value
    return out


def _yaml_value(text: str, what: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{what}: {text!r} is not a YAML value ({str(err).splitlines()[0]})") from err


def _label(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return "".join(c if c.isalnum() or c in "-_.," else "_" for c in text)


def run_sweep(
    config_path: str | Path,
    param: str,
    values: list[Any],
    *,
    output_dir: str | Path,
    overrides: dict[str, Any] | None = None,
    metrics: tuple[str, ...] = DEFAULT_METRICS,
    plots: bool = True,
) -> dict[str, Any]:
    """Run one ``metamod eval`` per value of ``param`` and collect the results (see the module docstring).

    Returns:
        The ``sweep.json`` document: ``{"param", "values", "runs": [{"value", "output_dir", "results"}]}``.
    """
    from metamod.evaluate.harness import main as eval_main

    path = Path(config_path)
    if not path.is_file():
        raise ConfigError(f"Config file not found: {path} (expected a metamod eval YAML)")
    base = load_yaml_text(read_text(path), path, error=ConfigError) or {}
    if not isinstance(base, dict):
        raise ConfigError(f"{path}: an eval config must be a YAML mapping")
    if not values:
        raise ConfigError("--values is empty: give at least one value to sweep")
    for key, value in (overrides or {}).items():
        base = set_path(base, key, value)
    out = Path(output_dir)

    def checks() -> list[tuple[Any, Path, dict[str, Any]]]:  # every run's config (keys, values, tasks, models, ...)
        configs = []
        for value in values:
            run_dir = out / f"{param}={_label(value)}"
            cfg = set_path(base, param, value)
            cfg["output_dir"] = str(run_dir)
            check_run_config(cfg, f"--param {param}={value!r}")
            configs.append((value, run_dir, cfg))
        return configs

    with write_after_checks(out, checks) as configs:
        runs = []
        for value, run_dir, cfg in configs:
            run_dir.mkdir(parents=True, exist_ok=True)
            cfg_file = atomic_write_text(run_dir / "sweep_config.yaml", yaml.safe_dump(cfg, sort_keys=False))
            logger.info("sweep %s = %r -> %s", param, value, run_dir)
            code = eval_main(["--config", str(cfg_file)])
            if code:
                raise ConfigError(f"sweep: the eval run for {param}={value!r} failed (exit {code}); see {run_dir}")
            results = json.loads((run_dir / "results.json").read_text())
            runs.append({"value": value, "output_dir": str(run_dir), "results": results["results"]})
        return _finish(out, path, param, values, base, overrides, runs, metrics, plots)


def check_run_config(cfg: dict[str, Any], what: str) -> None:
    """Parse one run's eval config and run the eval's own checks on it (:func:`metamod.evaluate.harness.check_eval`),
    writing nothing; an error names ``what`` (the swept value), not a generated file."""
    from metamod.config import parse_config
    from metamod.evaluate.config import EvalConfig
    from metamod.evaluate.harness import check_eval
    from metamod.memory import MemoryConfig

    with tempfile.TemporaryDirectory(prefix="metamod-sweep-check-") as folder:
        cfg_file = Path(folder) / "sweep_config.yaml"
        cfg_file.write_text(yaml.safe_dump(cfg, sort_keys=False))
        try:
            config, memory_config = parse_config([EvalConfig, MemoryConfig], ["--config", str(cfg_file)])
            check_eval(config, memory_config)
        except Exception as err:
            message = anticipated_message(err)
            if message is None:  # a bug: keep its traceback
                raise
            message = message.replace(f" in {cfg_file}", "").replace(str(cfg_file), "the config")
            raise ConfigError(f"{what}: {message}") from None


def _finish(out, path, param, values, base, overrides, runs, metrics, plots) -> dict[str, Any]:
    """Write ``sweep.json`` and the plots (``out`` locked)."""
    document = {
        "param": param,
        "values": values,
        "config": str(path),
        "overrides": overrides or {},
        "simulated": bool(base.get("debaters") == "simulated"),
        "runs": runs,
    }
    atomic_write_json(out / SWEEP_FILE, document)
    if plots:
        for metric in metrics:
            write_sweep_plot(document, metric, out / f"sweep-{metric}.png")
    return document


def sweep_series(document: dict[str, Any], metric: str) -> dict[str, list[float | None]]:
    """``{"<task>/<method>": [metric at each value]}`` from a sweep document (``None`` where absent).

    >>> doc = {"values": [1, 2], "runs": [{"results": {"t": {"m": {"accuracy": 0.5}}}},
    ...                                   {"results": {"t": {"m": {"accuracy": 0.7}}}}]}
    >>> sweep_series(doc, "accuracy")
    {'t/m': [0.5, 0.7]}
    """
    series: dict[str, list[float | None]] = {}
    for i, run in enumerate(document["runs"]):
        for task, methods in run["results"].items():
            for method, values in methods.items():
                key = f"{task}/{method}"
                series.setdefault(key, [None] * len(document["runs"]))[i] = values.get(metric)
    return {k: v for k, v in series.items() if any(x is not None for x in v)}


def write_sweep_plot(document: dict[str, Any], metric: str, path: Path) -> Path | None:
    """The metric against the swept value, one line per task/method (``None`` when no run has the metric)."""
    series = sweep_series(document, metric)
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [str(v) for v in document["values"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, ys in series.items():
        ax.plot(labels, [float("nan") if y is None else y for y in ys], marker="o", label=key)
    ax.set_xlabel(document["param"])
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} vs {document['param']}" + (" (simulated)" if document.get("simulated") else ""))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one-line :class:`ConfigError`s (exit 2 through the dispatcher, no usage block)."""

    def error(self, message: str):
        raise ConfigError(f"{message} (see `metamod sweep --help`)")


def main(argv: list[str] | None = None) -> int:
    """``metamod sweep --config x.yaml --param a.b --values v1 v2 ... [--set k=v] [--output_dir d]``."""
    parser = _Parser(prog="metamod sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="The eval config (YAML) every run starts from.")
    parser.add_argument("--param", required=True, help="Dotted path of the setting to vary.")
    parser.add_argument("--values", nargs="+", required=True, help="The values (YAML each).")
    parser.add_argument("--set", action="append", default=[], help="key=value override for every run (repeatable).")
    parser.add_argument("--output_dir", default=None, help="Where the runs go (default runs/sweep/<param>).")
    parser.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS), help="Metrics to plot.")
    parser.add_argument("--plots", type=lambda s: s.lower() in ("1", "true", "yes"), default=True)
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value (e.g. methods=[marco])")
        overrides[key] = _yaml_value(raw, f"--set {key}")
    values = [_yaml_value(v, f"--values of {args.param}") for v in args.values]
    output_dir = args.output_dir or f"runs/sweep/{args.param}"
    document = run_sweep(
        args.config,
        args.param,
        values,
        output_dir=output_dir,
        overrides=overrides,
        metrics=tuple(args.metrics),
        plots=args.plots,
    )
    for metric in args.metrics:
        for key, ys in sweep_series(document, metric).items():
            shown = ", ".join("-" if y is None else f"{y:.3f}" for y in ys)
            print(f"{metric:<20} {key:<40} {shown}")
    print(f"wrote {Path(output_dir) / SWEEP_FILE}")
    return 0
