"""Image folders and zips of train/<class>/* and test/<class>/*: every member checked (unsafe names, links,
sizes, aliases, strays) before any is read, then decoded with Pillow to 32x32 RGB."""

from __future__ import annotations

import hashlib
import io
import logging
import unicodedata
import warnings
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuscale.contract.settings import DataSettings
from gpuscale.inputs.dataset import (
    IMAGE_SHAPE,
    MAX_ARCHIVE_BYTES,
    MAX_MEMBER_BYTES,
    DataError,
    Dataset,
    _readable_error,
    _unsafe_name,
)

log = logging.getLogger("gpuscale.data")

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp"}
SPLITS = ("train", "test")


# What an OS or archiver leaves beside the images: never data, never a stray, counted as hidden. Dot files
# (.DS_Store, ._name resource forks, .git) are hidden too; macOS zips put resource forks under __MACOSX/.
HIDDEN_NAMES = {"__MACOSX", "Thumbs.db", "desktop.ini"}


# Larger images are refused before they are decoded (a small file can declare a huge canvas).
MAX_IMAGE_PIXELS = 4096 * 4096
MODE_WORDS = {
    "1": "1-bit black and white",
    "L": "grayscale",
    "LA": "grayscale with alpha",
    "La": "grayscale with alpha",
    "P": "palette",
    "PA": "palette with alpha",
    "RGBA": "RGB with alpha",
    "RGBa": "RGB with alpha",
    "RGBX": "RGB with padding",
    "CMYK": "CMYK",
    "YCbCr": "YCbCr",
    "LAB": "Lab",
    "HSV": "HSV",
    "I": "32-bit integer grayscale",
    "I;16": "16-bit grayscale",
    "I;16B": "16-bit grayscale",
    "I;16L": "16-bit grayscale",
    "I;16N": "16-bit grayscale",
    "F": "32-bit float grayscale",
}


# The manifest origin's key for what it counts (present only where there are any).
LEFT_OUT_KEYS = {"hidden_files": "hidden", "repeated_members": "repeated", "identical_images": "identical"}
SIXTEEN_BIT_MODES = {"I;16", "I;16B", "I;16L", "I;16N", "I"}


@dataclass(frozen=True)
class _Member:
    """A file or folder of an image folder or zip: its '/'-separated name under the root and how to read it."""

    name: str
    is_dir: bool
    read: Callable[[], bytes] | None = None
    identity: tuple | None = None  # a zip member's (CRC, size): an identical repeat from a different one


@dataclass(frozen=True)
class _Image:
    split: str
    cls: str  # the class name in NFC, the same however the file system or zip spelt it
    name: str  # as found: what messages name
    read: Callable[[], bytes]


def _parts(name: str) -> list[str]:
    """'train\\cat/./0.png' -> ['train', 'cat', '0.png']: zips made on Windows use backslashes."""
    return [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]


def _hidden(parts: list[str]) -> bool:
    return any(p.startswith(".") or p in HIDDEN_NAMES for p in parts)


def _fold(text: str) -> str:
    """One spelling for names a case-insensitive or normalising file system (macOS, Windows) takes as one."""
    return unicodedata.normalize("NFC", text).casefold()


def _split_class(name: str) -> tuple[str, str, str] | None:
    """'train/cat/0001.png' -> ('train', 'cat', '0001.png'); None for anything else."""
    parts = _parts(name)
    if len(parts) != 3 or parts[0] not in SPLITS:
        return None
    return parts[0], parts[1], parts[2]


def _stray(name: str, is_dir: bool) -> str | None:
    """Why a path under train/ or test/ is not read as an image of a class, or None (it is, or lies elsewhere)."""
    parts = _parts(name)
    if not parts or parts[0] not in SPLITS or _hidden(parts):
        return None  # outside the splits (a README beside them), or hidden (.DS_Store): not part of the data
    if len(parts) == 2 and not is_dir:
        return "is a file where class folders belong (train/<class>/, test/<class>/)"
    if len(parts) > 3 and not is_dir:
        return f"lies in a sub-folder of class folder {parts[0]}/{parts[1]}/ (images are read one level deep only)"
    return None


