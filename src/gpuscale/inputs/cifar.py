"""The CIFAR-10 binary archive: downloaded with resume and retries, checked, parsed as fixed-size records (no
pickle is read)."""

from __future__ import annotations

import http.client
import logging
import tarfile
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import numpy as np

from gpuscale.contract import fsutil
from gpuscale.contract.settings import DataSettings
from gpuscale.inputs.dataset import MAX_ARCHIVE_BYTES, DataError, Dataset, _unsafe_name

log = logging.getLogger("gpuscale.data")

CIFAR_RECORD_BYTES = 1 + 32 * 32 * 3
CIFAR_RECORDS_PER_BATCH = 10_000
CIFAR_TRAIN_MEMBERS = tuple(f"cifar-10-batches-bin/data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST_MEMBER = "cifar-10-batches-bin/test_batch.bin"
CIFAR_META_MEMBER = "cifar-10-batches-bin/batches.meta.txt"
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
DEFAULT_ARCHIVE = Path("data/raw/cifar-10-binary.tar.gz")
NO_NETWORK_MESSAGES = (
    "Name or service not known",
    "Temporary failure in name resolution",
    "No address associated",
    "Network is unreachable",
)


def parse_cifar_batch(raw: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 binary batch: records of 1 label byte + 3072 bytes (R, G, B planes of 32x32)."""
    if len(raw) % CIFAR_RECORD_BYTES:
        raise DataError(
            f"{name}: {len(raw)} bytes is not a whole number of {CIFAR_RECORD_BYTES}-byte records; "
            f"the archive is corrupt (delete it and download again)"
        )
    records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, CIFAR_RECORD_BYTES)
    labels = records[:, 0].astype(np.int64)
    if labels.max(initial=0) >= len(CIFAR_CLASSES):
        raise DataError(
            f"{name}: label {labels.max()} out of range 0-9; the archive is corrupt (delete it and download again)"
        )
    images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def _cifar_members(archive: Path, listed: list[tarfile.TarInfo]) -> dict[str, tarfile.TarInfo]:
    """The tar's members by name, each wanted batch there once; unsafe members and declared bombs refused."""
    members = {m.name: m for m in listed}
    for member in listed:
        if _unsafe_name(member.name) or not (member.isfile() or member.isdir()):
            kind = "link" if member.issym() or member.islnk() else "special file" if not member.isfile() else "path"
            raise DataError(
                f"{archive}: refused: member {member.name!r} is an unsafe {kind} (.., absolute, link or "
                f"device); nothing was extracted. Use the official cifar-10-binary.tar.gz"
            )
    if sum(m.size for m in listed) > MAX_ARCHIVE_BYTES:
        raise DataError(f"{archive}: refused: members declare more than {MAX_ARCHIVE_BYTES} bytes, far above CIFAR-10")
    wanted = CIFAR_TRAIN_MEMBERS + (CIFAR_TEST_MEMBER,)
    repeated = [name for name in wanted if sum(m.name == name for m in listed) > 1]
    if repeated:  # tarfile keeps the last copy of a name: which batch would be read cannot be told
        raise DataError(
            f"{archive}: member {repeated[0]} appears more than once (an archive appended to); replace it with "
            f"the official cifar-10-binary.tar.gz"
        )
    missing = [name for name in wanted if name not in members]
    if missing:
        raise DataError(
            f"{archive}: not the CIFAR-10 binary archive (missing {missing[0]}); expected cifar-10-binary.tar.gz"
        )
    return members


def read_cifar_archive(archive: Path) -> Dataset:
    try:
        tar = tarfile.open(archive, mode="r:gz")  # noqa: SIM115 (closed by the `with tar:` below)
    except (tarfile.TarError, OSError, EOFError) as err:
        raise DataError(f"{archive}: not a readable .tar.gz ({err}); delete it and download again") from None
    with tar:
        try:
            listed = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
            raise DataError(
                f"{archive}: cannot list the archive ({err or type(err).__name__}); it is truncated or corrupt "
                f"(replace it with the official cifar-10-binary.tar.gz)"
            ) from None
        members = _cifar_members(archive, listed)

        def read(name: str) -> bytes:
            member = members[name]
            # Members are read into memory, never extracted, so no path in the archive can write anywhere.
            if not member.isfile() or not 0 < member.size <= CIFAR_RECORD_BYTES * CIFAR_RECORDS_PER_BATCH:
                raise DataError(
                    f"{archive}: member {name} is not a file of at most {CIFAR_RECORDS_PER_BATCH} records; "
                    f"the archive is corrupt"
                )
            try:
                return tar.extractfile(member).read()
            except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
                raise DataError(
                    f"{archive}: cannot read {name} ({err}); the archive is corrupt (delete it and download again)"
                ) from None

        train = [parse_cifar_batch(read(name), name) for name in CIFAR_TRAIN_MEMBERS]
        test_images, test_labels = parse_cifar_batch(read(CIFAR_TEST_MEMBER), CIFAR_TEST_MEMBER)
    train_labels = np.concatenate([labels for _, labels in train])
    for where, labels in (("the train batches", train_labels), (CIFAR_TEST_MEMBER, test_labels)):
        missing = [name for i, name in enumerate(CIFAR_CLASSES) if not np.any(labels == i)]
        if missing:  # as an image folder's class in one split only: accuracy over classes never trained or tested
            raise DataError(
                f"{archive}: class {missing[0]!r} has no image in {where} ({len(missing)} of {len(CIFAR_CLASSES)} "
                f"classes missing there); not the official archive: replace it with cifar-10-binary.tar.gz"
            )
    return Dataset(
        train_images=np.concatenate([images for images, _ in train]),
        train_labels=train_labels,
        test_images=test_images,
        test_labels=test_labels,
        classes=CIFAR_CLASSES,
        source={"archive": str(archive)},
    )


def download(url: str, dest: Path, timeout: float, retries: int) -> None:
    """Download with resume (HTTP Range on a .part file), retries with backoff and a progress bar."""
    from tqdm import tqdm

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    last_error: Exception | None = None
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(min(2**attempt, 30))
            log.info("retrying download (%d of %d)", attempt, retries)
        have = part.stat().st_size if part.exists() else 0
        request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                resumed = have and getattr(response, "status", 200) == 206
                if have and not resumed:
                    have = 0  # server ignored the range: start over
                length = response.headers.get("Content-Length")
                total = have + int(length) if length else None
                with (
                    open(part, "ab" if resumed else "wb") as handle,
                    tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=dest.name, mininterval=2.0) as bar,
                ):
                    while chunk := response.read(1 << 16):
                        handle.write(chunk)
                        bar.update(len(chunk))
            if total is not None and part.stat().st_size != total:
                raise http.client.IncompleteRead(b"", total - part.stat().st_size)
            part.replace(dest)
            return
        except urllib.error.HTTPError as err:
            last_error = err
            if err.code == 416:  # asked past the end: the .part is complete or bad; start over
                part.unlink(missing_ok=True)
            elif 400 <= err.code < 500 and err.code != 429:
                break
        except (urllib.error.URLError, OSError, TimeoutError, http.client.HTTPException) as err:
            last_error = err  # a cut-off transfer keeps its .part file: the next attempt resumes it
            if any(text in str(getattr(err, "reason", err)) for text in NO_NETWORK_MESSAGES):
                break  # no name resolution: no network, and retrying will not bring it
    raise DataError(
        f"cannot download {url} ({describe_error(last_error)}). Without network: place cifar-10-binary.tar.gz in "
        f"{dest.parent}/, or set data.source: imagefolder (data.path: a folder or .zip with train/<class>/*, "
        f"test/<class>/*) or data.source: synthetic in params.yaml"
    )


def describe_error(err: Exception | None) -> str:
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code} {err.reason}"
    if isinstance(err, urllib.error.URLError):
        return str(err.reason)
    return str(err) if err else "unknown error"


