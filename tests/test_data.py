import hashlib
import io
import zipfile

import numpy as np
import pytest
from conftest import cifar_archive, data_settings
from PIL import Image

from gpuscale.inputs import cifar, data
from gpuscale.inputs.data import DataError


def md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_binary_records_parse_to_nhwc_images_and_labels(tmp_path):
    archive, images, labels = cifar_archive(tmp_path / "cifar-10-binary.tar.gz")
    manifest = data.prepare(data_settings(source="cifar10", path=str(archive), md5=md5(archive)), tmp_path / "out")
    dataset, _, _ = data.load_prepared(tmp_path / "out")
    assert dataset.train_images.shape == (100, 32, 32, 3)
    np.testing.assert_array_equal(dataset.train_images, images)
    np.testing.assert_array_equal(dataset.train_labels, labels)
    assert dataset.classes == cifar.CIFAR_CLASSES
    assert manifest["counts"]["test"]["total"] == 20
    assert manifest["synthetic"] is False


def test_one_record_reads_red_green_blue_planes():
    record = bytes([7]) + bytes([10] * 1024 + [20] * 1024 + [30] * 1024)
    images, labels = cifar.parse_cifar_batch(record, "one")
    assert labels.tolist() == [7]
    assert images[0, 5, 9].tolist() == [10, 20, 30]


def test_truncated_batch_is_refused():
    with pytest.raises(DataError, match="whole number"):
        cifar.parse_cifar_batch(b"\x00" * 100, "short")


def test_md5_mismatch_on_given_archive_is_refused(tmp_path):
    archive, _, _ = cifar_archive(tmp_path / "a.tar.gz")
    with pytest.raises(DataError, match="does not match data.md5"):
        data.prepare(data_settings(source="cifar10", path=str(archive), md5="f" * 32), tmp_path / "out")
    assert archive.exists()  # a file the user named is never deleted
    assert not (tmp_path / "out").exists()


def test_downloaded_archive_with_wrong_md5_is_removed(tmp_path, monkeypatch):
    archive, _, _ = cifar_archive(tmp_path / "served.tar.gz")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="was removed"):
        data.prepare(data_settings(source="cifar10", url=archive.as_uri(), md5="f" * 32), tmp_path / "out")
    assert not (tmp_path / "data/raw/cifar-10-binary.tar.gz").exists()


def test_download_then_verify_then_parse(tmp_path, monkeypatch):
    archive, images, _ = cifar_archive(tmp_path / "served.tar.gz")
    monkeypatch.chdir(tmp_path)
    data.prepare(data_settings(source="cifar10", url=archive.as_uri(), md5=md5(archive)), tmp_path / "out")
    assert (tmp_path / "data/raw/cifar-10-binary.tar.gz").read_bytes() == archive.read_bytes()
    dataset, _, _ = data.load_prepared(tmp_path / "out")
    np.testing.assert_array_equal(dataset.train_images, images)


def test_no_network_fails_naming_the_other_sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as err:
        data.prepare(data_settings(source="cifar10", url="http://no-such-host.invalid/c.tar.gz"), tmp_path / "out")
    message = str(err.value)
    assert "imagefolder" in message and "synthetic" in message and "data/raw" in message


def _png(colour) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def _image_tree(classes=("cat", "dog"), per_class=3):
    for split in ("train", "test"):
        for c, cls in enumerate(classes):
            for i in range(per_class):
                yield f"{split}/{cls}/{i:04d}.png", _png((40 * c, 10 * i, 200))


