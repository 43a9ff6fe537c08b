"""``metamod view``: the page's data from a hand-built eval folder, its escaping, bad folders, and a real browser.

Two browser tests run headless Debian Chromium (``/usr/bin/chromium``; ``.ci/run`` installs it and
``chromium-driver``): one drives it through Selenium and Debian's chromedriver (choose filters, click a row), the
other opens links whose URL fragment holds the filters and reads the DOM back after the page's script applied them
(``--dump-dom``). Each skips where Chromium, the driver or selenium is absent.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest

from metamod.cli import main as cli_main
from metamod.errors import InputError
from metamod.evaluate.view import write_view
from metamod.evaluate.view.data import load_run
from metamod.evaluate.view.page import embedded_data

INJECTION = "</script><script>document.title='PWNED'</script><b id=\"pwned\">x</b>"
ANSWERS = {  # question -> round answers (2 agents x 3 rounds); gold is "4" everywhere
    "q0": [["4", "4"], ["4", "4"], ["4", "4"]],
    "q1": [["3", "4"], ["4", "4"], ["4", "4"]],
    "q2": [["5", "3"], ["5", "5"], ["5", "5"]],
    "q3": [["4", None], ["4", "4"], ["4", "4"]],
}
STOP_ROUND = {"q0": 0, "q1": 1, "q2": 1, "q3": 2}  # the moderator's
P_STOP = {0: 0.81, 1: 0.64, 2: 0.97}


def _trace(qid: str, task: str) -> dict:
    rounds = []
    for t, answers in enumerate(ANSWERS[qid]):
        responses = [
            {
                "agent": k,
                "text": (INJECTION if (qid, t, k) == ("q2", 0, 0) else f"{qid} round {t} agent {k}")
                + (f"\n<answer>{a}</answer>" if a else ""),
                "answer": a,
                "prompt_tokens": 10 + t,
                "completion_tokens": 5 + k,
            }
            for k, a in enumerate(answers)
        ]
        rounds.append({"round": t, "eta": int(all(a == "4" for a in answers)), "responses": responses})
    return {"id": qid, "task": task, "question": f"What is 2+2? ({qid})", "gold": "4", "kind": "math", "rounds": rounds}


def _moderator_record(qid: str) -> dict:
    stop = STOP_ROUND[qid]
    final = ANSWERS[qid][stop][0]
    decisions = [
        {"round": t, "stop": t == stop, "answer": final if t == stop else None, "valid": True, "p_stop": P_STOP[t]}
        for t in range(stop + 1)
    ]
    decisions[0].pop("p_stop")  # a decision without p_stop is shown as "-"
    return {
        "final_answer": final,
        "stop_round": stop,
        "rounds": stop + 1,
        "decisions": decisions,
        "tokens": {"debater_prompt": 40, "debater_completion": 20},
        "correct": final == "4",
        "memory_items": ["L1"] if qid == "q1" else [],
    }


def _single_record(qid: str) -> dict:
    answer = "4" if qid in ("q0", "q2") else "7"
    return {"final_answer": answer, "stop_round": None, "rounds": None, "decisions": [], "texts": [f"cot {qid}"],
            "correct": answer == "4"}  # fmt: skip


@pytest.fixture()
def eval_dir(tmp_path: Path) -> Path:
    """An eval folder by hand: 4 questions of task arith (seed 0) and q0 of task logic (seed 1), two methods; the
    single-agent method arrives in a second (resumed) row per question, and one row of old settings is ignored."""
    run = tmp_path / "run"
    run.mkdir()
    rows, traces = [], {0: [], 1: []}
    for seed, task, qid in [(0, "arith", q) for q in ANSWERS] + [(1, "logic", "q0")]:
        trace = _trace(qid, task)
        traces[seed].append(trace)
        base = {"task": task, "seed": seed, "id": qid, "question": trace["question"], "gold": "4", "kind": "math",
                "choices": None, "settings": "S", "rounds": [{"round": r["round"], "eta": r["eta"],
                "answers": [x["answer"] for x in r["responses"]]} for r in trace["rounds"]]}  # fmt: skip
        rows.append({**base, "methods": {"moderator": _moderator_record(qid)}, "fingerprints": {"moderator": "M"}})
        rows.append({**base, "methods": {"single_cot": _single_record(qid)}, "fingerprints": {"single_cot": "C"}})
    rows.append({**rows[0], "id": "stale", "settings": "OLD"})
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for seed, items in traces.items():
        (run / f"traces-seed{seed}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in items))
    results = {"settings_fingerprint": "S", "simulated": True, "mode": "replay",
               "labels": {"single_cot": "Single (CoT)", "moderator": "Meta-Moderator"}}  # fmt: skip
    (run / "results.json").write_text(json.dumps(results))
    loop = {"task": "arith", "seed": 0, "method": "moderator", "id": "q3", "fingerprint": "M",
            "trace": {"loop": "mro", "history": [{"iteration": 1, "reasoner": {"text": "loop text q3"}}]}}  # fmt: skip
    (run / "method-traces.jsonl").write_text(json.dumps(loop) + "\n")
    return run


def _arith_keys(pred) -> list[str]:
    return [f"arith|0|{q}" for q in ANSWERS if pred(q)]


# --------------------------------------------------------------------------------------------- the data


def test_document_merges_rows_and_keeps_the_current_settings(eval_dir: Path):
    doc = load_run(eval_dir)
    assert doc["kind"] == "eval" and doc["simulated"] and doc["mode"] == "replay"
    assert doc["methods"] == ["single_cot", "moderator"]
    assert [q["key"] for q in doc["questions"]] == [f"arith|0|{q}" for q in ANSWERS] + ["logic|1|q0"]
    q1 = doc["questions"][1]
    assert set(q1["methods"]) == {"moderator", "single_cot"}  # the resumed row's method merged in
    assert q1["methods"]["moderator"]["stop_round"] == 1 and q1["methods"]["moderator"]["memory_items"] == ["L1"]
    assert [q["disagree0"] for q in doc["questions"][:4]] == [False, True, True, True]  # None answer disagrees
    assert [r["responses"][1]["answer"] for r in q1["debate"]["rounds"]] == ["4", "4", "4"]
    assert doc["questions"][3]["methods"]["moderator"]["loop"]["history"][0]["reasoner"]["text"] == "loop text q3"
    assert doc["max_rounds"] == 3


def test_rows_stand_in_for_a_missing_traces_file(eval_dir: Path):
    (eval_dir / "traces-seed1.jsonl").unlink()  # as after mode=live, which keeps no transcripts
    logic = load_run(eval_dir)["questions"][-1]
    assert logic["key"] == "logic|1|q0" and logic["disagree0"] is False
    rounds = logic["debate"]["rounds"]
    assert [[r["answer"] for r in rnd["responses"]] for rnd in rounds] == ANSWERS["q0"]
    assert all("text" not in r for rnd in rounds for r in rnd["responses"])
    assert [rnd["prompt_tokens"] for rnd in rounds] == [None, None, None]  # the hand-built rows carry no tokens


def test_page_round_trips_the_data_and_escapes_script_ends(eval_dir: Path):
    path = write_view(eval_dir)
    assert path == eval_dir / "view.html"
    page = path.read_text()
    assert embedded_data(page) == json.loads(json.dumps(load_run(eval_dir)))
    assert page.count("</script>") == 2  # the data block's and the script's own, none from the transcript
    assert "</script><script>document.title" not in page
    assert "http://" not in page and "https://" not in page and "<link" not in page  # self-contained
    assert INJECTION in json.dumps(embedded_data(page), ensure_ascii=False).replace("\\", "")


def test_starting_over_deletes_the_page(eval_dir: Path):
    from metamod.evaluate.cells import clear_outputs

    write_view(eval_dir)
    clear_outputs(eval_dir)  # what `metamod eval --overwrite true` does: no stale page of deleted debates stays
    assert not (eval_dir / "view.html").exists() and not (eval_dir / "samples.jsonl").exists()


def test_rollout_folder_has_no_methods(tmp_path: Path):
    traces = [_trace("q1", "arith"), _trace("q0", "arith")]
    (tmp_path / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
    doc = load_run(tmp_path)
    assert doc["kind"] == "rollout" and doc["methods"] == []
    assert [(q["id"], q["disagree0"], q["num_rounds"]) for q in doc["questions"]] == [("q1", True, 3), ("q0", False, 3)]


def test_cli_writes_the_page_and_bad_folders_fail_in_one_line(eval_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "elsewhere" / "page.html"
    assert cli_main(["view", str(eval_dir), "--output", str(out)]) == 0
    assert len(embedded_data(out.read_text())["questions"]) == 5
    empty = tmp_path / "empty"
    empty.mkdir()
    capsys.readouterr()
    assert cli_main(["view", str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "samples.jsonl" in err and "traces.jsonl" in err and str(empty) in err
    assert cli_main(["view", str(tmp_path / "missing")]) == 2
    assert "run folder not found" in capsys.readouterr().err
    (empty / "samples.jsonl").write_text("")
    with pytest.raises(InputError, match="no rows"):
        load_run(empty)
    train_like = '{"step": 4, "completion": "STOP"}\n'  # a train folder's samples.jsonl
    (empty / "samples.jsonl").write_text(train_like * 2)
    capsys.readouterr()
    assert cli_main(["view", str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "samples.jsonl:1: not an eval row" in err
    assert not (empty / "view.html").exists()


# --------------------------------------------------------------------------------------------- a real browser

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (apt-get install chromium)")


def _dom(page: Path, fragment: str, profile: Path) -> str:
    """The page's DOM after its script ran, with ``fragment`` as the URL fragment (the filters)."""
    url = page.resolve().as_uri() + "#" + fragment
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}"]  # fmt: skip
    done = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _shown(dom: str) -> list[str]:
    """``data-key`` of the list rows the filters left visible."""
    rows = re.findall(r"<tr class=\"qrow[^\"]*\"[^>]*>", dom)
    assert rows, "no question rows in the page"
    return [re.search(r'data-key="([^"]+)"', r).group(1) for r in rows if " hidden" not in r]


