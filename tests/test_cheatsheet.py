"""The Bayesian Cheatsheet memory and ``metamod fit-cheatsheet``: fitted corpus -> memory rows -> save/load.

A small mined corpus (two domains, hashing embeddings) is written once per module and fitted through the CLI; the
memory LLM is scripted. Numerics of the organisers are tested in test_hdp.py / test_kmeans.py / test_organisers.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from metamod.cli import main as cli_main
from metamod.llm.base import Generation
from metamod.memory import build_memory
from metamod.memory.base import GuidanceRequest, Observation
from metamod.memory.cheatsheet import Cheatsheet, CheatsheetOptions
from metamod.memory.cheatsheet.corpus import load_fitted
from metamod.memory.embed import HashingEmbedder
from metamod.tasks.base import Example
from tests._memory_data import NoGoldExample

EMBEDDER = {"name": "hashing", "n_features": 64}
TOPICS = {
    "arith": [
        ("convert-units", "Convert every quantity to the same unit before adding them."),
        ("multiply-groups", "Multiply the number of groups by the size of each group."),
        ("subtract-spent", "Subtract what was spent from what was there at the start."),
        ("divide-evenly", "Divide the total evenly by the number of people sharing it."),
    ],
    "game24": [
        ("pair-to-24", "Look for two numbers whose product is 24 and build them from the rest."),
        ("use-division", "Try dividing one number by another to reach a factor of 24."),
        ("try-all-orders", "Try every order of the four numbers with each operation."),
        ("make-twelve", "Make 12 from three numbers and double it with the fourth."),
    ],
}


def _mined(folder, copies: int = 6):
    """A mined corpus: each topic behaviour in ``copies`` paraphrase variants, with questions."""
    emb = HashingEmbedder(n_features=EMBEDDER["n_features"])
    rows = []
    for domain, topics in TOPICS.items():
        for t, (name, text) in enumerate(topics):
            for c in range(copies):
                rows.append(
                    {
                        "id": f"b{len(rows)}",
                        "name": f"{name}-{c}",
                        "description": f"{text} Variant {'xyzw'[c % 4]}.",
                        "domain": domain,
                        "question_id": f"{domain}-{t}-{c}",
                        "question": f"{domain} question about {name.replace('-', ' ')} number {c}",
                        "correct": None,
                    }
                )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "behaviours.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    np.savez(
        folder / "embeddings.npz",
        behaviours=emb.embed([r["description"] for r in rows]),
        queries=emb.embed([r["question"] for r in rows]),
    )
    (folder / "embeddings.json").write_text(json.dumps({"embedder": emb.spec(), "rows": len(rows)}))
    return rows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bc")
    rows = _mined(tmp / "mine")
    code = cli_main(
        [
            "fit-cheatsheet",
            "--behaviours",
            str(tmp / "mine" / "behaviours.jsonl"),
            "--output_dir",
            str(tmp / "bc"),
            "--dim",
            "8",
            "--projector_options",
            '{"epochs": 30, "batch_size": 16, "lr": 0.003, "hidden": [32, 16]}',
            "--hdp_params",
            '{"sweeps": 20, "burn_in": 10}',
        ]
    )
    assert code == 0
    return tmp / "bc", rows


class ScriptedMiner:
    """The memory LLM: reflections, then one new behaviour per question (its text names the question's words)."""

    def __init__(self):
        self.calls = []

    def chat(self, conversations, sampling):
        self.calls.append([c[-1]["content"] for c in conversations])
        return [
            Generation(
                text="- recheck-steps: Recheck each step of the work once before answering.",
                prompt_tokens=10,
                completion_tokens=5,
            )
            for _ in conversations
        ]


def ex(i: int, text: str) -> Example:
    return Example(id=f"q{i}", question=text, gold="1", kind="math")


def solved(memory, example, text="The answer is <answer>1</answer>"):
    trace = {"id": example.id, "rounds": [], "single": {"texts": [text], "final_answer": "1"}}
    memory.observe(
        Observation(
            example, trace, {"correct": True, "final_answer": "1", "method": "bc"}, served=memory.served_ids(example.id)
        )
    )


def test_fit_cheatsheet_writes_a_complete_corpus(corpus):
    folder, rows = corpus
    fitted = load_fitted(folder)
    assert len(fitted.behaviours) == len(rows) and fitted.domains == ["arith", "game24"]
    assert fitted.manifest["dim"] == 8 and fitted.manifest["raw_dim"] == 64
    assert fitted.manifest["hdp"]["n_components"] >= 2
    assert fitted.manifest["projector"]["held_out_mse"] is not None
    assert set(fitted.prefixed("hdp")) and set(fitted.prefixed("pca")) and set(fitted.prefixed("projector"))


def test_fit_cheatsheet_refuses_an_existing_corpus_and_bad_input(corpus, tmp_path, capsys):
    folder, _ = corpus
    mine = folder.parent / "mine" / "behaviours.jsonl"
    assert cli_main(["fit-cheatsheet", "--behaviours", str(mine), "--output_dir", str(folder)]) == 2
    assert "already holds a fitted corpus" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "behaviours.jsonl").write_text(json.dumps({"id": "b0", "name": "x", "description": "y z"}) + "\n")
    assert (
        cli_main(["fit-cheatsheet", "--behaviours", str(bad / "behaviours.jsonl"), "--output_dir", str(tmp_path / "o")])
        == 2
    )
    assert "behaviours.jsonl:1: behaviour row is missing ['domain']" in capsys.readouterr().err


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"retrieval": "centroids"},
        {"organiser": "flat", "space": "raw"},
        {"organiser": "flat", "space": "projected"},
        {"organiser": "random", "space": "raw"},
        {"organiser": "kmeans_hard"},
        {"organiser": "kmeans_soft"},
        {"query_map": "pca"},
    ],
)
def test_static_rows_serve_medoid_behaviours_without_reading_gold(corpus, options):
    folder, rows = corpus
    memory = build_memory("cheatsheet", corpus=str(folder), top_k=3, **options)
    probe = NoGoldExample(id="p", question="arith question about convert units number 9", gold="1", kind="math")
    g = memory.guidance(GuidanceRequest(probe, "single"))
    lines = g.text.splitlines()
    assert 1 <= len(lines) <= 3 and len(g.item_ids) == len(lines)
    by_id = {r["id"]: r for r in rows}
    for line, item in zip(lines, g.item_ids, strict=True):
        assert line == f"- {by_id[item]['name']}: {by_id[item]['description']}"
    assert memory.guidance(GuidanceRequest(probe, "moderator")).text == ""  # deciders get no behaviours
    if options.get("organiser") != "random" and options.get("query_map") != "pca":  # the question's topic first
        assert "convert-units" in lines[0] or options.get("organiser") == "kmeans_soft"