def _decode(raw: bytes, name: str, mode: str, converted: list[str]) -> np.ndarray:
    """32x32 RGB as uint8 HWC. mode `strict` refuses anything else before decoding it; `convert` resizes and
    converts it (16-bit scaled to 8, alpha dropped, palettes expanded) and notes what it did in `converted`."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow's palette and size warnings: the checks here say it in one line
            with Image.open(io.BytesIO(raw)) as image:
                width, height = image.size
                if (width, height) == IMAGE_SHAPE[:2] and image.mode == "RGB":
                    image.load()
                    return np.asarray(image, dtype=np.uint8)
                words = f" ({image.mode} is {MODE_WORDS[image.mode]})" if image.mode in MODE_WORDS else ""
                if mode == "strict":
                    raise DataError(
                        f"{name}: image is {width}x{height} {image.mode}, expected 32x32 RGB{words}; fix the file, "
                        f"or set data.image_mode: convert to resize and convert it"
                    )
                if width * height > MAX_IMAGE_PIXELS:
                    raise DataError(
                        f"{name}: image is {width}x{height}, far above a 32x32 image; refused before decoding "
                        f"(resize it, or remove it)"
                    )
                image.load()
                converted.append(MODE_WORDS.get(image.mode, image.mode) if image.mode != "RGB" else "resized")
                return _to_rgb32(image)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise DataError(f"{name}: not a readable image ({_readable_error(err)}); remove or replace it") from None


def _to_rgb32(image) -> np.ndarray:
    from PIL import Image

    if image.mode in SIXTEEN_BIT_MODES:
        # Pillow's convert clips 16-bit values at 255 (most of such an image turns white): keep the top 8 bits.
        values = np.clip(np.asarray(image).astype(np.int64), 0, 65535) >> 8
        image = Image.fromarray(values.astype(np.uint8), "L")
    elif image.mode in ("P", "PA"):
        image = image.convert("RGBA")  # a palette's transparency, then dropped like any alpha
    image = image.convert("RGB")
    if image.size != IMAGE_SHAPE[:2]:
        image = image.resize(IMAGE_SHAPE[:2], Image.Resampling.BICUBIC)
    return np.asarray(image, dtype=np.uint8)


def _folder_members(root: Path) -> list[_Member]:
    """Every file and folder under root (links under train/ and test/ refused: a linked class folder would
    otherwise look empty, a linked image come from anywhere)."""
    members = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        parts = _parts(rel)
        if parts[0] in SPLITS and not _hidden(parts) and (path.is_symlink() or not (path.is_file() or path.is_dir())):
            raise DataError(
                f"{path}: refused: not a regular file or folder (a link or special file) in the image folder; "
                f"copy the file or folder itself in"
            )
        members.append(_Member("/".join(parts), path.is_dir() and not path.is_symlink(), path.read_bytes))
    return members


def _zip_members(root: Path) -> list[_Member]:
    """Every member of a zip, checked before any is read: unsafe names, links and oversized members refused."""
    try:
        archive = zipfile.ZipFile(root)
    except (zipfile.BadZipFile, OSError) as err:
        raise DataError(f"data.path: {root} is neither a folder nor a readable .zip ({err})") from None
    infos = archive.infolist()
    for info in infos:
        if _unsafe_name(info.filename):
            raise DataError(
                f"{root}: refused: member {info.filename!r} has an unsafe path (.. or absolute); nothing was extracted"
            )
        if (info.external_attr >> 16) & 0o170000 == 0o120000:
            raise DataError(f"{root}: refused: member {info.filename!r} is a symbolic link")
        if info.file_size > MAX_MEMBER_BYTES:
            raise DataError(
                f"{root}: refused: member {info.filename!r} declares {info.file_size} bytes, far above a 32x32 image"
            )
    if sum(i.file_size for i in infos) > MAX_ARCHIVE_BYTES:
        raise DataError(
            f"{root}: refused: members declare more than {MAX_ARCHIVE_BYTES} bytes in all, far above CIFAR-10"
        )
    return [
        _Member(
            "/".join(_parts(info.filename)),
            info.is_dir(),
            lambda info=info: _read_member(root, archive, info),
            (info.CRC, info.file_size),
        )
        for info in sorted(infos, key=lambda i: (_parts(i.filename), i.header_offset))
        if _parts(info.filename)
    ]


def _once(root: Path, members: list[_Member]) -> tuple[list[_Member], list[str]]:
    """Each member once: a zip can hold one name twice (appended to, or `train\\cat\\0.png` beside
    `train/cat/0.png`). A repeat with the same contents (CRC and size) is counted once; a different one refused."""
    first: dict[tuple[str, bool], _Member] = {}
    repeated = []
    for member in members:
        key = (member.name, member.is_dir)
        if key not in first:
            first[key] = member
        elif member.is_dir or _same_bytes(member, first[key]):
            repeated.append(member.name)
        else:
            raise DataError(
                f"{root}: member {member.name} appears twice with different contents (a zip appended to, or built "
                f"from two folders); rebuild the zip with each file once"
            )
    return list(first.values()), repeated


def _same_bytes(member: _Member, other: _Member) -> bool:
    """Whether two members of one name hold the same bytes: a zip's CRC and size, else (a folder's file named
    `train\\cat\\0.png` on Linux) the bytes themselves."""
    if member.identity is not None and other.identity is not None:
        return member.identity == other.identity
    return member.read() == other.read()


def _entries(root: Path) -> tuple[list[_Image], set[tuple[str, str]], list[tuple[str, str]], dict[str, list[str]]]:
    """The images under train/<class>/ and test/<class>/ of a folder or zip (any file there, image or not),
    the (split, class) folders seen (to find empty classes), the stray files under train/ and test/ with why
    they are not read, and what was left out ({"hidden": names, "repeated": names}). Nothing is ever
    extracted; unsafe names, links and oversized members are refused before any is read; two names that are
    one file on macOS or Windows (case, Unicode normalisation) are refused, naming both.
    """
    members, repeated = _once(root, _folder_members(root) if root.is_dir() else _zip_members(root))
    images, folders, strays, hidden, cased = [], set(), [], [], set()
    for member in members:
        parts = _parts(member.name)
        if parts and parts[0] not in SPLITS and parts[0].lower() in SPLITS:
            cased.add(parts[0])  # a split spelt in another case (Train/, TEST/): read as neither, named in the refusal
        in_split = len(parts) >= 2 and parts[0] in SPLITS and not _hidden(parts[:2])
        if in_split and (len(parts) >= 3 or member.is_dir):  # train/README.txt is a stray file, not a class
            folders.add((parts[0], parts[1]))
        if _hidden(parts):
            if not member.is_dir:
                hidden.append(member.name)
            continue
        why = _stray(member.name, member.is_dir)
        if why:
            strays.append((member.name, why))
        elif in_split and len(parts) == 3 and not member.is_dir:
            cls = unicodedata.normalize("NFC", parts[1])
            images.append(_Image(parts[0], cls, f"{parts[0]}/{parts[1]}/{parts[2]}", member.read))
    _refuse_aliases(root, images, folders)
    # A source whose splits lie one folder down (a zip of the folder rather than of its contents).
    nested = [m.name for m in members if len(_parts(m.name)) >= 4 and _parts(m.name)[1] in SPLITS]
    nested = [n for n in nested if not _hidden(_parts(n))]
    left_out = {"hidden": hidden, "repeated": repeated, "nested": nested, "cased": sorted(cased)}
    return images, folders, strays, left_out


def _refuse_aliases(root: Path, images: list[_Image], folders: set[tuple[str, str]]) -> None:
    """Two class folders, or two images of a class, whose names differ only in case or Unicode normalisation
    (NFC/NFD: what macOS and other systems write for one accented name) are one name on macOS and Windows:
    which one is meant cannot be told, so both are named and neither is read."""
    seen: dict[tuple, str] = {}
    for split, cls in sorted(folders):
        key = (split, _fold(cls))
        if key in seen:
            raise DataError(f"{root}: class folders {seen[key]}/ and {split}/{cls}/ {_alias_words(seen[key], cls)}")
        seen[key] = f"{split}/{cls}"
    seen = {}
    for image in images:
        key = (image.split, _fold(image.cls), _fold(_parts(image.name)[2]))
        if key in seen:
            raise DataError(f"{root}: {seen[key]} and {image.name} {_alias_words(seen[key], image.name)}")
        seen[key] = image.name


def _alias_words(first: str, second: str) -> str:
    nfc = unicodedata.normalize("NFC", first.rsplit("/", 1)[-1]) == unicodedata.normalize(
        "NFC", second.rsplit("/", 1)[-1]
    )
    how = "are one name in two Unicode normalisations (NFC, NFD)" if nfc else "differ only in case"
    return f"{how}, one file on macOS and Windows; rename or remove one of them"


def _read_member(root: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A zip member's bytes, never more than it declares; a corrupt member (bad CRC, wrong size) is one line."""
    try:
        with archive.open(info) as handle:
            raw = handle.read(info.file_size + 1)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError, RuntimeError) as err:
        raise DataError(
            f"{root}: member {info.filename} is corrupt ({_readable_error(err)}); repair or rebuild the zip"
        ) from None
    if len(raw) != info.file_size:
        raise DataError(
            f"{root}: member {info.filename} holds {'more' if len(raw) > info.file_size else 'less'} data than "
            f"the {info.file_size} bytes it declares; the zip is corrupt (repair or rebuild it)"
        )
    return raw


