"""`trnsim replay` on recordings from elsewhere (issue 42 R1): the config a header names is read only from the
config search path, and a program file is inflated no further than the size the manifest declares."""
import gzip
import json
import os
import shutil
import subprocess
import time
import zlib

import pytest

from conftest import REPO_ROOT
from test_hostile_input import assert_clean_error

DEMO = REPO_ROOT / "traces" / "demo_step_trn2.trnrec"
SECRET = "root:x:0:0:do-not-echo-this-line"


def copy_recording(tmp_path, edit_header=None, edit_launch=None):
    copy = tmp_path / "r.trnrec"
    shutil.copytree(DEMO, copy)
    lines = [json.loads(line) for line in (copy / "manifest.jsonl").read_text().splitlines() if line]
    if edit_header:
        edit_header(lines[0])
    if edit_launch:
        for line in lines[1:]:
            if line.get("kind") == "kernel":
                edit_launch(line)
    (copy / "manifest.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return copy


def run_replay(trnsim_bin, *args, env=None):
    return subprocess.run([str(trnsim_bin), "replay", *map(str, args)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_a_header_naming_a_file_outside_the_config_path_is_not_read(trnsim_bin, tmp_path):
    secret = tmp_path / "passwd"
    secret.write_text(SECRET + "\n")

    def point_at(path):
        return lambda header: header["config"].update(name_or_path=str(path), source=str(path))

    for target in (secret, "/etc/passwd", REPO_ROOT / "configs" / ".." / "README.md"):
        recording = copy_recording(tmp_path / str(abs(hash(str(target)))), point_at(target))
        result = run_replay(trnsim_bin, recording)
        assert_clean_error(result, "is outside the config search path", "pass --config")
        assert SECRET not in result.stderr and "root:" not in result.stderr
    # The same file given by the user (--config) is the user's choice: read, and its parse error located.
    recording = copy_recording(tmp_path / "own", point_at(secret))
    assert_clean_error(run_replay(trnsim_bin, recording, "--config", secret), str(secret))


def test_a_config_in_the_search_path_is_still_found(trnsim_bin, tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    shutil.copy(REPO_ROOT / "configs" / "trn2.yaml", folder / "mine.yaml")
    recording = copy_recording(tmp_path, lambda h: h["config"].update(name_or_path="mine", source="/elsewhere/mine.yaml"))
    assert_clean_error(run_replay(trnsim_bin, recording), "config 'mine'", "is not found here: pass --config")
    result = run_replay(trnsim_bin, recording, env={"TRNSIM_CONFIG_PATH": str(folder)})
    assert result.returncode == 0, result.stderr
    assert "every launch's time equals its recorded time" in result.stdout


def declare_sizes(programs):
    def edit(launch):
        launch["program_bytes"] = [len(gzip.decompress((programs / f"{h}.tasm.gz").read_bytes()))
                                   for h in launch["programs"]]
    return edit


def test_a_gzip_bomb_stops_at_the_declared_size(trnsim_bin, tmp_path):
    recording = copy_recording(tmp_path, edit_launch=declare_sizes(DEMO / "programs"))
    result = run_replay(trnsim_bin, recording)
    assert result.returncode == 0, result.stderr  # the declared sizes are the programs' own
    launch = next(json.loads(line) for line in (recording / "manifest.jsonl").read_text().splitlines()
                  if '"kind": "kernel"' in line)
    bomb = recording / "programs" / f"{launch['programs'][0]}.tasm.gz"
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    # 1 GiB of zeros in about 1 MiB: it inflated whole (5.8 s, 1 GB of host memory) before its hash was checked.
    bomb.write_bytes(b"".join(packer.compress(chunk) for _ in range(1024)) + packer.flush())
    start = time.monotonic()
    result = run_replay(trnsim_bin, recording)
    # Refused from its file size (a gzip of a text of the declared size is at most a little larger) or, for a
    # smaller bomb, where its inflated text passes the declared size.
    assert_clean_error(result, f"{bomb}: ", "more than the", "a damaged or hostile file")
    assert time.monotonic() - start < 5  # the time of reading the rest of the recording, not of 1 GiB