def test_imagefolder_from_directory(tmp_path):
    for name, raw in _image_tree():
        (tmp_path / "tree" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tree" / name).write_bytes(raw)
    manifest = data.prepare(data_settings(source="imagefolder", path=str(tmp_path / "tree")), tmp_path / "out")
    dataset, _, _ = data.load_prepared(tmp_path / "out")
    assert manifest["classes"] == ["cat", "dog"]
    assert dataset.train_images.shape == (6, 32, 32, 3)
    assert dataset.train_labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert dataset.train_images[3, 0, 0].tolist() == [40, 0, 200]


def test_imagefolder_from_zip_matches_directory(tmp_path):
    with zipfile.ZipFile(tmp_path / "tree.zip", "w") as archive:
        for name, raw in _image_tree():
            archive.writestr(name, raw)
            (tmp_path / "tree" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "tree" / name).write_bytes(raw)
    data.prepare(data_settings(source="imagefolder", path=str(tmp_path / "tree.zip")), tmp_path / "a")
    data.prepare(data_settings(source="imagefolder", path=str(tmp_path / "tree")), tmp_path / "b")
    a, _, _ = data.load_prepared(tmp_path / "a")
    b, _, _ = data.load_prepared(tmp_path / "b")
    np.testing.assert_array_equal(a.train_images, b.train_images)
    np.testing.assert_array_equal(a.test_labels, b.test_labels)


def test_imagefolder_with_different_class_sets_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as archive:
        archive.writestr("train/cat/0.png", _png((1, 2, 3)))
        archive.writestr("test/dog/0.png", _png((1, 2, 3)))
    with pytest.raises(DataError, match="differ"):
        data.prepare(data_settings(source="imagefolder", path=str(tmp_path / "bad.zip")), tmp_path / "out")


def test_synthetic_is_deterministic_and_labelled(tmp_path):
    first = data.prepare(data_settings(train_size=300, test_size=60), tmp_path / "a")
    second = data.prepare(data_settings(train_size=300, test_size=60), tmp_path / "b")
    assert first == second
    assert first["synthetic"] is True
    assert (tmp_path / "a/manifest.json").read_bytes() == (tmp_path / "b/manifest.json").read_bytes()


def test_synthetic_classes_are_separable_by_mean_colour(tmp_path):
    data.prepare(data_settings(train_size=500, test_size=100), tmp_path / "out")
    dataset, _, _ = data.load_prepared(tmp_path / "out")
    features = dataset.train_images.reshape(500, 4, 8, 4, 8, 3).mean(axis=(2, 4)).reshape(500, -1)
    centroids = np.stack([features[dataset.train_labels == c].mean(0) for c in range(10)])
    test = dataset.test_images.reshape(100, 4, 8, 4, 8, 3).mean(axis=(2, 4)).reshape(100, -1)
    predicted = np.argmin(((test[:, None] - centroids[None]) ** 2).sum(-1), axis=1)
    assert (predicted == dataset.test_labels).mean() > 0.9


def test_stratified_subset_keeps_classes_balanced():
    labels = np.repeat(np.arange(10), 50)
    keep = data.stratified_subset(labels, 95, seed=3)
    counts = np.bincount(labels[keep], minlength=10)
    assert counts.sum() == 95 and counts.max() - counts.min() <= 1
    assert np.array_equal(keep, np.sort(keep))
    np.testing.assert_array_equal(keep, data.stratified_subset(labels, 95, seed=3))


def test_subset_applied_to_real_source(tmp_path):
    archive, _, _ = cifar_archive(tmp_path / "a.tar.gz", per_batch=40)
    manifest = data.prepare(
        data_settings(source="cifar10", path=str(archive), md5=md5(archive), train_size=50, test_size=20),
        tmp_path / "out",
    )
    assert manifest["counts"]["train"]["total"] == 50
    assert set(manifest["counts"]["test"]["per_class"].values()) == {2}


def test_changed_prepared_data_is_detected(tmp_path):
    data.prepare(data_settings(train_size=100, test_size=20), tmp_path / "out")
    images = np.load(tmp_path / "out/train_images.npy")
    images[0, 0, 0, 0] ^= 1
    np.save(tmp_path / "out/train_images.npy", images)
    with pytest.raises(DataError, match="changed after preparation"):
        data.load_prepared(tmp_path / "out")


def test_prepared_arrays_are_memory_mapped(tmp_path):
    data.prepare(data_settings(train_size=100, test_size=20), tmp_path / "out")
    dataset, _, _ = data.load_prepared(tmp_path / "out", verify=False)
    assert isinstance(dataset.train_images, np.memmap)
    assert dataset.train_images.dtype == np.uint8
