"""The data stage: fetch or read CIFAR-10-shaped images and write a prepared dataset.

Prepared layout (one folder): train_images.npy, train_labels.npy, test_images.npy, test_labels.npy
(uint8 NHWC images, int64 labels; memory-mappable) and manifest.json (source, checksums, counts,
class names). No pickle is read from any source: the CIFAR-10 binary archive is parsed as
fixed-size records (cifar.py), image folders are decoded with Pillow (imagefolder.py).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from gpuscale.contract import fsutil
from gpuscale.contract.settings import DataSettings
from gpuscale.inputs.cifar import cifar10
from gpuscale.inputs.dataset import IMAGE_SHAPE, DataError, Dataset, _readable_error
from gpuscale.inputs.imagefolder import imagefolder

log = logging.getLogger("gpuscale.data")

ARRAY_FILES = ("train_images.npy", "train_labels.npy", "test_images.npy", "test_labels.npy")
MANIFEST_VERSION = 1


def synthetic(settings: DataSettings, train_size: int = 5000, test_size: int = 1000, num_classes: int = 10) -> Dataset:
    """Deterministic, class-separable CIFAR-shaped images: a smooth colour template per class plus noise.

    For offline smoke runs only; everything made from it is labelled synthetic.
    """
    rng = np.random.default_rng(12345)
    coarse = rng.uniform(0, 255, size=(num_classes, 4, 4, 3))
    templates = coarse.repeat(8, axis=1).repeat(8, axis=2)  # (classes, 32, 32, 3)

    def split(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        split_rng = np.random.default_rng(seed)
        labels = np.arange(count, dtype=np.int64) % num_classes
        split_rng.shuffle(labels)
        noise = split_rng.normal(0, 48, size=(count, *IMAGE_SHAPE))
        images = np.clip(templates[labels] * 0.7 + 40 + noise, 0, 255).astype(np.uint8)
        return images, labels

    return Dataset(
        *split(settings.train_size or train_size, 1),
        *split(settings.test_size or test_size, 2),
        classes=tuple(f"class{i}" for i in range(num_classes)),
        source={"generator": "gpuscale.data.synthetic", "generator_version": 1},
    )


def stratified_subset(labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    """Indices of `size` items with the classes as evenly represented as `size` allows; sorted."""
    if size >= len(labels):
        return np.arange(len(labels))
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    per_class = np.full(len(classes), size // len(classes))
    per_class[: size % len(classes)] += 1
    if np.any(per_class > counts):
        raise DataError(
            f"a stratified subset of {size} needs {per_class.max()} images of every class; some class has fewer "
            f"(lower data.train_size / data.test_size)"
        )
    chosen = [
        rng.choice(np.flatnonzero(labels == cls), take, replace=False)
        for cls, take in zip(classes, per_class, strict=True)
    ]
    return np.sort(np.concatenate(chosen))


SOURCES = {"cifar10": cifar10, "imagefolder": imagefolder, "synthetic": synthetic}


def prepare(settings: DataSettings | dict, out_dir: Path | str) -> dict:
    """Build the prepared dataset under out_dir (atomically) from data.* settings; return the manifest."""
    settings = DataSettings.of(settings)
    dataset = SOURCES[settings.source](settings)
    splits = {}
    for split, size in (("train", settings.train_size), ("test", settings.test_size)):
        images, labels = getattr(dataset, f"{split}_images"), getattr(dataset, f"{split}_labels")
        if size is not None and settings.source != "synthetic":
            if size > len(labels):  # never a manifest that names a size the data does not have
                raise DataError(
                    f"data.{split}_size: {size} is more than the {len(labels)} {split} images the source holds "
                    f"(lower it, or set it to null to use them all)"
                )
            keep = stratified_subset(labels, size, settings.subset_seed)
            images, labels = images[keep], labels[keep]
        splits[split] = (np.ascontiguousarray(images), labels.astype(np.int64))
    with fsutil.atomic_directory(out_dir) as tmp:
        files = {}
        for split, (images, labels) in splits.items():
            for name, array in ((f"{split}_images.npy", images), (f"{split}_labels.npy", labels)):
                np.save(tmp / name, array, allow_pickle=False)
                files[name] = {
                    "sha256": fsutil.sha256_file(tmp / name),
                    "shape": list(array.shape),
                    "dtype": str(array.dtype),
                }
        manifest = {
            "manifest_version": MANIFEST_VERSION,
            "source": settings.source,
            "synthetic": settings.source == "synthetic",
            "origin": dataset.source,
            "classes": list(dataset.classes),
            "counts": {
                split: {
                    "total": len(labels),
                    "per_class": {
                        dataset.classes[c]: int(n) for c, n in zip(*np.unique(labels, return_counts=True), strict=True)
                    },
                }
                for split, (_, labels) in splits.items()
            },
            "subset": {
                "train_size": settings.train_size,
                "test_size": settings.test_size,
                "seed": settings.subset_seed,
            },
            "files": files,
        }
        fsutil.write_json(tmp / "manifest.json", manifest)
    log.info(
        "prepared %s: %d train / %d test images, %d classes -> %s",
        settings.source,
        len(splits["train"][1]),
        len(splits["test"][1]),
        len(dataset.classes),
        out_dir,
    )
    return manifest


def _manifest_problem(manifest) -> str | None:
    """What makes a manifest unusable, or None."""
    if not isinstance(manifest, dict):
        return "is not a JSON object"
    for key, kind in (("files", dict), ("classes", list), ("origin", dict), ("counts", dict), ("source", str)):
        if not isinstance(manifest.get(key), kind):
            return f"has no valid {key!r}"
    if not isinstance(manifest.get("synthetic"), bool):
        return "has no valid 'synthetic'"
    for name in ARRAY_FILES:
        entry = manifest["files"].get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            return f"lists no checksum for {name}"
    for split in ("train", "test"):
        if not isinstance(manifest["counts"].get(split), dict) or not isinstance(
            manifest["counts"][split].get("total"), int
        ):
            return f"has no count of the {split} images"
    if not manifest["classes"] or not all(isinstance(c, str) for c in manifest["classes"]):
        return "lists no class names"
    return None


def load_prepared(directory: Path | str, verify: bool = True) -> tuple[Dataset, dict, str]:
    """Open a prepared dataset memory-mapped; with verify, check every array against the manifest.

    Returns (dataset, manifest, manifest sha256). Anything malformed (a manifest of the wrong shape, arrays of
    objects, wrong dtypes or shapes, labels out of range) is one DataError; nothing is ever unpickled.
    """
    directory = Path(directory)
    manifest_path = directory / "manifest.json"
    rerun = "run the data stage again (gpuscale data)"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # ValueError: bad JSON or not UTF-8
        why = getattr(err, "strerror", None) or type(err).__name__
        raise DataError(f"{manifest_path}: missing or unreadable ({why}); run the data stage (gpuscale data)") from None
    problem = _manifest_problem(manifest)
    if problem:
        raise DataError(f"{manifest_path}: {problem}, so it is not a gpuscale manifest; {rerun}")
    if verify:
        for name in ARRAY_FILES:
            expected = manifest["files"][name]["sha256"]
            path = directory / name
            if not path.exists() or fsutil.sha256_file(path) != expected:
                raise DataError(f"{path}: does not match its manifest (changed after preparation); {rerun}")
    arrays = {}
    for name in ARRAY_FILES:
        try:
            arrays[name] = np.load(directory / name, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:  # ValueError: object arrays (pickles) are refused
            raise DataError(
                f"{directory / name}: not a plain numeric array ({_readable_error(err)}); {rerun}"
            ) from None
    classes = len(manifest["classes"])
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images.npy"], arrays[f"{split}_labels.npy"]
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != IMAGE_SHAPE:
            raise DataError(
                f"{directory}/{split}_images.npy: {images.dtype} {images.shape}, expected uint8 (N, 32, 32, 3); {rerun}"
            )
        if labels.dtype.kind not in "iu" or labels.shape != (len(images),):
            raise DataError(
                f"{directory}/{split}_labels.npy: {labels.dtype} {labels.shape}, expected integers ({len(images)},); "
                f"{rerun}"
            )
        if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= classes):
            raise DataError(f"{directory}/{split}_labels.npy: labels outside 0-{classes - 1}; {rerun}")
    dataset = Dataset(
        arrays["train_images.npy"],
        arrays["train_labels.npy"],
        arrays["test_images.npy"],
        arrays["test_labels.npy"],
        classes=tuple(manifest["classes"]),
        source=manifest["origin"],
    )
    return dataset, manifest, fsutil.sha256_file(manifest_path)
