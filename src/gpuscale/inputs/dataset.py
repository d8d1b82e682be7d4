"""What every source of the data stage gives (a Dataset of uint8 CIFAR-shaped images) or raises (DataError), and
the limits and name checks the archive readers share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IMAGE_SHAPE = (32, 32, 3)


# No CIFAR-sized image needs more than this, nor a whole image folder more than that: larger declared
# sizes are refused before anything is decompressed (decompression bombs).
MAX_MEMBER_BYTES = 16 * 1024 * 1024
MAX_ARCHIVE_BYTES = 4 * 1024 * 1024 * 1024


class DataError(RuntimeError):
    """A dataset problem; str() says the cause and the fix in one or two lines."""


@dataclass
class Dataset:
    train_images: np.ndarray  # uint8 (N, 32, 32, 3)
    train_labels: np.ndarray  # int64 (N,)
    test_images: np.ndarray
    test_labels: np.ndarray
    classes: tuple[str, ...]
    source: dict  # what the manifest says of where it came from


def _unsafe_name(name: str) -> bool:
    parts = name.replace("\\", "/").split("/")
    return name.startswith(("/", "\\")) or ".." in parts or (len(name) > 1 and name[1] == ":")


def _readable_error(err: BaseException) -> str:
    """An error's text without the in-memory object Pillow names (<_io.BytesIO object at 0x...>)."""
    import re

    text = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-f]+>", "", str(err)).strip() or type(err).__name__
    return "unknown or corrupt image format" if text.startswith("cannot identify image file") else text