def imagefolder(settings: DataSettings) -> Dataset:
    """A folder or .zip of train/<class>/* and test/<class>/*, checked, then decoded to 32x32 RGB."""
    root = _imagefolder_root(settings)
    mode = settings.image_mode
    found, folders, strays, left_out = _entries(root)
    images = [i for i in found if Path(i.name).suffix.lower() in IMAGE_SUFFIXES]
    others = [i.name for i in found if Path(i.name).suffix.lower() not in IMAGE_SUFFIXES]
    _refuse_or_skip_strays(root, mode, others, strays)
    classes = _imagefolder_classes(root, images, folders, left_out["nested"], left_out["cased"])
    arrays, converted, identical = _decode_splits(root, images, classes, mode)
    # Said once the source is read whole, so that a source refused later ends in its one line alone.
    leaked = sum(n.startswith("train/") and " and test/" in n for n in identical)
    for what, names in (
        ("file(s) outside train/<class>/ and test/<class>/ skipped (data.image_mode: convert)", [s for s, _ in strays]),
        ("hidden file(s) (dot files, ._ resource forks, __MACOSX/)", left_out["hidden"]),
        ("repeated zip member(s) with identical contents, each read once", left_out["repeated"]),
        (
            f"image(s) with the same bytes as another image ({leaked} of them in both train/ and test/: the test "
            f"split is not unseen there), kept",
            identical,
        ),
    ):
        if names:
            log.warning("%s: %d %s, e.g. %s", root, len(names), what, names[0])
    if converted:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(Counter(k for k, _ in converted).items()))
        log.warning(
            "%d image(s) resized or converted to 32x32 RGB (data.image_mode: convert; %s), e.g. %s",
            len(converted),
            kinds,
            converted[0][1],
        )
    source = {
        "path": str(root),
        "image_mode": mode,
        "converted_images": len(converted),
        "skipped_files": len(others) + len(strays),
    }
    # Only where there were any: the manifest of a source without them stays what earlier versions wrote.
    left_out["identical"] = identical
    source.update({key: len(left_out[what]) for key, what in LEFT_OUT_KEYS.items() if left_out[what]})
    return Dataset(*arrays["train"], *arrays["test"], classes=tuple(classes), source=source)