def test_kmeans_rows_take_the_corpus_hdp_k(corpus):
    folder, _ = corpus
    k = load_fitted(folder).manifest["hdp"]["n_components"]
    memory = build_memory("cheatsheet", corpus=str(folder), organiser="kmeans_hard")
    assert memory.organiser.n_components_ <= k and memory.organiser.get_params()["n_clusters"] == k


def test_online_rows_mine_insert_and_refit_with_churn(corpus, tmp_path):
    folder, rows = corpus
    llm = ScriptedMiner()
    memory = Cheatsheet(CheatsheetOptions(corpus=str(folder), online=True, refit=True, refit_interval=3), llm=llm)
    batch = [ex(i, f"arith question about multiply groups number {i}") for i in range(4)]
    memory.begin_batch(batch)
    before = {e.id: memory.guidance(GuidanceRequest(e, "single")).text for e in batch}
    for e in batch:
        solved(memory, e)
    assert memory.guidance(GuidanceRequest(batch[0], "single")).text == before["q0"]  # batch-synchronous
    memory.end_batch()
    assert len(llm.calls) == 2 and len(llm.calls[0]) == 4  # one reflect + one extract call for the batch
    assert all("correct" not in p.lower() for p in llm.calls[0])  # test-time: no label reaches the miner
    stats = memory.stats()
    assert stats["behaviours_by_source"] == {"corpus": len(rows), "online": 4}
    assert stats["samples_seen"] == 4 and len(stats["refits"]) == 1 and stats["refits"][0]["sample"] == 3
    refit = memory.refits[0]
    assert 0.0 <= refit["churn"] <= 1.0 and sum(c for _b, _a, c in refit["matrix"]) == refit["rows"]
    assert refit["rows"] == len(rows) + 3
    # save/load: identical guidance for a fresh question, identical state
    probe = ex(9, "game24 question about make twelve number 2")
    saved = memory.save(tmp_path / "m")
    again = Cheatsheet(CheatsheetOptions(corpus=str(folder), online=True, refit=True, refit_interval=3), llm=llm)
    again.load(saved)
    assert again.guidance(GuidanceRequest(probe, "single")) == memory.guidance(GuidanceRequest(probe, "single"))
    assert again.stats() == memory.stats()


