"""Bad input, round two (issue 16): every case ends in one clear line (exit 2 from the CLI), never a traceback,
never a partial output, never a deleted user file."""

from __future__ import annotations

import hashlib

import pytest
from conftest import cifar_archive
from test_faults import settings

from gpuscale import data
from gpuscale.data import DataError


def md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- data loss


def test_hand_placed_archive_with_wrong_md5_is_kept_and_the_message_says_how_to_proceed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    placed = tmp_path / "data/raw/cifar-10-binary.tar.gz"
    placed.parent.mkdir(parents=True)
    cifar_archive(placed)
    before = placed.read_bytes()
    with pytest.raises(DataError, match="kept.*set data.md5: [0-9a-f]{32}.*data.path") as err:
        data.prepare(settings(source="cifar10", url="http://example.invalid/x", md5="f" * 32), tmp_path / "out")
    assert "\n" not in str(err.value)
    assert placed.read_bytes() == before and not (tmp_path / "out").exists()


def test_extracted_cifar_folder_as_data_path_is_refused_saying_what_to_give(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    (folder / "data_batch_1.bin").write_bytes(b"\0" * data.CIFAR_RECORD_BYTES)
    with pytest.raises(DataError, match="is a folder; give the cifar-10-binary.tar.gz"):
        data.prepare(settings(source="cifar10", path=str(folder)), tmp_path / "out")
    assert folder.exists() and not (tmp_path / "out").exists()


def test_truncated_tar_gz_with_matching_md5_is_one_line(tmp_path):
    archive, _, _ = cifar_archive(tmp_path / "full.tar.gz")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size * 2 // 3])
    with pytest.raises(DataError, match="corrupt|not a readable") as err:
        data.prepare(settings(source="cifar10", path=str(cut), md5=md5(cut)), tmp_path / "out")
    assert "\n" not in str(err.value) and cut.exists() and not (tmp_path / "out").exists()