def _imagefolder_root(settings: DataSettings) -> Path:
    if not settings.path:
        raise DataError(
            "data.path: required for data.source: imagefolder (a folder or .zip with train/<class>/*, test/<class>/*)"
        )
    root = Path(settings.path)
    if not root.exists():
        raise DataError(f"data.path: {root} does not exist (a folder or .zip with train/<class>/*, test/<class>/*)")
    return root


def _refuse_or_skip_strays(root: Path, mode: str, others: list[str], strays: list) -> None:
    """Non-images and files outside train/<class>/, test/<class>/: refused in strict mode, skipped in convert."""
    if others and mode == "strict":
        raise DataError(
            f"{root}: {others[0]} is not an image file (png, jpg, jpeg, bmp, webp); remove it, "
            f"or set data.image_mode: convert to skip such files"
        )
    if strays and mode == "strict":
        name, why = strays[0]
        raise DataError(
            f"{root}: {name} {why}; move or remove it, or set data.image_mode: convert to skip such files "
            f"({len(strays)} in all)"
        )


def _imagefolder_classes(
    root: Path, images: list[_Image], folders, nested: list[str] = (), cased: list[str] = ()
) -> list[str]:
    """The class names, the same in both splits, none of them empty. A class in one split only is refused,
    naming it: the test accuracy of a class never tested, or never trained, means nothing. A split folder
    spelt in another case (`Train/`) is named with the fix: names are read as they are on every system."""
    held = {(i.split, i.cls) for i in images}
    empty = sorted(f"{s}/{c}" for s, c in folders if (s, unicodedata.normalize("NFC", c)) not in held)
    if empty:
        raise DataError(f"{root}: class folder {empty[0]}/ holds no images (add images or remove the folder)")
    classes = {split: sorted({i.cls for i in images if i.split == split}) for split in SPLITS}
    wrong = [(split, c) for split in SPLITS if not classes[split] for c in cased if c.lower() == split]
    if wrong:
        split, name = wrong[0]
        raise DataError(
            f"{root}: no images under {split}/<class>/, but there is {name}/: split folders are spelt in "
            f"lower case (rename {name}/ to {split}/)"
        )
    if not classes["train"] and nested:
        top = _parts(nested[0])[0]
        fix = (
            f"point data.path at {root / top}" if root.is_dir() else "rebuild the zip with train/ and test/ at its top"
        )
        raise DataError(f"{root}: no images under train/<class>/, but the splits lie under {top}/ ({nested[0]}); {fix}")
    if not classes["train"]:
        raise DataError(f"{root}: no images under train/<class>/ (expected train/<class>/*.png|jpg and test/<class>/*)")
    if not classes["test"]:
        raise DataError(f"{root}: no images under test/<class>/ (a test split is required)")
    if classes["train"] != classes["test"]:
        only = {split: sorted(set(classes[split]) - set(classes[other])) for split, other in (SPLITS, SPLITS[::-1])}
        for a in only["train"]:
            for b in only["test"]:
                if _fold(a) == _fold(b):
                    raise DataError(
                        f"{root}: train and test classes differ: train/{a}/ and test/{b}/ differ only in case; "
                        f"name them alike"
                    )
        split = "train" if only["train"] else "test"
        other = "test" if split == "train" else "train"
        name = only[split][0]
        raise DataError(
            f"{root}: train and test classes differ: class {name!r} has images under {split}/ but none under "
            f"{other}/ ({len(only[split])} such class(es)); add {other}/{name}/ images, or remove {split}/{name}/"
        )
    return classes["train"]


def _decode_splits(root: Path, images: list[_Image], classes: list[str], mode: str) -> tuple[dict, list, list]:
    """{split: (uint8 images, int64 labels)}, (kind, name) of each image that had to be converted, and
    'second = first' for each image whose bytes an earlier one holds (a copy under another name, or a test
    image that is also a train image)."""
    index = {cls: i for i, cls in enumerate(classes)}
    arrays, converted, identical, first = {}, [], [], {}
    for split in SPLITS:
        chosen = [i for i in images if i.split == split]
        pixels = np.empty((len(chosen), *IMAGE_SHAPE), dtype=np.uint8)
        labels = np.empty(len(chosen), dtype=np.int64)
        for n, image in enumerate(chosen):
            name = f"{root}:{image.name}"
            kinds: list[str] = []
            raw = image.read()
            pixels[n] = _decode(raw, name, mode, kinds)
            converted += [(kind, name) for kind in kinds]
            labels[n] = index[image.cls]
            digest = hashlib.sha256(raw).digest()
            if digest in first:
                identical.append(f"{first[digest]} and {image.name}")
            first.setdefault(digest, image.name)
        arrays[split] = (pixels, labels)
    return arrays, converted, identical