def test_cold_start_fills_from_online_mining_only():
    memory = Cheatsheet(
        CheatsheetOptions(cold_start=True, online=True, refit=True, refit_interval=2, embedder="hashing"),
        llm=ScriptedMiner(),
    )
    first = ex(0, "How many pens are in 3 boxes of 12?")
    assert memory.guidance(GuidanceRequest(first, "single")).text == ""
    solved(memory, first)
    solved(memory, ex(1, "How many cars are in 4 rows of 5?"))
    memory.end_batch()
    assert "recheck-steps" in memory.guidance(GuidanceRequest(ex(2, "How many eggs in 2 boxes of 6?"), "single")).text
    assert memory.stats()["behaviours"] == 2 and memory.stats()["components"] >= 1


def test_option_errors_are_one_line():
    with pytest.raises(ValueError, match="needs memory_options corpus"):
        build_memory("cheatsheet")
    with pytest.raises(ValueError, match="refit needs online: true"):
        CheatsheetOptions(refit=True)
    with pytest.raises(ValueError, match="online: true mines behaviours with the memory LLM"):
        Cheatsheet(CheatsheetOptions(cold_start=True, online=True, embedder="hashing"))
    with pytest.raises(FileNotFoundError, match="has no corpus.json"):
        build_memory("cheatsheet", corpus="/nonexistent/bc")


def test_eval_rows_run_with_their_own_cheatsheets(corpus, tiny_model_dir, tmp_path):
    """Simulated solver (cannot read guidance: mechanics only), the tiny random model as memory LLM."""
    from metamod.evaluate.config import EvalConfig
    from metamod.evaluate.harness import evaluate
    from metamod.memory import MemoryConfig

    folder, _ = corpus
    methods = ["single_cot", "bc_static", "metacognitive_reuse", "kmeans_hard_refit", "bc_refit"]
    config = EvalConfig(
        methods=methods,
        limit=20,
        seeds=[0],
        plots=False,
        reference_method="single_cot",
        output_dir=str(tmp_path / "run"),
    )
    memory = MemoryConfig(
        memory_options={"corpus": str(folder), "top_k": 2, "refit_interval": 5},
        memory_backend="hf",
        memory_model=str(tiny_model_dir),
        memory_backend_options={"device": "cpu"},
        memory_max_tokens=8,
        memory_batch_size=10,
    )
    doc = evaluate(config, memory)
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 20
    for row in rows:
        assert not row["methods"]["single_cot"].get("memory_items")
        assert len(row["methods"]["bc_static"]["memory_items"]) == 2
    res = doc["results"]["arith"]
    assert res["bc_static"]["accuracy"] == res["single_cot"]["accuracy"]  # simulated solver: guidance is inert
    refit = doc["memories"]["memory-seed0-bc_refit/arith"]["stats"]
    assert refit["samples_seen"] == 20 and len(refit["refits"]) == 4 and refit["organiser"] == "hdp"
    assert doc["memories"]["memory-seed0-kmeans_hard_refit/arith"]["stats"]["organiser"] == "kmeans_hard"
    assert res["bc_refit"]["memory_completion_tokens_per_question"] > 0  # online mining is charged
    assert (
        "memory_completion_tokens_per_question" not in res["bc_static"]
        or res["bc_static"]["memory_completion_tokens_per_question"] == 0
    )


class VersionedEmbedder:
    """An embedder whose spec carries a key its constructor does not take (like the lm embedder's model signature)."""

    name = "tests.test_cheatsheet:VersionedEmbedder"

    def __init__(self, dim: int = 4) -> None:
        self.dim = dim

    def embed(self, texts):
        return np.ones((len(texts), self.dim), dtype=np.float32)

    def spec(self):
        return {"name": self.name, "dim": self.dim, "model_signature": "v2"}


