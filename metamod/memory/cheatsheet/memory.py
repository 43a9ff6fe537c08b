"""The Bayesian Cheatsheet (``memory: cheatsheet``): mined behaviours organised by an HDP-GMM, retrieved per question.

One memory class serves the method and its structured baselines; what differs is the *organiser* (the retrieval
structure over behaviour embeddings, :mod:`metamod.memory.cheatsheet.organisers`) and the space it lives in:

==================  ==========================================  =======================================
organiser           structure                                   paper row
==================  ==========================================  =======================================
``hdp``             HDP-GMM, posterior-predictive retrieval     BC-PP / BC-TTT (``retrieval: centroids``:
                                                                BC-centroids)
``dp``              the flat, domain-pooled DP-GMM              table 8's DP-GMM row
``kmeans_hard``     hard k-means (K = the corpus HDP's K)       hard k-means
``kmeans_soft``     soft (isotropic) k-means                    soft k-means
``flat``            every behaviour its own component, cosine   ``space: raw``: Metacognitive Reuse;
                                                                ``space: projected``: direct retrieval
``random``          k' behaviours at random                     random
==================  ==========================================  =======================================

Life cycle (memory protocol v2, :mod:`metamod.memory.base`):

- At construction the fitted corpus (``corpus``: a ``metamod fit-cheatsheet`` folder) gives the behaviours, their
  raw embeddings E(description), the PCA (D dimensions), the query projector f_theta and the fitted HDP-GMM; the
  other organisers are fitted on the same rows (k-means with the HDP's K). ``cold_start: true`` ignores the corpus:
  an empty memory with the prior, in the raw embedding space, filled by online mining only (appendix D.4).
- ``begin_batch`` embeds the batch's questions in one call, maps them to the organiser's space (projected space:
  the projector, or the PCA of the question's own embedding with ``query_map: pca``; raw space: as embedded),
  predicts each question's domain (nearest domain centroid) and retrieves the top-k' components (or every
  component above ``threshold``) at once; the guidance is each component's medoid behaviour, one
  ``- name: description`` line per component, item ids = the behaviours' ids.
- ``online: true``: each observed question's own solution is reflected on and its behaviours extracted by the memory
  LLM (:func:`metamod.memory.cheatsheet.mining.reflect_and_extract`, two batched calls per memory batch, the question's
  correctness never shown: test-time adaptation has no labels), embedded, projected with the fixed PCA and inserted
  one by one (``partial_fit``, soft statistics and novelty births for the HDP); every ``refit_interval`` questions
  the organiser refits and the churn matrix M[b, a] between the component ids before and after is recorded.
  Updates reach guidance at the next batch (batch-synchronous; ``memory_batch_size: 1`` is the paper's strictly
  sequential stream).

>>> import numpy as np
>>> from metamod.memory.base import GuidanceRequest
>>> from metamod.tasks.base import Example
>>> mem = Cheatsheet.from_behaviours(
...     [("add-then-multiply", "Do the additions inside brackets before multiplying."),
...      ("check-units", "Convert all quantities to one unit before combining them.")],
...     options=CheatsheetOptions(organiser="flat", space="raw", top_k=1, embedder="hashing"))
>>> ex = Example(id="q", question="A rope is 3 m and 40 cm long. Convert to one unit: how many cm?", gold="340",
...              kind="math")
>>> mem.guidance(GuidanceRequest(ex, "single")).text
'- check-units: Convert all quantities to one unit before combining them.'
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from metamod.memory.base import ROLES, BaseMemory, Guidance, GuidanceRequest, MemoryOptions, Observation
from metamod.memory.embed import check_embedder, select_embedder

logger = logging.getLogger(__name__)

SPACES = ("projected", "raw")
QUERY_MAPS = ("projector", "pca")
RETRIEVALS = ("predictive", "centroids")
#: roles that solve (and so get behaviours); deciders (moderator, judge, monitor, controller) get none by default
SOLVER_ROLES = ("single", "debater", "reasoner")
#: organisers without components to reorganise (a refit is a no-op there)
FLAT = ("flat", "random")


@dataclass
class CheatsheetOptions(MemoryOptions):
    """Options of ``memory: cheatsheet`` (and of the baselines built on it). See the module docstring."""

    corpus: str | None = field(
        default=None, metadata={"help": "Fitted corpus folder (`metamod fit-cheatsheet --output_dir`)."}
    )
    cold_start: bool = field(
        default=False,
        metadata={"help": "Ignore the corpus: start empty (prior only) in the raw embedding space; needs online."},
    )
    organiser: str = field(
        default="hdp", metadata={"help": "Retrieval structure: hdp, dp, kmeans_hard, kmeans_soft, flat, random."}
    )
    organiser_params: dict = field(
        default_factory=dict,
        metadata={"help": "Constructor options of the organiser, e.g. {tau_new: 0.5, birth: sample, merge: false}."},
    )
    space: str = field(
        default="projected", metadata={"help": "projected (PCA of behaviours, projected queries) or raw (embedder)."}
    )
    query_map: str = field(
        default="projector",
        metadata={"help": "How a question reaches the projected space: projector (f_theta) or pca (its own PCA)."},
    )
    retrieval: str = field(
        default="predictive", metadata={"help": "HDP/DP component selection: predictive (BC-PP) or centroids."}
    )
    top_k: int = field(default=5, metadata={"help": "Components retrieved per question (k'), one medoid each."})
    threshold: float | None = field(
        default=None, metadata={"help": "Keep every component with weight >= threshold instead of top_k."}
    )
    online: bool = field(
        default=False, metadata={"help": "Mine behaviours from each solved question and insert them (TTT)."}
    )
    refit: bool = field(default=False, metadata={"help": "Refit periodically (online rows only)."})
    refit_interval: int = field(
        default=10, metadata={"help": "g: questions between refits when refit is on (the paper: 10 or 50)."}
    )
    max_behaviours: int = field(default=3, metadata={"help": "Behaviours mined per solved question (online)."})
    records_from: str = field(
        default="extraction",
        metadata={
            "help": "Online records from the extract stage (extraction, the paper), the reflection's own sentences "
            "(reflection) or both: as mine-behaviours' records_from."
        },
    )
    n_clusters: int | None = field(
        default=None, metadata={"help": "K of the k-means organisers (None: the corpus HDP-GMM's fitted K)."}
    )
    roles: list = field(default_factory=lambda: list(SOLVER_ROLES), metadata={"help": "Roles that receive behaviours."})
    embedder: str | None = field(
        default=None,
        metadata={
            "help": "Encoder of behaviours and questions, shared by every row (memory_options). None: the encoder the "
            "corpus was embedded with (cold starts too), or hashing without a corpus. Set, it must be the corpus's."
        },
    )
    embedder_model: str | None = field(
        default=None, metadata={"help": "Local model folder of the embedder (sentence-transformers; lm: or an alias)."}
    )

    def __post_init__(self) -> None:
        for key, value, valid in (
            ("space", self.space, SPACES),
            ("query_map", self.query_map, QUERY_MAPS),
            ("retrieval", self.retrieval, RETRIEVALS),
        ):
            if value not in valid:
                raise ValueError(f"{key}={value!r} is not valid; expected one of {valid}")
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.threshold is not None and not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.refit_interval < 1:
            raise ValueError(f"refit_interval must be >= 1, got {self.refit_interval}")
        if self.refit and not self.online:
            raise ValueError("refit needs online: true (refits reorganise what online updates inserted)")
        if self.cold_start and not self.online:
            raise ValueError("cold_start needs online: true (an empty memory only fills by online mining)")
        from metamod.memory.cheatsheet.mining import RECORD_SOURCES

        if self.records_from not in RECORD_SOURCES:
            raise ValueError(f"records_from={self.records_from!r} is not valid; expected one of {RECORD_SOURCES}")
        if self.max_behaviours < 1:
            raise ValueError(f"max_behaviours must be >= 1, got {self.max_behaviours}")
        if not isinstance(self.organiser_params, dict):
            raise ValueError(f"organiser_params must be a dict, got {type(self.organiser_params).__name__}")
        bad = [r for r in self.roles if r not in ROLES]
        if bad:
            raise ValueError(f"roles {bad} are not memory roles")
        if self.embedder is not None:
            check_embedder(self.embedder, self.embedder_model)
        elif self.embedder_model:
            raise ValueError(f"embedder_model={self.embedder_model!r} is set without embedder; name the embedder too")


class Cheatsheet(BaseMemory):
    """Behaviours + an organiser over their embeddings (see the module docstring)."""

    name = "cheatsheet"
    options_class: ClassVar[type] = CheatsheetOptions
    uses_llm: ClassVar[bool] = True

    @classmethod
    def wants_llm(cls, options: CheatsheetOptions) -> bool:
        return bool(options.online)

    def __init__(
        self, options: CheatsheetOptions | None = None, *, llm: Any = None, llm_sampling: Any = None, seed: int = 0
    ) -> None:
        self._init_state(options or CheatsheetOptions(), llm, llm_sampling, seed)
        if self.options.online and (llm is None or not hasattr(llm, "chat")):
            raise ValueError(
                "memory 'cheatsheet' with online: true mines behaviours with the memory LLM (memory_model); "
                "none was given"
            )
        o = self.options
        if o.cold_start or o.corpus is None:
            if not o.cold_start:
                raise ValueError(
                    "memory 'cheatsheet' needs memory_options corpus: <folder written by `metamod fit-cheatsheet`> "
                    "(or cold_start: true with online: true)"
                )
            from metamod.memory.cheatsheet.corpus import corpus_embedder

            self.embedder = corpus_embedder(o)  # a cold start still embeds with the corpus's encoder (appendix D.4)
            self.space = "raw"
        else:
            self._load_corpus(o.corpus)

    # ------------------------------------------------------------------ construction
    def _init_state(self, options: CheatsheetOptions, llm: Any, llm_sampling: Any, seed: int) -> None:
        """The empty state every construction path starts from (the corpus or given behaviours fill it)."""
        from metamod.llm.base import SamplingConfig

        BaseMemory.__init__(self)
        self.options, self.llm, self.seed = options, llm, int(seed)
        self.llm_sampling = llm_sampling or SamplingConfig(temperature=0.0, max_tokens=256, seed=self.seed)
        self.behaviours: list[dict[str, Any]] = []
        self.domains: list[str] = ["all"]
        self.pca = self.projector = None
        self.organiser: Any = None
        self.samples_seen = 0
        self.births: dict[str, int] = {"novelty": 0, "sample": 0, "refit": 0}
        self.refits: list[dict[str, Any]] = []
        self.mined = {"questions": 0, "behaviours": 0, "empty": 0}
        self._retrieved: dict[str, list[tuple[int, float, int]]] = {}
        self._domain_centroids = np.zeros((0, 0))

    @classmethod
    def from_behaviours(
        cls,
        behaviours: Sequence[tuple[str, str]],
        *,
        options: CheatsheetOptions | None = None,
        domains: Sequence[str] | None = None,
    ) -> Cheatsheet:
        """A static cheatsheet over ``(name, description)`` pairs without a fitted corpus (raw space; docs, tests)."""
        options = options or CheatsheetOptions(organiser="flat", space="raw")
        if options.space != "raw":
            raise ValueError("from_behaviours builds a raw-space cheatsheet (no PCA or projector): set space: raw")
        self = cls.__new__(cls)
        self._init_state(options, None, None, 0)
        self.embedder = select_embedder(options.embedder, options.embedder_model)
        self.space = "raw"
        domains = list(domains) if domains is not None else ["all"] * len(behaviours)
        self.domains = sorted(set(domains))
        self.behaviours = [
            {"id": f"b{i}", "name": n, "description": d, "domain": dom, "source": "given"}
            for i, ((n, d), dom) in enumerate(zip(behaviours, domains, strict=True))
        ]
        rows = self.embedder.embed([b["description"] for b in self.behaviours])
        domain_ids = np.array([self.domains.index(b["domain"]) for b in self.behaviours], dtype=np.int64)
        self._fit_organiser(rows, domain_ids, k_default=min(len(rows), 8))
        return self

    def _load_corpus(self, folder: str) -> None:
        from metamod.memory.cheatsheet.corpus import load_fitted
        from metamod.memory.cheatsheet.projector import PCAProjection, QueryProjector

        o = self.options
        corpus = load_fitted(folder)
        self.corpus_manifest = corpus.manifest
        self.embedder = select_embedder(o.embedder, o.embedder_model, corpus.embedder_spec, source=f"corpus {folder}")
        self.domains = corpus.domains
        self.behaviours = [dict(b, source="corpus") for b in corpus.behaviours]
        self.pca = PCAProjection.from_state_arrays(corpus.prefixed("pca"))
        projector = corpus.prefixed("projector")
        self.projector = QueryProjector.from_state_arrays(projector) if projector else None
        if o.space == "projected" and o.query_map == "projector" and self.projector is None:
            raise ValueError(f"corpus {folder} has no query projector; set query_map: pca or space: raw")
        self.space = o.space
        raw = corpus.arrays["raw"].astype(np.float64)
        rows = self.pca.transform(raw) if self.space == "projected" else raw
        domain_ids = corpus.domain_index()
        fitted = corpus.prefixed("hdp")
        k_default = int(corpus.manifest.get("hdp", {}).get("n_components", 0)) or None
        if o.organiser == "hdp" and self.space == "projected" and fitted and not o.organiser_params:
            from metamod.memory.cheatsheet.organisers import load_organiser

            self.organiser = load_organiser("hdp", fitted, dict(corpus.manifest["hdp"]["params"]))
            self._set_domain_centroids(rows, domain_ids)
        else:
            self._fit_organiser(rows, domain_ids, k_default=k_default)

    def _organiser_params(self, k_default: int | None) -> dict[str, Any]:
        params = dict(self.options.organiser_params)
        name = self.options.organiser
        if name.startswith("kmeans") and "n_clusters" not in params:
            k = self.options.n_clusters or k_default
            if not k:
                raise ValueError(f"organiser {name} needs n_clusters (the corpus records no HDP-GMM K)")
            params["n_clusters"] = int(k)
        if name in ("random", "hdp", "dp") or name.startswith("kmeans"):
            params.setdefault("seed", self.seed)
        if self.options.cold_start and name in ("hdp", "dp"):  # appendix D.4: no corpus to take a covariance from,
            params.setdefault("prior", "paper")  # so Psi0 = I and nu0 = D + 2 (the preset's fallback for < 3 rows)
            params.setdefault("psi_scale", 1.0)
        return params

    def _fit_organiser(self, rows: np.ndarray, domain_ids: np.ndarray, *, k_default: int | None) -> None:
        from metamod.memory.cheatsheet.organisers import build_organiser

        params = self._organiser_params(k_default)
        if params.get("n_clusters") and len(rows) and params["n_clusters"] > len(rows):
            params["n_clusters"] = len(rows)
        self.organiser = build_organiser(self.options.organiser, **params)
        if len(rows):
            self.organiser.fit(np.asarray(rows, dtype=np.float64), domain_ids)
        self._set_domain_centroids(rows, domain_ids)

    def _set_domain_centroids(self, rows: np.ndarray, domain_ids: np.ndarray) -> None:
        dim = rows.shape[1] if len(rows) else 0
        self._domain_centroids = np.zeros((len(self.domains), dim))
        for d in range(len(self.domains)):
            members = rows[domain_ids == d]
            if len(members):
                self._domain_centroids[d] = members.mean(axis=0)

    # ------------------------------------------------------------------ geometry
    def _to_space(self, raw: np.ndarray, *, queries: bool) -> np.ndarray:
        raw = np.asarray(raw, dtype=np.float64)
        if self.space == "raw":
            return raw
        if queries and self.options.query_map == "projector":
            return np.asarray(self.projector.transform(raw), dtype=np.float64)
        return np.asarray(self.pca.transform(raw), dtype=np.float64)

    def _domain_of(self, points: np.ndarray) -> np.ndarray:
        if len(self._domain_centroids) <= 1 or self._domain_centroids.shape[1] == 0:
            return np.zeros(len(points), dtype=np.int64)
        d2 = ((points[:, None, :] - self._domain_centroids[None, :, :]) ** 2).sum(axis=2)
        return np.argmin(d2, axis=1).astype(np.int64)

    def _rows(self) -> int:
        labels = getattr(self.organiser, "labels_", None)
        return 0 if labels is None else len(labels)

    # ------------------------------------------------------------------ protocol hooks
    def prepare(self, examples: Sequence[Any]) -> None:
        if not examples:
            return
        if self._rows() == 0:
            for ex in examples:
                self._retrieved[ex.id] = []
            return
        queries = self._to_space(self.embedder.embed([ex.prompt_text() for ex in examples]), queries=True)
        domains = self._domain_of(queries)
        kwargs: dict[str, Any] = {"top_k": self.options.top_k, "threshold": self.options.threshold, "domain": domains}
        if self.options.organiser in ("hdp", "dp"):
            kwargs["method"] = self.options.retrieval
        found = self.organiser.retrieve(queries, **kwargs)
        for ex, hits in zip(examples, found, strict=True):
            self._retrieved[ex.id] = [(int(k), float(w), int(row)) for k, w, row in hits]

    def compute_guidance(self, request: GuidanceRequest) -> Guidance:
        if request.role not in self.options.roles:
            return Guidance()
        hits = self._retrieved.get(request.example.id, [])
        lines, ids = [], []
        for _k, _w, row in hits:
            b = self.behaviours[row]
            if b["id"] in ids:
                continue
            lines.append(f"- {b['name']}: {b['description']}")
            ids.append(b["id"])
        return Guidance("\n".join(lines), tuple(ids))

    def record(self, observation: Observation) -> dict[str, Any]:
        """Question and the solver's own final text (never the outcome: test-time adaptation has no labels)."""
        return {
            "id": observation.example.id,
            "question": observation.example.prompt_text(),
            "solution": solution_text(observation.trace),
            "served": list(observation.served),
        }

    def consolidate(self, records: list[dict[str, Any]]) -> None:
        self._retrieved = {}
        if not self.options.online or not records:
            return
        from metamod.memory.cheatsheet.mining import placeholderise, records_of, reflect_and_extract_outputs

        items = [(r["question"], r["solution"]) for r in records]
        limit = self.options.max_behaviours
        outputs = reflect_and_extract_outputs(self.llm, self.llm_sampling, items, max_behaviours=limit)
        mined = [records_of(o, self.options.records_from, limit) for o in outputs]
        if len(mined) != len(records):
            raise RuntimeError(f"reflect_and_extract returned {len(mined)} lists for {len(records)} questions")
        texts = [placeholderise(desc) for found in mined for _n, desc in found]
        rows = self._to_space(self.embedder.embed(texts), queries=False) if texts else np.zeros((0, 0))
        qrows = self._to_space(self.embedder.embed([r["question"] for r in records]), queries=True)
        domains = self._domain_of(qrows)
        cursor = 0
        for i, (record, found) in enumerate(zip(records, mined, strict=True)):
            self.mined["questions"] += 1
            self.mined["empty"] += int(not found)
            for name, _desc in found:
                self._insert(rows[cursor], int(domains[i]), name, texts[cursor], record["id"])
                cursor += 1
            self.samples_seen += 1
            g = self.options.refit_interval
            if (
                self.options.refit
                and self.samples_seen % g == 0
                and self._rows() > 1
                and self.options.organiser not in FLAT
            ):
                self._refit()

    def _insert(self, row: np.ndarray, domain: int, name: str, description: str, question_id: str) -> None:
        uid = f"o{self.batch_index}-{len(self.behaviours)}"
        self.behaviours.append(
            {
                "id": uid,
                "name": name,
                "description": description,
                "domain": self.domains[domain],
                "source": "online",
                "question_id": question_id,
                "batch": self.batch_index,
            }
        )
        self.mined["behaviours"] += 1
        if self._rows() == 0:  # the first behaviours of a cold start: the organiser starts from them
            self._fit_organiser(row[None, :], np.array([domain]), k_default=1)
            self.births["novelty"] += int(self.options.organiser in ("hdp", "dp"))
            return
        event = self.organiser.partial_fit(np.asarray(row, dtype=np.float64), domain)
        if event.get("born") and event.get("cause") in self.births:
            self.births[event["cause"]] += 1

    def _refit(self) -> None:
        from metamod.memory.cheatsheet.organisers import churn

        before = np.asarray(self.organiser.component_ids_)[np.asarray(self.organiser.labels_)].copy()
        k_before = int(self.organiser.n_components_)
        info = self.organiser.refit()
        after = np.asarray(self.organiser.component_ids_)[np.asarray(self.organiser.labels_)][: len(before)]
        moved = churn(before, after)
        self.births["refit"] += int(info.get("births", 0))
        self.refits.append(
            {
                "sample": self.samples_seen,
                "batch": self.batch_index,
                "rows": int(len(before)),
                "k_before": k_before,
                "k_after": int(self.organiser.n_components_),
                "births": int(info.get("births", 0)),
                "merges": int(info.get("merges", 0)),
                "removed": int(info.get("removed", 0)),
                "churn": moved["fraction"],
                "matrix": moved["entries"],
            }
        )
        logger.info(
            "cheatsheet refit at sample %d: K %d -> %d, churn %.3f",
            self.samples_seen,
            k_before,
            self.organiser.n_components_,
            moved["fraction"],
        )

    # ------------------------------------------------------------------ reporting + persistence
    def stats(self) -> dict[str, Any]:
        """Counters for ``summary.json``: K, births by cause, refits with churn, mining counts."""
        return {
            "organiser": self.options.organiser,
            "behaviours": len(self.behaviours),
            "behaviours_by_source": {
                s: sum(b["source"] == s for b in self.behaviours)
                for s in sorted({b["source"] for b in self.behaviours})
            },
            "components": int(getattr(self.organiser, "n_components_", 0) or 0) if self.organiser is not None else 0,
            "births": dict(self.births),
            "refits": [{k: v for k, v in r.items() if k != "matrix"} for r in self.refits],
            "mined": dict(self.mined),
            "samples_seen": self.samples_seen,
        }

    def config_dict(self) -> dict[str, Any]:
        return asdict(self.options)

    def state_dict(self) -> dict[str, Any]:
        return {
            "behaviours": self.behaviours,
            "domains": self.domains,
            "space": self.space,
            "samples_seen": self.samples_seen,
            "births": self.births,
            "refits": self.refits,
            "mined": self.mined,
            "organiser": self.options.organiser,
            "organiser_params": self.organiser.get_params() if self.organiser is not None else None,
            "embedder": self.embedder.spec(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("organiser") not in (None, self.options.organiser):
            raise ValueError(f"saved cheatsheet uses organiser {state['organiser']!r}, not {self.options.organiser!r}")
        self.behaviours = [dict(b) for b in state.get("behaviours", [])]
        self.domains = list(state.get("domains", self.domains))
        self.space = state.get("space", self.space)
        self.samples_seen = int(state.get("samples_seen", 0))
        self.births = {**{"novelty": 0, "sample": 0, "refit": 0}, **dict(state.get("births", {}))}
        self.refits = [dict(r) for r in state.get("refits", [])]
        self.mined = {**self.mined, **dict(state.get("mined", {}))}
        self._saved_params = state.get("organiser_params")
        spec = json.loads(json.dumps(dict(state.get("embedder") or {}), default=str))
        if spec and spec != json.loads(json.dumps(self.embedder.spec(), default=str)):
            raise ValueError(
                f"the saved cheatsheet was embedded with {spec} but this run's encoder is {self.embedder.spec()} "
                "(memory_options embedder, else the corpus's): load it with the settings it was saved with"
            )
        self._retrieved = {}

    def array_state(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {"domain_centroids": np.asarray(self._domain_centroids)}
        if self.organiser is not None and self._rows():
            out.update({f"org.{k}": v for k, v in self.organiser.state_arrays().items()})
        for prefix, part in (("pca", self.pca), ("projector", self.projector)):
            if part is not None:
                out.update({f"{prefix}.{k}": v for k, v in part.state_arrays().items()})
        return out

    def load_array_state(self, arrays: Mapping[str, np.ndarray]) -> None:
        from metamod.memory.cheatsheet.organisers import load_organiser
        from metamod.memory.cheatsheet.projector import PCAProjection, QueryProjector

        def part(prefix: str) -> dict[str, np.ndarray]:
            return {k[len(prefix) + 1 :]: v for k, v in arrays.items() if k.startswith(prefix + ".")}

        if "domain_centroids" in arrays:
            self._domain_centroids = np.asarray(arrays["domain_centroids"], dtype=np.float64)
        org = part("org")
        if org:
            params = getattr(self, "_saved_params", None) or self._organiser_params(None)
            self.organiser = load_organiser(self.options.organiser, org, dict(params))
        elif self.options.cold_start:
            self.organiser = None
        self.pca = PCAProjection.from_state_arrays(part("pca")) if part("pca") else self.pca
        self.projector = QueryProjector.from_state_arrays(part("projector")) if part("projector") else self.projector


def solution_text(trace: Mapping[str, Any]) -> str:
    """The solver's own final text in a trace: a single agent's last response, else the first debater's last one.

    >>> solution_text({"rounds": [], "single": {"texts": ["think", "so <answer>4</answer>"]}})
    'so <answer>4</answer>'
    >>> solution_text({"rounds": [{"responses": [{"text": "A: 3"}, {"text": "B: 4"}]}]})
    'A: 3'
    """
    single = trace.get("single") or {}
    texts = single.get("texts") or []
    if texts:
        return str(texts[-1])
    rounds = trace.get("rounds") or []
    if rounds and rounds[-1].get("responses"):
        return str(rounds[-1]["responses"][0].get("text", ""))
    iterations = trace.get("iterations") or []
    if iterations:
        return str(iterations[-1].get("reasoner", {}).get("text", "")) if isinstance(iterations[-1], dict) else ""
    return ""