def cifar10(settings: DataSettings) -> Dataset:
    archive = Path(settings.path) if settings.path else DEFAULT_ARCHIVE
    if archive.is_dir():
        raise DataError(
            f"data.path: {archive} is a folder; give the cifar-10-binary.tar.gz archive itself (data.source: cifar10), "
            f"or an image folder with train/<class>/*, test/<class>/* (data.source: imagefolder)"
        )
    downloaded = False
    if not archive.exists():
        if settings.path:
            raise DataError(
                f"data.path: {archive} does not exist (point it at cifar-10-binary.tar.gz, "
                f"or set it to null to download)"
            )
        log.info("downloading %s to %s", settings.url, archive)
        download(settings.url, archive, settings.download_timeout_seconds, settings.download_retries)
        downloaded = True
    md5 = fsutil.md5_file(archive)
    if md5 != settings.md5:
        if downloaded:  # the project deletes only what it downloaded itself, in this very run
            archive.unlink()
            raise DataError(
                f"{archive}: downloaded, but its md5 {md5} does not match data.md5 {settings.md5}; the download "
                f"was removed, run again to download it anew"
            )
        raise DataError(
            f"{archive}: md5 {md5} does not match data.md5 {settings.md5}; the file was kept. If this copy is "
            f"trusted, set data.md5: {md5}; otherwise replace it with the official cifar-10-binary.tar.gz "
            f"(or point data.path at a trusted copy)"
        )
    dataset = read_cifar_archive(archive)
    dataset.source.update({"url": settings.url, "archive_md5": md5})
    return dataset