def test_a_corpus_is_never_queried_with_another_encoder():
    from metamod.memory.embed import shared_embedder

    same = {"name": VersionedEmbedder.name, "dim": 3, "model_signature": "v2"}
    assert shared_embedder(same).dim == 3  # unknown spec keys are checked, not passed to the constructor
    with pytest.raises(ValueError, match="embedded with {model_signature: 'v1'}.*has {model_signature: 'v2'}"):
        shared_embedder({**same, "model_signature": "v1"})


def test_online_records_can_come_from_the_reflection():
    class Reflector:
        def chat(self, conversations, sampling):
            return [
                Generation(text="First convert every amount to cents before adding the prices together.")
                for _ in conversations
            ]

    for source, expected in (("extraction", 0), ("reflection", 1), ("both", 1)):
        memory = Cheatsheet(
            CheatsheetOptions(cold_start=True, online=True, embedder="hashing", organiser="flat", records_from=source),
            llm=Reflector(),
        )
        solved(memory, ex(0, "How much do 3 pens at 20 cents cost?"))
        memory.end_batch()
        assert memory.stats()["behaviours"] == expected, source
    with pytest.raises(ValueError, match="records_from='lines' is not valid"):
        CheatsheetOptions(records_from="lines")


# ------------------------------------------------------------------ one encoder per evaluation
def _row_memories(memory_options: dict) -> dict:
    """Every row of the BC table with a memory, built from one shared memory_options as `metamod eval` does."""
    from metamod.memory import MemoryConfig
    from metamod.memory.registry import build_memory_from_config

    config = MemoryConfig(memory_options=memory_options)
    return {
        row: build_memory_from_config(
            config, name=spec.memory, defaults=dict(spec.memory_defaults), llm=ScriptedMiner()
        )
        for row, spec in _bc_rows().items()
    }


def _bc_rows() -> dict:
    """The Bayesian Cheatsheet's rows of the method table: chain of thought with a behaviour memory of their own."""
    from metamod.evaluate.methods import METHODS

    return {
        n: s
        for n, s in METHODS.items()
        if s.memory in ("cheatsheet", "dc", "ace") and s.runner.endswith(":SingleAgentMethod")
    }


def test_every_row_of_an_evaluation_embeds_with_the_corpus_encoder(corpus):
    """BC, k-means, flat, DC, ACE and the cold starts compare behaviours in one space: the corpus's encoder."""
    folder, _ = corpus
    recorded = load_fitted(folder).embedder_spec
    memories = _row_memories({"corpus": str(folder), "top_k": 2})
    assert {"bc_cold", "dc_cu", "dc_rs", "ace", "dc_cu_cold", "ace_cold", "metacognitive_reuse"} <= set(memories)
    encoders = {row: m.embedder for row, m in memories.items()}
    assert {row: e.spec() for row, e in encoders.items()} == dict.fromkeys(encoders, recorded)
    assert len({id(e) for e in encoders.values()}) == 1  # one loaded encoder shared by every row
    # naming the corpus's encoder in memory_options is the same encoder; naming another one is refused
    same = _row_memories({"corpus": str(folder), "embedder": "hashing"})
    assert all(m.embedder is encoders["bc_static"] for m in same.values())
    for name, defaults in (("cheatsheet", {}), ("cheatsheet", {"cold_start": True, "online": True}), ("dc", {}),
                           ("ace", {"cold_start": True})):  # fmt: skip
        with pytest.raises(
            ValueError, match=r"embedder: lm is not the encoder corpus .* was embedded with \(hashing\)"
        ):
            build_memory(name, llm=ScriptedMiner(), corpus=str(folder), embedder="lm", **defaults)


def test_without_a_corpus_every_memory_has_the_same_default_encoder(tmp_path):
    from metamod.memory.embed import DEFAULT_EMBEDDER

    cold = build_memory("cheatsheet", llm=ScriptedMiner(), cold_start=True, online=True)
    dc = build_memory("dc", llm=ScriptedMiner())
    ace = build_memory("ace", llm=ScriptedMiner())
    assert cold.embedder is dc.embedder is ace.embedder and cold.embedder.name == DEFAULT_EMBEDDER
    with pytest.raises(FileNotFoundError, match="corpus .*nowhere not found.*cold starts too"):
        build_memory("cheatsheet", llm=ScriptedMiner(), cold_start=True, online=True, corpus=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="embedder_model='/m' is set without embedder"):
        CheatsheetOptions(embedder_model="/m")


