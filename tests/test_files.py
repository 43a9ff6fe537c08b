"""metamod.files (JSONL, atomic writes, signatures, folder locks) and the fingerprint helpers of metamod.config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metamod.config import (
    FINGERPRINT_FILE,
    ConfigError,
    SettingsMismatchError,
    check_fingerprint,
    read_fingerprint,
    resume_settings,
    settings_fingerprint,
)
from metamod.errors import InputError
from metamod.files import (
    FolderLock,
    FolderLockedError,
    JsonlError,
    JsonlWriter,
    append_jsonl,
    atomic_write_json,
    check_unlocked,
    iter_jsonl,
    lock_holder,
    path_signature,
    read_jsonl,
    repair_torn_tail,
)

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------------- JSONL


def test_jsonl_round_trip_torn_tail_and_resume(tmp_path, caplog):
    path = tmp_path / "rows.jsonl"
    with JsonlWriter(path) as writer:
        writer.write_many([{"i": 0}, {"i": 1}])
        writer.sync()
    with path.open("a") as handle:  # a crash mid-write
        handle.write('{"i": 2, "te')
    assert read_jsonl(path) == [{"i": 0}, {"i": 1}]
    assert "torn last line" in caplog.text and "rows.jsonl:3" in caplog.text
    with JsonlWriter(path, resume=True) as writer:  # cuts the torn tail, appends on a fresh line
        writer.write({"i": 2})
    assert read_jsonl(path) == [{"i": 0}, {"i": 1}, {"i": 2}]
    with JsonlWriter(path, resume=False) as writer:
        writer.write({"i": 9})
    assert read_jsonl(path) == [{"i": 9}]
    assert append_jsonl(path, [{"i": 10}]) == 1 and read_jsonl(path)[-1] == {"i": 10}
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_jsonl_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(JsonlError, match=r"bad\.jsonl:2: corrupt line in the middle") as info:
        list(iter_jsonl(path))
    assert isinstance(info.value, InputError)  # the CLI prints it as one line
    path.write_text('{"a": 1}\n\n{"a": 3}\n')
    assert [n for n, _ in iter_jsonl(path)] == [1, 3]
    with pytest.raises(JsonlError, match=r"bad\.jsonl:2: empty line"):
        list(iter_jsonl(path, blank_lines="error"))

    def check(obj, where):
        if "a" not in obj:
            raise ValueError(f"{where}: no 'a'")

    path.write_text('{"a": 1}\n{"b": 2}')  # the last line has no newline and fails the check: torn, dropped
    assert [obj for _, obj in iter_jsonl(path, check=check)] == [{"a": 1}]
    path.write_text('{"b": 2}\n{"a": 1}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: no 'a'"):
        list(iter_jsonl(path, check=check))
    with pytest.raises(ValueError, match="fsync must be one of"):
        JsonlWriter(tmp_path / "x.jsonl", fsync="sometimes")


def test_repair_torn_tail_cuts_only_the_broken_last_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n')
    assert repair_torn_tail(path) == 0
    path.write_text('{"a": 1}\nnot json\n')  # complete but corrupt last line
    assert repair_torn_tail(path) == len("not json\n") and path.read_text() == '{"a": 1}\n'
    assert repair_torn_tail(tmp_path / "missing.jsonl") == 0


def test_traces_module_reexports_the_one_repair_function():
    from metamod import files
    from metamod.rollout import traces

    assert traces.repair_torn_tail is files.repair_torn_tail


def test_atomic_write_json_keeps_the_old_file_on_failure(tmp_path):
    path = atomic_write_json(tmp_path / "m.json", {"a": 1})
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular"):
        atomic_write_json(path, loop)
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]  # no temporary file left behind


def test_path_signature(tmp_path):
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    first = path_signature(folder)
    (folder / ".lock").write_text("123\n")  # hidden files do not count
    (folder / "checkpoint-5").mkdir()
    (folder / "checkpoint-5" / "optimizer.pt").write_text("x")  # nor sub-folders at depth 0
    assert path_signature(folder) == first
    assert path_signature(folder, depth=1) != first
    (folder / "adapter_config.json").write_text('{"r": 8}')  # retrained in place
    assert path_signature(folder) != first
    assert path_signature(tmp_path / "missing") is None and path_signature("org/hub-model") is None


# ---------------------------------------------------------------------------------------------------- locks


def test_folder_lock_refuses_a_second_writer_and_names_the_holder(tmp_path):
    folder = tmp_path / "out"
    check_unlocked(folder)  # nothing there: fine, and nothing is created
    assert not folder.exists()
    with FolderLock(folder) as lock:
        assert lock.held and lock_holder(folder) == str(os.getpid())
        with pytest.raises(FolderLockedError, match=rf"{folder} is in use by process {os.getpid()}"):
            FolderLock(folder).acquire()
        with pytest.raises(FolderLockedError, match=str(os.getpid())):
            check_unlocked(folder)
        assert isinstance(FolderLockedError("x"), ConfigError)
        FolderLock(folder, name=".lock.shard-1-of-2").acquire().release()  # another name: another lock
    with FolderLock(folder):  # released
        pass


_HOLDER = """
import sys, time
from metamod.files import FolderLock
lock = FolderLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(600)
"""


def _spawn_holder(folder: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(folder)], stdout=subprocess.PIPE, text=True, cwd=str(REPO)
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_lock_is_released_when_its_holder_is_killed(tmp_path):
    folder = tmp_path / "out"
    proc = _spawn_holder(folder)
    try:
        with pytest.raises(FolderLockedError, match=rf"in use by process {proc.pid}"):
            FolderLock(folder).acquire()
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # kill -9: no cleanup code runs
        proc.wait(timeout=30)
    assert lock_holder(folder) == str(proc.pid)  # the stale file stays, but the kernel dropped the lock
    check_unlocked(folder)
    with FolderLock(folder):
        assert lock_holder(folder) == str(os.getpid())


def test_wait_lock_blocks_instead_of_failing(tmp_path):
    proc = _spawn_holder(tmp_path)
    try:
        started = time.monotonic()
        killer = subprocess.Popen(["sh", "-c", f"sleep 1; kill -9 {proc.pid}"])
        with FolderLock(tmp_path, wait=True):
            assert time.monotonic() - started >= 0.5
        killer.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait(timeout=30)


# ---------------------------------------------------------------------------------------------------- fingerprints


def test_fingerprint_records_refuses_and_names_the_differing_keys(tmp_path):
    settings = {"max_rounds": 5, "simulation": {"sim_seed": 0}, "api_key": "sk-secret"}
    fp = check_fingerprint(tmp_path, settings, record=True, command="rollout")
    saved = read_fingerprint(tmp_path)
    assert saved["fingerprint"] == fp and saved["command"] == "rollout"
    assert "api_key" not in saved["settings"] and "sk-secret" not in (tmp_path / FINGERPRINT_FILE).read_text()
    assert settings_fingerprint({**settings, "api_key": "other"}) == fp  # credentials change nothing
    (tmp_path / "traces.jsonl").write_text("")  # the folder holds outputs
    assert check_fingerprint(tmp_path, settings) == fp
    changed = {"max_rounds": 3, "simulation": {"sim_seed": 1}}
    with pytest.raises(SettingsMismatchError) as info:
        check_fingerprint(tmp_path, changed, what="debate traces")
    message = str(info.value)
    assert "\n" not in message
    assert "max_rounds: 5 -> 3" in message and 'simulation: {"sim_seed": 0} -> {"sim_seed": 1}' in message
    assert "--overwrite true" in message and "--output_dir" in message
    assert check_fingerprint(tmp_path, changed, overwrite=True, record=True) != fp
    assert read_fingerprint(tmp_path)["settings"]["max_rounds"] == 3
    assert check_fingerprint(tmp_path, {**changed, "model_signature": "x"}, ignore=["model_signature"])


def test_fingerprint_without_outputs_folders_without_one_and_free_keys(tmp_path):
    check_fingerprint(tmp_path, {"a": 1}, record=True)
    assert check_fingerprint(tmp_path, {"a": 2}, record=True)  # nothing to protect: a stale fingerprint is replaced
    assert read_fingerprint(tmp_path)["settings"] == {"a": 2}
    old = tmp_path / "old"
    old.mkdir()
    (old / "samples.jsonl").write_text("")
    with pytest.raises(SettingsMismatchError, match="without a settings fingerprint"):
        check_fingerprint(old, {"a": 1})
    assert check_fingerprint(old, {"a": 1}, overwrite=True)  # the way out the message names
    assert resume_settings({"a": 1, "output_dir": "x", "hub_token": "t"}, {"output_dir"}) == {"a": 1}
