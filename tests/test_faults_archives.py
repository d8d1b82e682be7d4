"""Archives and folders, each image once (issue 28, family 3): a zip or image folder yields each member once;
names that are one file on macOS or Windows, hidden files and resource forks, images of other sizes and modes,
truncated or corrupt images, classes in one split only. Each ends in one line naming the member, or is read
with what was left out counted in the manifest."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import tarfile
import unicodedata
import warnings
import zipfile

import numpy as np
import pytest
from conftest import cifar_archive
from PIL import Image
from test_faults import png, prepare_fails, settings

from gpuscale.inputs import data

BASE = {f"{s}/{c}/0.png": png() for s in ("train", "test") for c in ("cat", "dog")}
NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


def image(mode: str, size=(32, 32), fmt: str = "PNG", value=100) -> bytes:
    if mode == "I;16":
        picture = Image.fromarray(np.full(size[::-1], value, dtype=np.uint16))
    else:
        picture = Image.new(mode, size, value)
    if mode == "P":
        picture.info["transparency"] = 0
    buffer = io.BytesIO()
    picture.save(buffer, format=fmt)
    return buffer.getvalue()


def as_zip(path, members: list[tuple[str, bytes]]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate name: that is the case under test
        with zipfile.ZipFile(path, "w") as archive:
            for name, raw in members:
                archive.writestr(name, raw)
    return path


def as_tree(root, members: dict):
    for name, raw in members.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(raw)
    return root


def source(tmp_path, kind: str, members: dict):
    if kind == "folder":
        return as_tree(tmp_path / "tree", members)
    return as_zip(tmp_path / "a.zip", list(members.items()))


def prepared(tmp_path, path, name="ok", **overrides) -> dict:
    return data.prepare(settings(path=str(path), **overrides), tmp_path / name)


# ----------------------------------------------------------------------------- each member once


def test_a_repeated_zip_member_with_the_same_bytes_is_read_once_with_a_line(tmp_path, caplog):
    archive = as_zip(tmp_path / "a.zip", [*BASE.items(), ("train/cat/0.png", BASE["train/cat/0.png"])])
    with caplog.at_level(logging.WARNING, "gpuscale.data"):
        manifest = prepared(tmp_path, archive)
    assert manifest["counts"]["train"]["total"] == 2 and manifest["origin"]["repeated_members"] == 1
    assert "1 repeated zip member(s) with identical contents, each read once, e.g. train/cat/0.png" in caplog.text


def test_a_repeated_zip_member_with_other_bytes_is_refused_naming_it(tmp_path):
    archive = as_zip(tmp_path / "a.zip", [*BASE.items(), ("train/cat/0.png", image("RGB", value=7))])
    prepare_fails(tmp_path, "member train/cat/0.png appears twice with different contents", path=str(archive))


def test_a_windows_name_of_the_same_member_is_one_member(tmp_path):
    archive = as_zip(tmp_path / "a.zip", [*BASE.items(), ("train\\cat\\0.png", BASE["train/cat/0.png"])])
    assert prepared(tmp_path, archive)["counts"]["train"]["total"] == 2
    other = as_zip(tmp_path / "b.zip", [*BASE.items(), ("train\\cat\\0.png", image("RGB", value=7))])
    prepare_fails(tmp_path, "member train/cat/0.png appears twice", path=str(other))


def test_dot_slash_names_are_read_like_plain_ones(tmp_path):
    archive = as_zip(tmp_path / "a.zip", [(f"./{name}", raw) for name, raw in BASE.items()])
    assert prepared(tmp_path, archive)["counts"]["test"]["total"] == 2


def test_a_repeated_cifar_batch_in_the_tar_is_refused(tmp_path):
    archive, _, _ = cifar_archive(tmp_path / "c.tar.gz")
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(archive, "w:gz") as tar:
        for member, raw in [*members, members[0]]:
            tar.addfile(member, io.BytesIO(raw))
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    prepare_fails(tmp_path, "data_batch_1.bin appears more than once", source="cifar10", path=str(archive), md5=md5)


@pytest.mark.parametrize("batch", ["test_batch.bin", "data_batch_3.bin"])
def test_a_cifar_tar_missing_a_class_in_a_split_is_refused(tmp_path, batch):
    """As an image folder's class in one split only; a hand-made tar whose test batch held one class was prepared
    and trained on, accuracy measured over classes never tested."""
    archive, _, _ = cifar_archive(tmp_path / "c.tar.gz")
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(archive, "w:gz") as tar:
        for member, raw in members:
            if member.name.endswith(batch):
                one_class = np.frombuffer(raw, np.uint8).reshape(-1, 3073).copy()
                one_class[:, 0] = 0
                raw = one_class.tobytes()
            tar.addfile(member, io.BytesIO(raw))
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    where = "cifar-10-batches-bin/test_batch.bin" if batch == "test_batch.bin" else "the train batches"
    if batch == "data_batch_3.bin":  # one batch of a single class: the other batches still hold every class
        assert data.prepare(settings(source="cifar10", path=str(archive), md5=md5), tmp_path / "ok")
        return
    prepare_fails(tmp_path, re.escape(f"class 'automobile' has no image in {where} (9 of 10"), source="cifar10",
                  path=str(archive), md5=md5)  # fmt: skip


# ----------------------------------------------------------------------------- one name, two spellings


@pytest.mark.parametrize("kind", ["folder", "zip"])
@pytest.mark.parametrize(
    "first, second, words",
    [
        ("train/cat/A.png", "train/cat/a.png", "differ only in case"),
        (f"train/cat/{NFC}.png", f"train/cat/{NFD}.png", "two Unicode normalisations"),
    ],
    ids=["case", "NFC and NFD"],
)
def test_two_images_that_are_one_file_on_macos_are_refused_naming_both(tmp_path, kind, first, second, words):
    path = source(tmp_path, kind, {**BASE, first: png(), second: png()})
    err = prepare_fails(tmp_path, words, path=str(path), image_mode="convert")
    assert first in str(err.value) and second in str(err.value)


@pytest.mark.parametrize("kind", ["folder", "zip"])
def test_two_class_folders_that_are_one_on_macos_are_refused(tmp_path, kind):
    path = source(tmp_path, kind, {**BASE, "train/Cat/1.png": png(), "test/Cat/1.png": png()})
    prepare_fails(tmp_path, "class folders (test|train)/Cat/ and (test|train)/cat/ differ only in case", path=str(path))


def test_a_class_spelt_nfc_in_train_and_nfd_in_test_is_one_class(tmp_path):
    path = as_tree(tmp_path / "tree", {**BASE, f"train/{NFC}/0.png": png(), f"test/{NFD}/0.png": png()})
    manifest = prepared(tmp_path, path)
    assert manifest["classes"] == sorted(["cat", "dog", NFC]) and manifest["counts"]["test"]["total"] == 3


def test_a_class_spelt_in_other_case_in_test_is_named(tmp_path):
    path = as_tree(tmp_path / "tree", {**BASE, "train/bird/0.png": png(), "test/Bird/0.png": png()})
    prepare_fails(tmp_path, "train/bird/ and test/Bird/ differ only in case; name them alike", path=str(path))


# ----------------------------------------------------------------------------- hidden files, empty classes


@pytest.mark.parametrize("kind", ["folder", "zip"])
def test_hidden_files_and_resource_forks_are_not_data_and_are_counted(tmp_path, kind, caplog):
    hidden = {
        "train/cat/.DS_Store": b"\0\0\0\1Bud1",
        "train/cat/._0.png": b"\0\5\26\7 resource fork",
        "__MACOSX/train/cat/._0.png": b"\0\5\26\7",
        "train/dog/Thumbs.db": b"thumbs",
        "test/.git/config": b"[core]",
    }
    path = source(tmp_path, kind, {**BASE, **hidden})
    with caplog.at_level(logging.WARNING, "gpuscale.data"):
        manifest = prepared(tmp_path, path)  # strict: none of them is a stray or a non-image
    assert manifest["origin"]["hidden_files"] == 5 and manifest["origin"]["skipped_files"] == 0
    assert manifest["counts"]["train"]["total"] == 2 and "5 hidden file(s)" in caplog.text


@pytest.mark.parametrize("kind", ["folder", "zip"])
def test_a_class_folder_holding_only_hidden_files_is_empty(tmp_path, kind):
    path = source(tmp_path, kind, {**BASE, "train/bird/.DS_Store": b"x", "test/bird/._0.png": b"y"})
    prepare_fails(tmp_path, "class folder (test|train)/bird/ holds no images", path=str(path))


@pytest.mark.parametrize("split, other", [("train", "test"), ("test", "train")])
def test_a_class_in_one_split_only_is_named(tmp_path, split, other):
    path = as_tree(tmp_path / "tree", {**BASE, f"{split}/bird/0.png": png()})
    prepare_fails(
        tmp_path,
        f"class 'bird' has images under {split}/ but none under {other}/ \\(1 such class\\(es\\)\\); "
        f"add {other}/bird/ images, or remove {split}/bird/",
        path=str(path),
    )


def test_a_linked_class_folder_is_refused_not_taken_for_an_empty_one(tmp_path):
    root = as_tree(tmp_path / "tree", BASE)
    as_tree(tmp_path / "elsewhere", {"0.png": png()})
    os.symlink(tmp_path / "elsewhere", root / "train" / "bird")
    err = prepare_fails(tmp_path, "refused: not a regular file or folder", path=str(root))
    assert "train/bird" in str(err.value) and "holds no images" not in str(err.value)


# ----------------------------------------------------------------------------- sizes and modes


MODES = [
    ("L", "PNG", "L is grayscale"),
    ("P", "PNG", "P is palette"),
    ("RGBA", "PNG", "RGBA is RGB with alpha"),
    ("LA", "PNG", "LA is grayscale with alpha"),
    ("1", "PNG", "1 is 1-bit black and white"),
    ("I;16", "PNG", "I;16 is 16-bit grayscale"),
    ("CMYK", "JPEG", "CMYK is CMYK"),
]


@pytest.mark.parametrize("mode, fmt, words", MODES, ids=[m for m, _, _ in MODES])
def test_other_modes_are_refused_in_strict_mode_naming_the_member_and_converted_in_convert_mode(
    tmp_path, mode, fmt, words, caplog
):
    name = "train/cat/1.jpg" if fmt == "JPEG" else "train/cat/1.png"
    archive = as_zip(tmp_path / "a.zip", [*BASE.items(), (name, image(mode, fmt=fmt))])
    err = prepare_fails(tmp_path, f"{name}: image is 32x32 {mode}, expected 32x32 RGB", path=str(archive))
    assert words in str(err.value) and "image_mode: convert" in str(err.value)
    with caplog.at_level(logging.WARNING, "gpuscale.data"):
        manifest = prepared(tmp_path, archive, image_mode="convert")
    assert manifest["origin"]["converted_images"] == 1 and manifest["counts"]["train"]["total"] == 3
    assert "1 image(s) resized or converted" in caplog.text and name in caplog.text


def test_a_16_bit_image_keeps_its_levels_instead_of_turning_white(tmp_path):
    archive = as_zip(tmp_path / "a.zip", [*BASE.items(), ("train/cat/1.png", image("I;16", value=40000))])
    prepared(tmp_path, archive, image_mode="convert")
    dataset, _, _ = data.load_prepared(tmp_path / "ok")
    levels = {tuple(dataset.train_images[i, 0, 0]) for i in range(len(dataset.train_images))}
    assert (40000 >> 8,) * 3 in levels and (255, 255, 255) not in levels


def test_a_huge_canvas_is_refused_before_it_is_decoded(tmp_path):
    archive = as_zip(tmp_path / "a.zip", [*BASE.items(), ("train/cat/1.png", image("1", size=(5000, 5000)))])
    prepare_fails(tmp_path, "train/cat/1.png: image is 5000x5000 1, expected 32x32 RGB", path=str(archive))
    prepare_fails(
        tmp_path, "5000x5000, far above a 32x32 image; refused before decoding", path=str(archive), image_mode="convert"
    )


# ----------------------------------------------------------------------------- truncated and corrupt


def _bad_crc(raw: bytes) -> bytes:
    index = raw.index(b"IDAT") + 8
    return raw[:index] + bytes([raw[index] ^ 0xFF]) + raw[index + 1 :]


CORRUPT = {
    "truncated png": lambda: png()[: len(png()) // 2],
    "truncated jpeg": lambda: image("RGB", fmt="JPEG")[:300],
    "empty file": lambda: b"",
    "png with a bad chunk": lambda: _bad_crc(png()),
    "text named .png": lambda: b"hello, not an image",
}


@pytest.mark.parametrize("image_mode", ["strict", "convert"])
@pytest.mark.parametrize("how", list(CORRUPT))
def test_a_truncated_or_corrupt_image_is_one_line_naming_it_in_either_mode(tmp_path, how, image_mode):
    archive = as_zip(tmp_path / "a.zip", [*BASE.items(), ("train/dog/7.png", CORRUPT[how]())])
    err = prepare_fails(tmp_path, "train/dog/7.png: not a readable image", path=str(archive), image_mode=image_mode)
    assert "BytesIO" not in str(err.value) and "remove or replace it" in str(err.value)


DISTINCT = {name: image("RGB", value=(i * 40, 3, 9)) for i, name in enumerate(BASE)}


def test_a_source_with_nothing_left_out_keeps_the_manifest_earlier_versions_wrote(tmp_path):
    origin = prepared(tmp_path, as_tree(tmp_path / "tree", DISTINCT))["origin"]
    assert sorted(origin) == ["converted_images", "image_mode", "path", "skipped_files"]


def test_images_with_the_same_bytes_are_kept_and_counted_with_a_line(tmp_path, caplog):
    files = {**DISTINCT, "test/cat/0.png": DISTINCT["train/cat/0.png"], "train/dog/1.png": DISTINCT["train/dog/0.png"]}
    with caplog.at_level(logging.WARNING, "gpuscale.data"):
        manifest = prepared(tmp_path, as_tree(tmp_path / "tree", files))
    assert manifest["origin"]["identical_images"] == 2 and manifest["counts"]["train"]["total"] == 3
    assert "2 image(s) with the same bytes as another image (1 of them in both train/ and test/" in caplog.text
    assert "train/cat/0.png and test/cat/0.png" in caplog.text or "train/dog/0.png and train/dog/1.png" in caplog.text


@pytest.mark.parametrize("kind, fix", [("folder", "point data.path at .*tree/cifar"), ("zip", "rebuild the zip")])
def test_splits_one_folder_down_are_named_with_the_fix(tmp_path, kind, fix):
    path = source(tmp_path, kind, {f"cifar/{name}": raw for name, raw in DISTINCT.items()})
    prepare_fails(
        tmp_path, f"no images under train/<class>/, but the splits lie under cifar/ .*; {fix}", path=str(path)
    )


@pytest.mark.parametrize("kind", ["folder", "zip"])
@pytest.mark.parametrize("spelt", [{"train": "Train"}, {"test": "TEST"}, {"train": "Train", "test": "Test"}])
def test_split_folders_in_another_case_are_named_with_the_fix(tmp_path, kind, spelt):
    """Train/ and Test/ got the plain `no images under train/<class>/` line, with no word of the folder there."""
    members = {}
    for name, raw in DISTINCT.items():
        split, rest = name.split("/", 1)
        members[f"{spelt.get(split, split)}/{rest}"] = raw
    first = "train" if "train" in spelt else "test"
    wrong = spelt[first]
    path = source(tmp_path, kind, members)
    prepare_fails(
        tmp_path,
        rf"no images under {first}/<class>/, but there is {wrong}/: split folders are spelt in lower case "
        rf"\(rename {wrong}/ to {first}/\)",
        path=str(path),
    )