def test_a_missing_sentence_transformers_folder_is_named(tmp_path):
    from metamod.memory.embed import select_embedder

    folder = tmp_path / "granite-embedding-english-r2"
    with pytest.raises(FileNotFoundError, match=f"Embedding model directory not found: {folder}.*never downloads"):
        select_embedder("sentence-transformers", str(folder))


def test_a_saved_cheatsheet_is_not_reloaded_under_another_encoder(corpus, tmp_path):
    folder, _ = corpus
    memory = build_memory("cheatsheet", corpus=str(folder))
    saved = memory.save(tmp_path / "m")
    other = build_memory("cheatsheet", corpus=str(folder))
    other.load(saved)  # the same encoder: fine
    state = {**memory.state_dict(), "embedder": {"name": "hashing", "n_features": 128}}
    with pytest.raises(ValueError, match="saved cheatsheet was embedded with .*n_features': 128"):
        other.load_state_dict(state)


# ------------------------------------------------------------------ the paper configs
def _config(*parts: str):
    from pathlib import Path

    return Path(__file__).resolve().parents[1].joinpath("configs", *parts)


def test_paper_eval_config_runs_every_row_in_one_granite_space_in_table_order():
    from metamod.config import parse_config
    from metamod.evaluate.config import EvalConfig
    from metamod.evaluate.memories import own_memory
    from metamod.memory import MemoryConfig
    from metamod.memory.registry import parse_memory_options

    config, memory = parse_config(
        [EvalConfig, MemoryConfig], ["--config", str(_config("eval", "cheatsheet_paper.yaml"))]
    )
    table1 = ["kmeans_hard_static", "kmeans_hard_online", "kmeans_hard_refit", "kmeans_soft_static",
              "kmeans_soft_online", "kmeans_soft_refit", "dc_cu_static", "dc_cu", "dc_rs", "ace",
              "bc_static", "bc_centroids", "bc_online", "bc_refit"]  # fmt: skip
    assert [m for m in config.methods if m in table1] == table1
    rows = _bc_rows()
    assert len(rows) == 21 and set(config.methods) == {"single_cot", *rows}  # every row of the BC table, nothing else
    assert all("embedder" not in s.memory_defaults and "embedder_model" not in s.memory_defaults for s in rows.values())
    for method in config.methods[1:]:
        name, defaults = own_memory(method)
        options = parse_memory_options(name, memory.options_for(name, defaults))
        assert (options.embedder, options.embedder_model) == (
            "sentence-transformers",
            "/models/granite-embedding-english-r2",
        ), method
    assert memory.memory_options["top_k"] == 5 and memory.memory_batch_size == 1


def test_paper_fit_config_is_table_3():
    import numpy as np

    from metamod.config import parse_config
    from metamod.memory.cheatsheet.fit import FitCheatsheetConfig
    from metamod.memory.hdp import HDPGMM
    from metamod.memory.hdp.support import preset_prior

    (config,) = parse_config([FitCheatsheetConfig], ["--config", str(_config("memory", "fit_cheatsheet_paper.yaml"))])
    assert config.dim == 128 and config.projector
    assert config.projector_options == {
        "hidden": [512, 256], "epochs": 10, "batch_size": 256, "lr": 1e-4, "weight_decay": 1e-4,
    }  # fmt: skip
    params = HDPGMM(**config.hdp_params).get_params()
    table3 = {"prior": "paper", "psi_scale": 1.2, "kappa0": 0.01, "gamma": 5.0, "alpha": 1.0, "sweeps": 100,
              "burn_in": 50, "tau_new": 0.5, "birth": "threshold", "merge": True, "merge_eps": 0.1}  # fmt: skip
    assert {k: params[k] for k in table3} == table3
    X = np.random.default_rng(0).normal(size=(400, config.dim)) * np.linspace(0.5, 2.0, config.dim)
    Xc = X - X.mean(0)
    kappa0, nu0, psi0 = preset_prior(
        Xc, prior=params["prior"], kappa0=params["kappa0"], nu0=params["nu0"], psi_scale=params["psi_scale"],
        rng=np.random.default_rng(0),
    )  # fmt: skip
    assert kappa0 == 0.01 and nu0 == config.dim + 2 == 130
    np.testing.assert_allclose(psi0, 1.2 * np.cov(X, rowvar=False), atol=1e-8)  # 1.2 x the empirical covariance
