"""The two maps into the cheatsheet's space: a PCA of behaviour embeddings and the learned query projector.

- :class:`PCAProjection` (appendix D.1): fitted ONCE on the behaviour embeddings ``E(description)`` and held fixed
  afterwards, it maps raw embeddings (``D0`` columns) to ``D`` principal coordinates (default 128; capped at
  ``min(n_rows, D0)`` with a warning when the corpus is smaller).
- :class:`QueryProjector` (appendix D.3): an MLP ``D0 -> 512 -> 256 -> D`` with ReLUs, trained with AdamW to map
  a question's raw embedding ``E(x)`` onto the PCA embedding of a behaviour mined from it, minimising the mean
  squared L2 distance ``mean ||f(q) - u||^2``. Training uses torch; inference is numpy on the saved weights, so
  retrieval never imports torch.

Both save to plain numpy arrays (``state_arrays`` / ``from_state_arrays``), which a memory puts in its npz.

>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(50, 8)).astype(np.float32)
>>> pca = PCAProjection(n_components=3).fit(X)
>>> pca.transform(X).shape, pca.n_components_
((50, 3), 3)
>>> again = PCAProjection.from_state_arrays(pca.state_arrays())
>>> bool(np.array_equal(again.transform(X), pca.transform(X)))
True
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


def _as_matrix(X: Any, what: str, dim: int | None = None) -> np.ndarray:
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(f"{what} must be a 2-d array (rows, dims), got shape {X.shape}")
    if dim is not None and X.shape[1] != dim:
        raise ValueError(f"{what} has {X.shape[1]} columns; expected {dim}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{what} holds NaN or infinite values")
    return X


class PCAProjection:
    """Principal-component projection fitted once (eigendecomposition of the covariance, float64).

    Components are sorted by explained variance; each component's sign is fixed so that its largest-magnitude
    coordinate is positive, which makes the fit deterministic.

    Args:
        n_components: ``D``, the output dimension asked for (the fit keeps ``min(D, n_rows, D0)``).

    Attributes (after :meth:`fit`):
        mean_: ``(D0,)`` the mean of the fitted rows.
        components_: ``(D, D0)`` the principal axes, one per row.
        explained_variance_: ``(D,)`` the variance along each axis.
        explained_variance_ratio_: ``(D,)`` that variance over the total.
        n_components_: the ``D`` actually kept.
    """

    def __init__(self, n_components: int = 128) -> None:
        if n_components < 1:
            raise ValueError(f"n_components must be >= 1, got {n_components}")
        self.n_components = int(n_components)
        self.mean_: np.ndarray | None = None
        self.components_: np.ndarray | None = None
        self.explained_variance_: np.ndarray | None = None
        self.explained_variance_ratio_: np.ndarray | None = None

    @property
    def n_components_(self) -> int:
        return 0 if self.components_ is None else int(self.components_.shape[0])

    @property
    def input_dim(self) -> int:
        self._check_fitted()
        return int(self.components_.shape[1])

    def fit(self, X: Any) -> PCAProjection:
        """Fit on ``X`` of shape ``(n, D0)`` (``n >= 2``); returns ``self``."""
        X = _as_matrix(X, "PCA input")
        n, d0 = X.shape
        if n < 2:
            raise ValueError(f"PCA needs at least 2 rows, got {n}")
        k = min(self.n_components, n, d0)
        if k < self.n_components:
            logger.warning(
                "PCA: n_components=%d capped at %d (min of %d rows and %d input dims)", self.n_components, k, n, d0
            )
        X64 = X.astype(np.float64)
        mean = X64.mean(axis=0)
        centred = X64 - mean
        cov = centred.T @ centred / (n - 1)
        values, vectors = np.linalg.eigh(cov)
        order = np.argsort(-values, kind="stable")[:k]
        values, vectors = np.clip(values[order], 0.0, None), vectors[:, order].T
        signs = np.sign(vectors[np.arange(k), np.argmax(np.abs(vectors), axis=1)])
        vectors = vectors * np.where(signs == 0, 1.0, signs)[:, None]
        total = float(np.clip(np.trace(cov), 1e-300, None))
        self.mean_ = mean.astype(np.float32)
        self.components_ = vectors.astype(np.float32)
        self.explained_variance_ = values.astype(np.float32)
        self.explained_variance_ratio_ = (values / total).astype(np.float32)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Project ``X`` ``(m, D0)`` -> ``(m, D)`` float32 (a single row ``(D0,)`` gives ``(1, D)``)."""
        self._check_fitted()
        X = np.atleast_2d(np.asarray(X, dtype=np.float32))
        X = _as_matrix(X, "PCA transform input", self.input_dim)
        return ((X - self.mean_) @ self.components_.T).astype(np.float32)

    def fit_transform(self, X: Any) -> np.ndarray:
        return self.fit(X).transform(X)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The fitted state as numpy arrays (keys ``mean``, ``components``, ``explained_variance``, ...)."""
        self._check_fitted()
        return {
            "mean": self.mean_.copy(),
            "components": self.components_.copy(),
            "explained_variance": self.explained_variance_.copy(),
            "explained_variance_ratio": self.explained_variance_ratio_.copy(),
            "n_components": np.array(self.n_components, dtype=np.int64),
        }

    @classmethod
    def from_state_arrays(cls, arrays: dict[str, np.ndarray]) -> PCAProjection:
        """Rebuild a fitted projection from :meth:`state_arrays` (the round trip transforms identically)."""
        missing = sorted({"mean", "components", "explained_variance", "explained_variance_ratio"} - set(arrays))
        if missing:
            raise ValueError(f"PCA state is missing array(s) {missing}")
        requested = int(arrays["n_components"]) if "n_components" in arrays else len(arrays["components"])
        self = cls(n_components=requested)
        self.mean_ = np.asarray(arrays["mean"], dtype=np.float32).copy()
        self.components_ = np.asarray(arrays["components"], dtype=np.float32).copy()
        self.explained_variance_ = np.asarray(arrays["explained_variance"], dtype=np.float32).copy()
        self.explained_variance_ratio_ = np.asarray(arrays["explained_variance_ratio"], dtype=np.float32).copy()
        if self.components_.ndim != 2 or self.mean_.shape != (self.components_.shape[1],):
            raise ValueError(
                f"PCA state has components {self.components_.shape} and mean {self.mean_.shape}; expected (D, D0) "
                "and (D0,)"
            )
        return self

    def _check_fitted(self) -> None:
        if self.components_ is None:
            raise RuntimeError("PCAProjection is not fitted; call fit(X) first")


# --------------------------------------------------------------------------------------------- query projector


@dataclass
class ProjectorOptions:
    """Training settings of the query projector (defaults: appendix D.3)."""

    hidden: list[int] = field(default_factory=lambda: [512, 256], metadata={"help": "Hidden layer widths."})
    epochs: int = field(default=10, metadata={"help": "Passes over the training pairs."})
    batch_size: int = field(default=256, metadata={"help": "Pairs per AdamW step."})
    lr: float = field(default=1e-4, metadata={"help": "AdamW learning rate."})
    weight_decay: float = field(default=1e-4, metadata={"help": "AdamW weight decay."})
    held_out: float = field(
        default=0.1,
        metadata={
            "help": "Fraction of the pairs (of the groups, when groups are given) kept out of training to report "
            "the held-out MSE (0: none)."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of the initial weights, the split and the shuffling."})

    def __post_init__(self) -> None:
        if not self.hidden or any(int(h) < 1 for h in self.hidden):
            raise ValueError(f"hidden must be a non-empty list of positive widths, got {self.hidden}")
        if self.epochs < 0:
            raise ValueError(f"epochs must be >= 0, got {self.epochs}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not 0.0 <= self.held_out < 1.0:
            raise ValueError(f"held_out must be in [0, 1), got {self.held_out}")


def _mse(pred: np.ndarray, target: np.ndarray) -> float:
    """Mean over rows of the squared L2 distance (the training loss of appendix D.3)."""
    if len(pred) == 0:
        return float("nan")
    return float(np.mean(np.sum((pred.astype(np.float64) - target) ** 2, axis=1)))


class QueryProjector:
    """An MLP query projector ``D0 -> hidden... -> D`` (ReLU), evaluated in numpy.

    Args:
        weights: ``[(W, b), ...]`` per layer, ``W`` of shape ``(in, out)`` (float32).
        options: the training options it was (or will be) trained with.

    Attributes:
        history_: one ``{"epoch", "train_mse", "held_out_mse"}`` per epoch (epoch 0: before training).
        train_mse_, held_out_mse_: the final values (``held_out_mse_`` is ``nan`` without a held-out set).
    """

    def __init__(self, weights: list[tuple[np.ndarray, np.ndarray]], options: ProjectorOptions | None = None) -> None:
        if not weights:
            raise ValueError("QueryProjector needs at least one layer")
        self.weights = [(np.asarray(w, np.float32), np.asarray(b, np.float32)) for w, b in weights]
        for i, ((w, b), nxt) in enumerate(zip(self.weights, [*self.weights[1:], None], strict=True)):
            if w.ndim != 2 or b.shape != (w.shape[1],) or (nxt is not None and nxt[0].shape[0] != w.shape[1]):
                raise ValueError(f"layer {i}: weight {w.shape} and bias {b.shape} do not chain")
        self.options = options or ProjectorOptions()
        self.history_: list[dict[str, float]] = []
        self.train_mse_ = float("nan")
        self.held_out_mse_ = float("nan")

    @property
    def input_dim(self) -> int:
        return int(self.weights[0][0].shape[0])

    @property
    def output_dim(self) -> int:
        return int(self.weights[-1][0].shape[1])

    def transform(self, X: Any) -> np.ndarray:
        """Project raw query embeddings ``(m, D0)`` (or one row) to ``(m, D)`` float32, in numpy."""
        X = _as_matrix(np.atleast_2d(np.asarray(X, dtype=np.float32)), "projector input", self.input_dim)
        h = X
        for i, (w, b) in enumerate(self.weights):
            h = h @ w + b
            if i < len(self.weights) - 1:
                h = np.maximum(h, 0.0)
        return h.astype(np.float32)

    def mse(self, queries: Any, targets: Any) -> float:
        """``mean ||f(q) - u||^2`` over the rows."""
        return _mse(self.transform(queries), np.asarray(targets, np.float64))

    def num_parameters(self) -> int:
        return int(sum(w.size + b.size for w, b in self.weights))

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Weights as ``W0, b0, W1, b1, ...`` plus the options (JSON text in a 0-d string array)."""
        import json

        out: dict[str, np.ndarray] = {}
        for i, (w, b) in enumerate(self.weights):
            out[f"W{i}"], out[f"b{i}"] = w.copy(), b.copy()
        out["options"] = np.array(json.dumps(asdict(self.options), sort_keys=True))
        out["metrics"] = np.array([self.train_mse_, self.held_out_mse_], dtype=np.float64)
        return out

    @classmethod
    def from_state_arrays(cls, arrays: dict[str, np.ndarray]) -> QueryProjector:
        """Rebuild from :meth:`state_arrays` (identical ``transform`` output)."""
        import json

        layers = []
        i = 0
        while f"W{i}" in arrays:
            if f"b{i}" not in arrays:
                raise ValueError(f"projector state has W{i} but no b{i}")
            layers.append((arrays[f"W{i}"], arrays[f"b{i}"]))
            i += 1
        if not layers:
            raise ValueError("projector state holds no layers (expected arrays W0, b0, ...)")
        options = ProjectorOptions(**json.loads(str(arrays["options"]))) if "options" in arrays else None
        self = cls(layers, options)
        if "metrics" in arrays:
            self.train_mse_, self.held_out_mse_ = (float(v) for v in np.asarray(arrays["metrics"]))
        return self