@needs_chromium
def test_browser_applies_filters_and_shows_a_debate(eval_dir: Path, tmp_path: Path):
    page = write_view(eval_dir)
    profile = tmp_path / "chromium-profile"
    logic = ["logic|1|q0"]  # q0's debate again: round-0 agreement, moderator stops at round 0, single_cot right
    cases = {
        "method=moderator&correct=wrong": _arith_keys(lambda q: ANSWERS[q][STOP_ROUND[q]][0] != "4"),
        "method=moderator&stop=1": _arith_keys(lambda q: STOP_ROUND[q] == 1),
        "method=moderator&stop=0": _arith_keys(lambda q: STOP_ROUND[q] == 0) + logic,
        "method=single_cot&correct=correct": _arith_keys(lambda q: q in ("q0", "q2")) + logic,
        "task=arith&method=single_cot&correct=wrong": _arith_keys(lambda q: q not in ("q0", "q2")),
        "disagree=yes": _arith_keys(lambda q: len(set(ANSWERS[q][0])) > 1),
        "task=logic": logic,
    }
    for fragment, expected in cases.items():
        dom = _dom(page, fragment, profile)
        assert _shown(dom) == expected, fragment
        assert re.search(r'id="shown-count">(\d+)<', dom).group(1) == str(len(expected)), fragment
    # no filter: every question, both tasks
    assert len(_shown(_dom(page, "", profile))) == 5

    # a selected question: the debate round by round, P(STOP) where recorded, the injected text as plain text
    dom = _dom(page, "method=moderator&q=" + quote("arith|0|q2", safe=""), profile)
    detail = dom[dom.index('id="detail"') :]
    assert 'data-key="arith|0|q2"' in detail[:200]
    assert '<strong id="gold">4</strong>' in detail
    rounds = re.findall(r'class="round( after-stop)?" data-round="(\d)"', detail)
    assert rounds == [("", "0"), ("", "1"), (" after-stop", "2")]  # the moderator stopped at round 1
    assert "&lt;/script&gt;&lt;script&gt;document.title='PWNED'" in detail
    assert '<b id="pwned">' not in dom and "<title>PWNED" not in dom  # shown as text, never run or parsed
    p_stops = re.findall(r'class="p-stop">([^<]*)<', detail)
    assert p_stops == ["-", f"{P_STOP[1]:.3f}"]  # round 0 recorded none; the moderator stopped at round 1
    assert re.findall(r'class="(stop|continue)">', detail) == ["continue", "stop"]


CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
)


@needs_chromium
@pytest.mark.skipif(CHROMEDRIVER is None, reason="needs chromedriver (apt-get install chromium-driver)")
def test_browser_filters_and_selects_by_clicking(eval_dir: Path, tmp_path: Path):
    """Real user actions through Selenium and Debian's chromedriver: choose filters, click a row."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page = write_view(eval_dir)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]:  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)  # no driver download: Debian's
    try:
        driver.get(page.resolve().as_uri())

        def shown() -> list[str]:
            return [
                r.get_attribute("data-key")
                for r in driver.find_elements(By.CSS_SELECTOR, "tr.qrow")
                if r.is_displayed()
            ]

        assert len(shown()) == 5
        Select(driver.find_element(By.ID, "f-method")).select_by_value("moderator")
        Select(driver.find_element(By.ID, "f-stop")).select_by_value("1")
        expected = _arith_keys(lambda q: STOP_ROUND[q] == 1)
        assert shown() == expected
        assert driver.find_element(By.ID, "shown-count").text == str(len(expected))
        Select(driver.find_element(By.ID, "f-correct")).select_by_value("wrong")
        expected = _arith_keys(lambda q: STOP_ROUND[q] == 1 and ANSWERS[q][1][0] != "4")
        assert shown() == expected
        assert driver.current_url.endswith("#method=moderator&correct=wrong&stop=1")  # a shareable link

        driver.find_element(By.CSS_SELECTOR, f"tr.qrow[data-key='{expected[0]}']").click()
        detail = driver.find_element(By.ID, "detail")
        assert detail.get_attribute("data-key") == expected[0]
        assert driver.find_element(By.ID, "gold").text == "4"
        agent0 = detail.find_element(By.CSS_SELECTOR, ".round[data-round='0'] .agent[data-agent='0'] pre").text
        assert agent0.startswith(INJECTION)  # the injected markup is shown as text
        assert driver.title != "PWNED" and not driver.find_elements(By.ID, "pwned")
        assert "selected" in driver.find_element(By.CSS_SELECTOR, f"tr.qrow[data-key='{expected[0]}']").get_attribute(
            "class"
        )
    finally:
        driver.quit()
