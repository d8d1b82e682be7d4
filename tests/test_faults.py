"""Bad input and faults: a clear error, nothing half-written, nothing unsafe (issue 6, in part)."""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import tarfile
import time
import zipfile

import pytest
from conftest import REPO, TINY, data_settings, gpuscale_argv, prepare_data, tool_env, write_yaml
from PIL import Image

from gpuscale.contract import record
from gpuscale.inputs import cifar, data, dataset
from gpuscale.inputs.data import DataError
from gpuscale.measure import checkpoint, train


def settings(**overrides) -> dict:
    return data_settings(**{"source": "imagefolder", **overrides})


def png(size=(32, 32), mode="RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, 100).save(buffer, format="PNG")
    return buffer.getvalue()


def good_zip(path, extra: dict | None = None):
    with zipfile.ZipFile(path, "w") as archive:
        for split in ("train", "test"):
            for cls in ("cat", "dog"):
                archive.writestr(f"{split}/{cls}/0.png", png())
        for name, raw in (extra or {}).items():
            archive.writestr(name, raw)
    return path


def prepare_fails(tmp_path, match, **overrides):
    out = tmp_path / "out"
    with pytest.raises(DataError, match=match) as err:
        data.prepare(settings(**overrides), out)
    assert not out.exists()
    assert "\n" not in str(err.value)
    return err


@pytest.mark.parametrize("name", ["../evil.png", "/abs/evil.png", "train/../../evil.png"])
def test_zip_with_unsafe_paths_is_refused_and_writes_nothing_outside(tmp_path, name):
    archive = good_zip(tmp_path / "a.zip", {name: png()})
    before = set(tmp_path.parent.iterdir())
    prepare_fails(tmp_path, "unsafe path", path=str(archive))
    assert set(tmp_path.parent.iterdir()) == before and not (tmp_path.parent / "evil.png").exists()


def test_zip_symlink_member_is_refused(tmp_path):
    archive = good_zip(tmp_path / "a.zip")
    with zipfile.ZipFile(archive, "a") as z:
        info = zipfile.ZipInfo("train/cat/link.png")
        info.external_attr = 0o120777 << 16
        z.writestr(info, "/etc/passwd")
    prepare_fails(tmp_path, "symbolic link", path=str(archive))


def test_zip_declaring_a_huge_member_is_refused_before_decompression(tmp_path):
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("train/cat/0.png", b"\0" * (dataset.MAX_MEMBER_BYTES + 1))
    prepare_fails(tmp_path, "declares", path=str(archive))


def test_tar_with_link_or_dotdot_member_is_refused(tmp_path):
    for kind in ("symlink", "dotdot"):
        archive = tmp_path / f"{kind}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            info = tarfile.TarInfo("cifar-10-batches-bin/data_batch_1.bin" if kind == "symlink" else "../x.bin")
            if kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            else:
                info.size = 3
                tar.addfile(info, io.BytesIO(b"abc"))
        md5 = __import__("hashlib").md5(archive.read_bytes()).hexdigest()
        prepare_fails(tmp_path, "refused", source="cifar10", path=str(archive), md5=md5)


def test_corrupt_archive_already_in_place_is_refused(tmp_path):
    archive = tmp_path / "cifar-10-binary.tar.gz"
    archive.write_bytes(b"not a tar")
    md5 = __import__("hashlib").md5(archive.read_bytes()).hexdigest()
    prepare_fails(tmp_path, "not a readable .tar.gz", source="cifar10", path=str(archive), md5=md5)


def test_non_image_file_refused_in_strict_mode_and_skipped_in_convert_mode(tmp_path):
    archive = good_zip(tmp_path / "a.zip", {"train/cat/notes.txt": b"hello"})
    prepare_fails(tmp_path, "notes.txt is not an image file", path=str(archive))
    manifest = data.prepare(settings(path=str(archive), image_mode="convert"), tmp_path / "ok")
    assert manifest["origin"]["skipped_files"] == 1


def test_corrupt_image_is_refused_naming_it(tmp_path):
    archive = good_zip(tmp_path / "a.zip", {"train/cat/1.png": b"\x89PNG broken"})
    prepare_fails(tmp_path, "train/cat/1.png: not a readable image", path=str(archive))


def test_wrong_size_image_refused_or_converted_by_param(tmp_path):
    archive = good_zip(tmp_path / "a.zip", {"train/cat/1.png": png((64, 48), "L")})
    prepare_fails(tmp_path, "64x48 L, expected 32x32 RGB.*image_mode: convert", path=str(archive))
    manifest = data.prepare(settings(path=str(archive), image_mode="convert"), tmp_path / "ok")
    assert manifest["origin"]["converted_images"] == 1
    dataset, _, _ = data.load_prepared(tmp_path / "ok")
    assert dataset.train_images.shape == (3, 32, 32, 3)


def test_empty_class_and_missing_test_split_are_refused(tmp_path):
    root = tmp_path / "tree"
    for split in ("train", "test"):
        (root / split / "cat").mkdir(parents=True)
        (root / split / "cat" / "0.png").write_bytes(png())
    (root / "train" / "dog").mkdir()
    prepare_fails(tmp_path, "class folder train/dog/ holds no images", path=str(root))
    only_train = tmp_path / "only_train.zip"
    with zipfile.ZipFile(only_train, "w") as z:
        z.writestr("train/cat/0.png", png())
    prepare_fails(tmp_path, "a test split is required", path=str(only_train))


def test_no_pickle_is_loaded_anywhere():
    sources = "".join(p.read_text() for p in (REPO / "src/gpuscale").rglob("*.py"))
    assert "import pickle" not in sources and "pickle.load" not in sources
    assert "allow_pickle=True" not in sources and "torch.load(" not in sources


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killed_training_leaves_no_record_that_looks_finished(tmp_path, sig):
    """A signal in the middle of an epoch: no record, no partial file where the record would be."""
    overlay = write_yaml(
        tmp_path / "o.yaml",
        {
            **TINY,
            "data": {"source": "synthetic", "train_size": 4000, "test_size": 50},
            "train": {**TINY["train"], "epochs": 50, "log_every_steps": 5},
        },
    )
    prepare_data(overlay, tmp_path / "prepared")
    out = tmp_path / "runs" / "record.json"
    log = tmp_path / "train.log"
    proc = subprocess.Popen(
        [
            *gpuscale_argv("train", overlay, "--model", "simplecnn", "--device", "cpu", "--threads", "1"),
            "--data",
            str(tmp_path / "prepared"),
            "--out",
            str(out),
            "--log",
            str(log),
        ],
        env=tool_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "step 10/" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.2)
    assert "step 10/" in log.read_text(), "training never reached step 10"
    os.kill(proc.pid, sig)
    proc.wait(timeout=30)
    assert not out.exists()
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


class _Server:
    """A local HTTP server for one file: honours Range, can cut the first transfer off halfway, or answer 404."""

    def __init__(self, payload: bytes, cut_first: bool = False, status: int = 200):
        import http.server
        import threading

        self.payload, self.cut_first, self.status, self.ranges = payload, cut_first, status, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if server.status != 200:
                    self.send_error(server.status)
                    return
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"].split("=")[1].split("-")[0])
                server.ranges.append(start)
                body = server.payload[start:]
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if server.cut_first and len(server.ranges) == 1:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/cifar-10-binary.tar.gz"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def test_cut_off_download_is_resumed_on_the_next_try(tmp_path):
    payload = os.urandom(300_000)
    server = _Server(payload, cut_first=True)
    try:
        cifar.download(server.url, tmp_path / "raw" / "a.tar.gz", timeout=5, retries=1)
    finally:
        server.close()
    assert (tmp_path / "raw" / "a.tar.gz").read_bytes() == payload
    assert server.ranges[0] == 0 and 0 < server.ranges[1] < len(payload)  # the second request resumed
    assert not (tmp_path / "raw" / "a.tar.gz.part").exists()


def test_http_error_is_reported_with_its_code_and_the_other_sources(tmp_path):
    server = _Server(b"", status=404)
    try:
        with pytest.raises(DataError, match="HTTP 404.*imagefolder.*synthetic"):
            cifar.download(server.url, tmp_path / "raw" / "a.tar.gz", timeout=5, retries=2)
    finally:
        server.close()
    assert not (tmp_path / "raw" / "a.tar.gz").exists()


def test_killed_run_resumes_from_its_last_epoch_and_the_record_says_who_timed_what(tmp_path):
    """runtime.resume: a real training process is killed after its second epoch; the next run continues from the
    checkpoint. Deterministic mode: the resumed run's losses equal an uninterrupted run's, so the state (weights,
    optimizer, scheduler, random generators) came back whole; each epoch keeps the time its own process measured."""
    base = {
        **TINY,
        "data": {"source": "synthetic", "train_size": 1280, "test_size": 50},
        "train": {**TINY["train"], "epochs": 4, "deterministic": True, "log_every_steps": 100},
    }
    plain = write_yaml(tmp_path / "plain.yaml", base)
    resumable = write_yaml(tmp_path / "resume.yaml", {**base, "runtime": {"resume": True}})
    prepare_data(plain, tmp_path / "prepared")

    def train(overlay, out, log):
        model = ["--model", "simplecnn", "--device", "cpu", "--threads", "1"]
        return gpuscale_argv("train", overlay, *model, "--data", tmp_path / "prepared", "--out", out, "--log", log)

    subprocess.run(
        train(plain, tmp_path / "whole.json", tmp_path / "whole.log"), check=True, env=tool_env(), capture_output=True
    )
    out, log = tmp_path / "runs" / "r.json", tmp_path / "first.log"
    proc = subprocess.Popen(
        train(resumable, out, log), env=tool_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    ckpt = checkpoint.path_for(out)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "epoch 2/4 done" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.05)
    proc.send_signal(signal.SIGSTOP)  # hold it still, then kill it: after epoch 2, before epoch 4
    text = log.read_text()
    assert "epoch 2/4 done" in text and "epoch 4/4 done" not in text
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not out.exists() and ckpt.exists()
    done_before_kill = checkpoint.read_meta(ckpt)["segments"][0]["epochs"]
    assert done_before_kill in ([1], [1, 2], [1, 2, 3])  # the checkpoint of epoch 2 may still have been in writing

    second = subprocess.run(
        train(resumable, out, tmp_path / "second.log"), env=tool_env(), capture_output=True, text=True, check=False
    )
    assert second.returncode == 0, second.stderr
    rec, whole = record.load(out), record.load(tmp_path / "whole.json")
    assert not ckpt.exists()  # removed once the record is written
    segments = rec["process"]["segments"]
    assert rec["process"]["resumed"] and [s["pid"] for s in segments] == [proc.pid, rec["process"]["pid"]]
    assert segments[0]["epochs"] == done_before_kill and segments[0]["epochs"] + segments[1]["epochs"] == [1, 2, 3, 4]
    resumed_at = segments[1]["epochs"][0]
    assert [e["warmup"] for e in rec["epochs"]] == [e["epoch"] in (1, resumed_at) for e in rec["epochs"]]
    assert [e["train_loss"] for e in rec["epochs"]] == [e["train_loss"] for e in whole["epochs"]]
    assert [e["test_accuracy"] for e in rec["epochs"]] == [e["test_accuracy"] for e in whole["epochs"]]
    assert [e["learning_rate"] for e in rec["epochs"]] == [e["learning_rate"] for e in whole["epochs"]]
    steady = [e["train_seconds"] for e in rec["epochs"] if not e["warmup"]]
    assert rec["timing"]["steady_epoch_seconds_mean"] == pytest.approx(sum(steady) / len(steady))


def test_a_checkpoint_from_other_settings_is_set_aside_not_resumed(tmp_path, caplog):
    base = {
        **TINY,
        "data": {"source": "synthetic", "train_size": 200, "test_size": 50},
        "train": {**TINY["train"], "epochs": 1},
    }
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "data",
            "--params",
            str(REPO / "params.yaml"),
            "--params",
            str(write_yaml(tmp_path / "o.yaml", base)),
            "--out",
            str(tmp_path / "prepared"),
        ],
        check=True,
        env=tool_env(),
        capture_output=True,
    )
    out = tmp_path / "r.json"
    ckpt = checkpoint.path_for(out)
    import json as _json

    import torch
    from safetensors.torch import save_file

    save_file(
        {"x": torch.zeros(1)},
        str(ckpt),
        metadata={
            "gpuscale": _json.dumps(
                {
                    "version": checkpoint.VERSION,
                    "identity": {"host_fingerprint": "elsewhere"},
                    "epochs": [],
                    "segments": [],
                }
            )
        },
    )
    from test_train import tiny_settings

    caplog.set_level("WARNING")
    train.run(tiny_settings(epochs=1), tmp_path / "prepared", out, threads=1, resume=True)
    rec = record.load(out)
    assert rec["process"]["resumed"] is False and len(rec["process"]["segments"]) == 1
    assert any("another" in m and "host_fingerprint" in m for m in caplog.messages)
    assert not ckpt.exists()