def _split(n: int, groups: Any, held_out: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and held-out row indices (held-out by whole groups when ``groups`` is given)."""
    rng = np.random.default_rng(seed)
    if held_out <= 0 or n < 2:
        return np.arange(n), np.zeros(0, dtype=np.int64)
    if groups is None:
        perm = rng.permutation(n)
        k = min(max(1, int(round(held_out * n))), n - 1)
        return np.sort(perm[k:]), np.sort(perm[:k])
    groups = np.asarray(groups)
    if len(groups) != n:
        raise ValueError(f"groups has {len(groups)} entries for {n} pairs")
    unique = np.unique(groups)
    if len(unique) < 2:
        return np.arange(n), np.zeros(0, dtype=np.int64)
    k = min(max(1, int(round(held_out * len(unique)))), len(unique) - 1)
    held = set(rng.permutation(unique)[:k].tolist())
    mask = np.array([g in held for g in groups.tolist()])
    return np.flatnonzero(~mask), np.flatnonzero(mask)


def train_projector(
    queries: Any, targets: Any, options: ProjectorOptions | None = None, *, groups: Any = None
) -> QueryProjector:
    """Train the query projector on ``(E(question), PCA(E(behaviour)))`` pairs with AdamW and the MSE loss.

    Args:
        queries: ``(n, D0)`` raw query embeddings.
        targets: ``(n, D)`` PCA behaviour embeddings, row-aligned with ``queries``.
        options: training settings (default :class:`ProjectorOptions`, appendix D.3).
        groups: optional ``(n,)`` labels (e.g. question ids): the held-out set takes whole groups, so a question
            never sits on both sides of the split.

    Returns:
        The trained :class:`QueryProjector` (``history_``, ``train_mse_`` and ``held_out_mse_`` set; both MSEs
        are ``mean ||f(q) - u||^2``, logged per epoch).
    """
    import torch

    options = options or ProjectorOptions()
    Q = _as_matrix(queries, "queries")
    T = _as_matrix(targets, "targets")
    if len(Q) != len(T):
        raise ValueError(f"queries has {len(Q)} rows but targets has {len(T)}; they must be row-aligned pairs")
    if len(Q) == 0:
        raise ValueError("train_projector needs at least one (query, target) pair")
    train_idx, held_idx = _split(len(Q), groups, options.held_out, options.seed)
    sizes = [Q.shape[1], *[int(h) for h in options.hidden], T.shape[1]]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.seed)
        layers: list[torch.nn.Module] = []
        for i in range(len(sizes) - 1):
            layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(torch.nn.ReLU())
        net = torch.nn.Sequential(*layers).float()
        optimiser = torch.optim.AdamW(net.parameters(), lr=options.lr, weight_decay=options.weight_decay)
        q_train, t_train = torch.from_numpy(Q[train_idx]), torch.from_numpy(T[train_idx])
        shuffle = torch.Generator().manual_seed(options.seed)

        def snapshot() -> QueryProjector:
            linear = [m for m in net if isinstance(m, torch.nn.Linear)]
            weights = [(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy()) for m in linear]
            return QueryProjector(weights, options)

        history = []
        for epoch in range(options.epochs + 1):
            if epoch > 0:
                net.train()
                for batch in torch.randperm(len(train_idx), generator=shuffle).split(options.batch_size):
                    optimiser.zero_grad()
                    loss = ((net(q_train[batch]) - t_train[batch]) ** 2).sum(dim=1).mean()
                    loss.backward()
                    optimiser.step()
            current = snapshot()
            row = {
                "epoch": epoch,
                "train_mse": current.mse(Q[train_idx], T[train_idx]),
                "held_out_mse": current.mse(Q[held_idx], T[held_idx]) if len(held_idx) else float("nan"),
            }
            history.append(row)
            logger.info(
                "projector epoch %d: train MSE %.5f, held-out MSE %.5f", epoch, row["train_mse"], row["held_out_mse"]
            )
    projector = current
    projector.history_ = history
    projector.train_mse_ = history[-1]["train_mse"]
    projector.held_out_mse_ = history[-1]["held_out_mse"]
    return projector
