"""Bad input, round two (issue 16): every case ends in one clear line (exit 2 from the CLI), never a traceback,
never a partial output, never a deleted user file."""

from __future__ import annotations

import hashlib
import shutil
import zipfile

import pytest
from conftest import cifar_archive
from test_faults import good_zip, png, prepare_fails, settings

from gpuscale.inputs import cifar, data
from gpuscale.inputs.data import DataError


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
    (folder / "data_batch_1.bin").write_bytes(b"\0" * cifar.CIFAR_RECORD_BYTES)
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


# ----------------------------------------------------------------------------- zip members


def corrupt_member(path, how: str):
    """A zip whose train/cat/0.png has a bad CRC, or declares fewer bytes than it holds."""
    good_zip(path)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("train/cat/0.png")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    if how == "crc":
        raw[start + 40] ^= 0xFF  # a data byte (stored, uncompressed): the CRC no longer matches
    else:
        for offset in (info.header_offset + 22, _central(raw, info) + 24):  # uncompressed size, local + central
            raw[offset : offset + 4] = (info.file_size - 10).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    return path


def _central(raw: bytearray, info) -> int:
    name = info.filename.encode()
    index = raw.find(b"PK\x01\x02")
    while index >= 0:
        if raw[index + 46 : index + 46 + len(name)] == name:
            return index
        index = raw.find(b"PK\x01\x02", index + 4)
    raise AssertionError("no central entry")


@pytest.mark.parametrize("how", ["crc", "short size"])
def test_a_corrupt_zip_member_is_one_line_naming_it(tmp_path, how):
    archive = corrupt_member(tmp_path / "a.zip", how)
    prepare_fails(tmp_path, "member train/cat/0.png", path=str(archive))


def test_the_unreadable_image_message_names_the_member_not_an_in_memory_object(tmp_path):
    archive = good_zip(tmp_path / "a.zip", {"train/cat/1.png": b"GIF89a not really"})
    err = prepare_fails(tmp_path, "train/cat/1.png: not a readable image", path=str(archive))
    assert "BytesIO" not in str(err.value) and "0x" not in str(err.value)


# ----------------------------------------------------------------------------- image-folder layout


def tree(root, files: dict):
    for name, raw in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(raw)
    return root


BASE = {f"{s}/{c}/0.png": png() for s in ("train", "test") for c in ("cat", "dog")}


@pytest.mark.parametrize("kind", ["folder", "zip"])
@pytest.mark.parametrize(
    "stray, why",
    [
        ("train/cat/sub/1.jpg", "sub-folder of class folder train/cat/"),
        ("train/README.txt", "is a file where class folders belong"),
    ],
    ids=["nested class folder", "stray file at class level"],
)
def test_strays_under_the_splits_are_refused_in_strict_mode_and_counted_when_skipped(tmp_path, kind, stray, why):
    files = {**BASE, stray: png()}
    if kind == "folder":
        source = tree(tmp_path / "tree", files)
    else:
        source = tmp_path / "a.zip"
        with zipfile.ZipFile(source, "w") as archive:
            for name, raw in files.items():
                archive.writestr(name, raw)
    err = prepare_fails(tmp_path, why, path=str(source))
    assert "holds no images" not in str(err.value) and "image_mode: convert" in str(err.value)
    manifest = data.prepare(settings(path=str(source), image_mode="convert"), tmp_path / "ok")
    assert manifest["origin"]["skipped_files"] == 1 and manifest["counts"]["train"]["total"] == 2


def test_a_readme_beside_the_splits_and_hidden_files_are_not_data(tmp_path):
    source = tree(tmp_path / "tree", {**BASE, "README.md": b"hi", "train/cat/.DS_Store": b"x", "train/.x": b"y"})
    manifest = data.prepare(settings(path=str(source)), tmp_path / "ok")
    assert manifest["origin"]["skipped_files"] == 0


@pytest.mark.parametrize("split", ["train", "test"])
def test_a_subset_larger_than_the_source_is_refused_so_the_manifest_never_overstates(tmp_path, split):
    source = tree(tmp_path / "tree", BASE)
    prepare_fails(
        tmp_path,
        f"data.{split}_size: 5000 is more than the 2 {split} images",
        path=str(source),
        **{f"{split}_size": 5000},
    )
    manifest = data.prepare(settings(path=str(source), train_size=2, test_size=2), tmp_path / "ok")
    assert manifest["subset"]["train_size"] == manifest["counts"]["train"]["total"] == 2


# ----------------------------------------------------------------------------- prepared folders


@pytest.fixture
def prepared_copy(prepared, tmp_path):
    copy = tmp_path / "prepared"
    shutil.copytree(prepared, copy)
    return copy


@pytest.mark.parametrize(
    "manifest",
    ["{}", "[]", "null", '{"files": {}}', "{" * 5000, b"\xff\xfe".decode("latin-1")],
    ids=["empty object", "list", "null", "no checksums", "nested", "not UTF-8"],
)
def test_a_broken_manifest_is_one_line(prepared_copy, manifest):
    (prepared_copy / "manifest.json").write_bytes(manifest.encode("latin-1"))
    with pytest.raises(DataError, match="manifest.json: .*(data stage|gpuscale data)") as err:
        data.load_prepared(prepared_copy)
    assert "\n" not in str(err.value)


def test_an_object_array_is_refused_and_never_unpickled(prepared_copy, monkeypatch):
    import json

    import numpy as np

    marker = prepared_copy / "unpickled"
    np.save(prepared_copy / "train_labels.npy", np.array([Boom(str(marker))], dtype=object), allow_pickle=True)
    manifest = json.loads((prepared_copy / "manifest.json").read_text())
    manifest["files"]["train_labels.npy"]["sha256"] = hashlib.sha256(
        (prepared_copy / "train_labels.npy").read_bytes()
    ).hexdigest()
    (prepared_copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="train_labels.npy: not a plain numeric array"):
        data.load_prepared(prepared_copy)
    assert not marker.exists()


def test_arrays_of_the_wrong_shape_or_labels_out_of_range_are_one_line(prepared_copy):
    import numpy as np

    np.save(prepared_copy / "test_labels.npy", np.full(60, 99, dtype=np.int64))
    with pytest.raises(DataError, match="labels outside 0-9"):
        data.load_prepared(prepared_copy, verify=False)
    np.save(prepared_copy / "test_images.npy", np.zeros((60, 8, 8), dtype=np.uint8))
    with pytest.raises(DataError, match=r"test_images.npy: uint8 \(60, 8, 8\), expected uint8"):
        data.load_prepared(prepared_copy, verify=False)


class Boom:
    """Unpickling this would write a file: the proof that nothing was unpickled."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))