def test_out_of_memory_names_the_batch_size_and_writes_no_record(tmp_path, monkeypatch, capsys):
    """Out of device memory (raised where a real GPU raises it: inside the training epoch; CI has no GPU to fill):
    a one-line error that says so and names the params to lower; no record, no checkpoint."""
    base = {**TINY, "data": {"source": "synthetic", "train_size": 200, "test_size": 50}}
    overlay = write_yaml(tmp_path / "o.yaml", {**base, "runtime": {"resume": True}})
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "data",
            "--params",
            str(REPO / "params.yaml"),
            "--params",
            str(overlay),
            "--out",
            str(tmp_path / "prepared"),
        ],
        check=True,
        env=tool_env(),
        capture_output=True,
    )

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    import torch

    from gpuscale import cli

    monkeypatch.setattr(train, "train_epoch", out_of_memory)
    out = tmp_path / "runs" / "r.json"
    code = cli.main(
        [
            "train",
            "--params",
            str(REPO / "params.yaml"),
            "--params",
            str(overlay),
            "--model",
            "resnet18",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--data",
            str(tmp_path / "prepared"),
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]
    logging.getLogger().handlers.clear()  # cli.main logged to this test's captured stream, closed after it
    assert code != 0 and "out of cpu memory at batch size 32" in err
    assert "train.batch_size" in err and "models.resnet18.batch_size" in err and "Traceback" not in err
    assert not out.exists() and not checkpoint.path_for(out).exists()
