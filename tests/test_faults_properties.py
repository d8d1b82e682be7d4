"""Property-based bad input (issue 16): generated params files and run records, valid and broken.

A valid one goes through; a broken one ends in exit code 2 and one line on stderr, never a traceback, never a
partial output. Bounded (a few dozen examples each, no training) so the suite stays fast in CI.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path

import pytest
import records as fixtures
import yaml
from conftest import REPO, TINY
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gpuscale import cli
from gpuscale.contract import params, record

BASE = params.deep_merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
BASE["report"]["reference"] = []
# Bounded and reproducible for CI: the same examples every run, no example database in the checkout, and no
# shrinking (a failure is reported as found; shrinking one can take minutes).
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
TEXT = st.text(st.characters(min_codepoint=1, blacklist_categories=("Cs",)), max_size=20)

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.floats(allow_nan=False), TEXT)
JUNK = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=6
)


def run_cli(argv, capsys) -> tuple[int, str]:
    try:
        code = cli.main(argv)
    except SystemExit as done:
        code = done.code
    finally:
        logging.getLogger().handlers.clear()
    return code, capsys.readouterr().err.strip()


def assert_one_line_exit_2(code: int, err: str) -> None:
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err and err.startswith("gpuscale "), err


def paths_of(tree, prefix=()) -> list[tuple]:
    """Every key path into nested dicts (the places a mutation can reach)."""
    out = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.append((*prefix, key))
            out += paths_of(value, (*prefix, key))
    return out


PATHS = paths_of(BASE)


def at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


# ----------------------------------------------------------------------------- params files


@st.composite
def valid_params(draw) -> dict:
    config = copy.deepcopy(BASE)
    config["train"]["epochs"] = draw(st.integers(1, 50))
    config["train"]["batch_size"] = draw(st.integers(1, 1024))
    config["study"]["label"] = draw(TEXT)
    config["study"]["seeds"] = draw(st.lists(st.integers(0, 2**31), min_size=1, max_size=3, unique=True))
    config["study"]["models"] = draw(
        st.lists(st.sampled_from(["simplecnn", "resnet18", "resnet50"]), min_size=1, max_size=3, unique=True)
    )
    config["study"]["devices"] = draw(
        st.lists(st.sampled_from(["cpu", "cuda", "cuda-1", "mps", "cuda-ddp2"]), min_size=1, max_size=3, unique=True)
    )
    return config


@st.composite
def broken_params(draw) -> bytes:
    """A params file broken in one of the ways a person breaks one."""
    kind = draw(
        st.sampled_from(["unknown key", "missing key", "wrong value", "yaml syntax", "not a mapping", "bytes", "deep"])
    )
    config = copy.deepcopy(BASE)
    if kind == "unknown key":
        path = draw(st.sampled_from([p for p in PATHS if isinstance(at(config, p), dict)] + [()]))
        key = draw(TEXT.filter(lambda k: k not in at(config, path) and k.strip()))
        at(config, path)[key] = draw(JUNK)
    elif kind == "missing key":
        path = draw(st.sampled_from([p for p in PATHS if len(p) <= 2 and p[0] != "models"]))
        del at(config, path[:-1])[path[-1]]
    elif kind == "wrong value":
        path = draw(
            st.sampled_from([p for p in PATHS if p[0] not in ("models",) and not isinstance(at(config, p), dict)])
        )
        old = at(config, path)
        value = draw(
            JUNK.filter(lambda v: type(v) is not type(old) and not (isinstance(old, list) and isinstance(v, list)))
        )
        at(config, path[:-1])[path[-1]] = value
    elif kind == "yaml syntax":
        text = yaml.safe_dump(config, sort_keys=False)
        cut = draw(st.integers(0, len(text)))
        broken = text[:cut] + draw(st.sampled_from([": : [", "\t- {", "]]", "key: 'open", "&a [*a"])) + text[cut:]
        try:  # inside a plain scalar (`url: https://...&a [*a...`) the insertion is still YAML, and a valid file
            yaml.safe_load(broken)
        except yaml.YAMLError:
            return broken.encode()
        return (text + "key: [unclosed\n").encode()
    elif kind == "not a mapping":
        return yaml.safe_dump(
            draw(
                st.one_of(
                    st.lists(SCALARS, min_size=1), st.integers(), TEXT.filter(lambda t: t.strip() and ":" not in t)
                )
            )
        ).encode()
    elif kind == "bytes":
        return draw(st.binary(min_size=1, max_size=60)) + b"\xff\xfe\x80"
    else:
        depth = draw(st.integers(1000, 50_000))
        return b"train: " + b"[" * depth + b"]" * depth + b"\n"
    try:  # some mutations leave a valid file (an optional key removed, a number where null is allowed)
        params.validate(copy.deepcopy(config))
    except params.ParamsError:
        return yaml.safe_dump(config, sort_keys=False, allow_unicode=True).encode()
    return b"train: {epochs: -1}\n"


@SETTINGS
@given(config=valid_params())
def test_a_valid_params_file_goes_through(tmp_path_factory, capsys, config):
    path = tmp_path_factory.mktemp("p") / "params.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    code, err = run_cli(["validate", "--params", str(path)], capsys)
    assert code == 0, err


@SETTINGS
@given(raw=broken_params(), command=st.sampled_from(["validate", "data", "aggregate", "train"]))
def test_a_broken_params_file_is_one_line_exit_2_and_writes_nothing(tmp_path_factory, capsys, raw, command):
    folder = tmp_path_factory.mktemp("p")
    path = folder / "params.yaml"
    path.write_bytes(raw)
    out = folder / "out"
    argv = [command, "--params", str(path)]
    if command != "validate":
        argv += ["--out", str(out)]
    if command == "aggregate":
        argv += ["--metrics", str(folder / "m.json")]
    if command == "train":
        argv += ["--model", "simplecnn", "--device", "cpu", "--data", str(folder / "prepared")]
    code, err = run_cli(argv, capsys)
    assert_one_line_exit_2(code, err)
    assert sorted(p.name for p in folder.iterdir()) == ["params.yaml"]  # no output, not even a partial one


# ----------------------------------------------------------------------------- run records


def valid_record(draw) -> dict:
    model = draw(st.sampled_from(["simplecnn", "resnet18", "resnet50"]))
    device = draw(st.sampled_from(["cpu", "cuda"]))
    seconds = draw(st.lists(st.floats(0.01, 1e5), min_size=2, max_size=5))
    rec = fixtures.make(model, device, seconds, accuracy=draw(st.floats(0, 1)), seed=draw(st.integers(0, 2**31)))
    rec["label"] = draw(TEXT)
    rec["environment"]["host"] = draw(TEXT.filter(str.strip))
    return rec


@st.composite
def records_folder(draw, broken: bool) -> list[bytes]:
    recs = [json.dumps(valid_record(draw), ensure_ascii=draw(st.booleans())).encode()]
    if broken:
        kind = draw(
            st.sampled_from(
                [
                    "missing key",
                    "wrong type",
                    "newer schema",
                    "truncated",
                    "bytes",
                    "not utf-8",
                    "deep",
                    "not an object",
                ]
            )
        )
        rec = valid_record(draw)
        if kind == "missing key":
            del rec[draw(st.sampled_from(sorted(rec)))]
        elif kind == "wrong type":
            key = draw(st.sampled_from(sorted(rec)))
            rec[key] = draw(JUNK.filter(lambda v: type(v) is not type(rec[key])))
            try:
                record.validate(rec)
            except record.RecordError:
                pass
            else:
                rec["schema_version"] = "x"
        elif kind == "newer schema":
            rec["schema_version"] = draw(st.integers(record.SCHEMA_VERSION + 1, 99))
        text = json.dumps(rec).encode()
        if kind == "truncated":
            text = text[: draw(st.integers(0, len(text) - 1))]
        elif kind == "bytes":
            text = draw(st.binary(max_size=80))
        elif kind == "not utf-8":
            text = b"\xff" + text
        elif kind == "deep":
            depth = draw(st.integers(1000, 100_000))
            text = b"[" * depth + b"]" * depth
        elif kind == "not an object":
            text = json.dumps(draw(st.lists(SCALARS, max_size=3))).encode()
        recs.append(text)
    return recs


def aggregate(folder: Path, blobs: list[bytes], capsys, skip_bad: bool = False) -> tuple[int, str, Path]:
    reference = Path("reference") / "generated"  # report.reference: a folder under reference/
    shutil.rmtree(reference, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    reference.mkdir(parents=True)
    folder.mkdir()
    for i, blob in enumerate(blobs):
        (reference / f"r{i}.json").write_bytes(blob)
    overlay = folder / "o.yaml"
    config = copy.deepcopy(BASE)
    config["report"].update(reference=[str(reference)], skip_bad_records=skip_bad)
    overlay.write_text(yaml.safe_dump(config, allow_unicode=True))
    out = folder / "tables"
    argv = ["aggregate", "--params", str(overlay), "--reference-only", "--out", str(out)]
    code, err = run_cli([*argv, "--metrics", str(folder / "metrics.json")], capsys)
    return code, err, out


@pytest.fixture
def chdir_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # report.reference must be a relative folder under the project
    return tmp_path


@settings(SETTINGS, max_examples=15)
@given(blobs=records_folder(broken=False))
def test_valid_records_aggregate(chdir_tmp, capsys, blobs):
    folder = Path("case")
    code, err, out = aggregate(folder, blobs, capsys)
    assert code == 0, err
    assert (out / "runs.parquet").exists()


@SETTINGS
@given(blobs=records_folder(broken=True), skip_bad=st.booleans())
def test_a_broken_record_of_a_reference_folder_is_skipped_with_one_line(chdir_tmp, capsys, blobs, skip_bad):
    """A reference folder is data from elsewhere: its broken record is skipped, named in one warning line, and
    listed in the notes whatever skip_bad_records says (issue 28; a broken record among the study's own results
    stops the stage: tests/test_faults_args.py::test_unreadable_records_are_one_line_or_skipped)."""
    folder = Path("case")
    code, err, out = aggregate(folder, blobs, capsys, skip_bad)
    assert code == 0, err
    notes = json.loads((out / "notes.json").read_text())
    assert len(notes["skipped_records"]) == 1
    warned = [line for line in err.splitlines() if "skipped a bad record" in line]
    assert len(warned) == 1 and "Traceback" not in err


# ----------------------------------------------------------------------------- params text read three ways (issue 28)

# What a person types where a value belongs: the spellings YAML 1.1 and 1.2 read apart, and ones they read alike.
VALUE_TEXTS = st.sampled_from(
    [
        "1e-3",
        "1.0e-3",
        "1E3",
        "-.5",
        "no",
        "yes",
        "on",
        "off",
        "Off",
        "0o17",
        "017",
        "09",
        "0x1F",
        "1_000",
        "12:30",
        ".inf",
        ".nan",
        "2026-12-02",
        "~",
        "null",
        "true",
        "'no'",
        '"1e-3"',
        "!!str 017",
        "!!int 3",
        "!!binary aGk=",
        "0b_",
        "[1, 2]",
        "{}",
        "3",
        "0.5",
        "&a 3",
        "*a",
    ]
) | st.text(alphabet="0123456789._-+eEoxbnNyYtTfF:~", min_size=1, max_size=6)


@st.composite
def params_text(draw) -> str:
    """params.yaml as written (block style), one or two lines mutated: a value retyped, a line repeated (a key
    given twice), a key retyped."""
    lines = yaml.safe_dump(BASE, sort_keys=False, allow_unicode=True).splitlines()
    for _ in range(draw(st.integers(1, 2))):
        index = draw(st.integers(0, len(lines) - 1))
        line = lines[index]
        kind = draw(st.sampled_from(["value", "repeat", "key"]))
        if kind == "repeat":
            lines.insert(index, line)
        elif ":" in line and kind == "value":
            lines[index] = line.split(":", 1)[0] + ": " + draw(VALUE_TEXTS)
        elif ":" in line:
            indent = line[: len(line) - len(line.lstrip())]
            lines[index] = indent + draw(VALUE_TEXTS).replace(":", "") + ":" + line.split(":", 1)[1]
    return "\n".join(lines) + "\n"


@settings(SETTINGS, max_examples=60)
@given(text=params_text())
def test_a_mutated_params_file_is_read_alike_by_all_three_readers_or_refused_in_one_line(
    tmp_path_factory, capsys, text
):
    """Whatever gpuscale accepts, Snakemake (PyYAML through yte) and DVC (ruamel.yaml) read alike; the rest is one
    line, exit 2, never a traceback."""
    import warnings

    from ruamel.yaml import YAML

    path = tmp_path_factory.mktemp("p") / "params.yaml"
    path.write_text(text)
    code, err = run_cli(["validate", "--params", str(path)], capsys)
    if code != 0:
        assert_one_line_exit_2(code, err)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dvc = YAML(typ="safe").load(text)
    ours = params.read_yaml(path)
    assert ours == dvc
    assert _alike_but_dvc_numbers(yaml.load(text, Loader=yaml.FullLoader), ours)


def _alike_but_dvc_numbers(pyyaml, ours) -> bool:
    """Snakemake's own reading (PyYAML) is gpuscale's, but where gpuscale reads a number as DVC writes it (`1e-3`
    at a number key: text to YAML 1.1); the Snakefile replaces Snakemake's reading with gpuscale's there."""
    if isinstance(pyyaml, dict) and isinstance(ours, dict):
        return pyyaml.keys() == ours.keys() and all(_alike_but_dvc_numbers(pyyaml[k], ours[k]) for k in ours)
    if isinstance(pyyaml, list) and isinstance(ours, list):
        return len(pyyaml) == len(ours) and all(map(_alike_but_dvc_numbers, pyyaml, ours))
    if isinstance(pyyaml, str) and type(ours) is float:
        return float(pyyaml.replace("_", "")) == ours
    return pyyaml == ours


# ----------------------------------------------------------------------------- archives (issue 28)

ARCHIVE_BASE = {f"{s}/{c}/{i}.png": (s, c, i) for s in ("train", "test") for c in ("cat", "dog") for i in range(2)}
# Mutations that change nothing a dataset holds: the prepared output must be identical.
NEUTRAL = [
    "hidden file",
    "resource fork",
    "macosx folder",
    "same bytes twice",
    "windows name",
    "folder entry",
    "readme",
]
CHANGING = [
    "other bytes twice",
    "case alias",
    "nfd alias",
    "delete",
    "nested",
    "stray at class level",
    "non-image",
    "grayscale",
    "palette",
    "rgba",
    "16-bit",
    "large",
    "truncated",
    "random bytes",
    "empty class",
    "class in train only",
]


def _png(key, mode="RGB", size=(32, 32)) -> bytes:
    import io
    import zlib

    from PIL import Image

    value = zlib.crc32(key.encode() if isinstance(key, str) else repr(key).encode()) % 200 + 20
    picture = Image.new(mode if mode != "I;16" else "I", size, value if mode != "RGB" else (value, 3, 9))
    if mode == "I;16":
        picture = picture.convert("I;16")
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


@st.composite
def archive_members(draw) -> tuple[list[tuple[str, bytes]], bool]:
    """A zip's member list, a few mutations applied; and whether they all leave the dataset as it was."""
    import unicodedata

    members = [(name, _png(key)) for name, key in ARCHIVE_BASE.items()]
    kinds = draw(
        st.lists(st.sampled_from(draw(st.sampled_from([NEUTRAL, NEUTRAL + CHANGING]))), min_size=1, max_size=3)
    )
    for kind in kinds:
        name, raw = members[draw(st.integers(0, len(members) - 1))]
        if kind == "hidden file":
            members.append((name.rsplit("/", 1)[0] + "/.DS_Store", b"\0\0\0\1Bud1"))
        elif kind == "resource fork":
            members.append((name.rsplit("/", 1)[0] + "/._" + name.rsplit("/", 1)[1], b"\0\5\26\7"))
        elif kind == "macosx folder":
            members.append(("__MACOSX/" + name, b"\0\5\26\7"))
        elif kind == "same bytes twice":
            members.append((name, raw))
        elif kind == "windows name":
            members.append((name.replace("/", "\\"), raw))
        elif kind == "folder entry":
            members.append((name.rsplit("/", 1)[0] + "/", b""))
        elif kind == "readme":
            members.append(("README.txt", b"images"))
        elif kind == "other bytes twice":
            members.append((name, _png(name + "x")))
        elif kind == "case alias":
            members.append((name.replace(".png", ".PNG"), _png(name + "c")))
        elif kind == "nfd alias":
            members += [
                (name.replace(".png", "é.png"), raw),
                (name.replace(".png", unicodedata.normalize("NFD", "é.png")), raw),
            ]
        elif kind == "delete":
            members.remove((name, raw))
        elif kind == "nested":
            members.append((name.replace(".png", "/sub/1.png"), raw))
        elif kind == "stray at class level":
            members.append((name.split("/")[0] + "/notes.png", raw))
        elif kind == "non-image":
            members.append((name.replace(".png", ".txt"), b"hello"))
        elif kind in ("grayscale", "palette", "rgba", "16-bit", "large"):
            mode = {"grayscale": "L", "palette": "P", "rgba": "RGBA", "16-bit": "I;16", "large": "RGB"}[kind]
            members.append((name.replace(".png", "m.png"), _png(name, mode, (64, 48) if kind == "large" else (32, 32))))
        elif kind == "truncated":
            members.append((name.replace(".png", "t.png"), raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]))
        elif kind == "random bytes":
            members.append((name.replace(".png", "r.png"), draw(st.binary(max_size=64))))
        elif kind == "empty class":
            members.append(("train/bird/", b""))
        elif kind == "class in train only":
            members.append(("train/bird/0.png", raw))
    return members, all(kind in NEUTRAL for kind in kinds)


def prepare_zip(folder: Path, members, image_mode: str, capsys, kind: str = "zip") -> tuple[int, str, Path]:
    """`gpuscale data` on a zip of the members, or on a folder of them (a repeated name: the last one written)."""
    import warnings
    import zipfile

    archive = folder / "a.zip"
    if kind == "folder":
        archive = folder / "tree"
        for name, raw in members:
            path = archive / name
            if any(p.is_file() for p in [path, *path.parents]):
                continue  # a folder entry, or a file's folder, where a file of that name lies already
            if name.endswith("/"):
                path.mkdir(parents=True, exist_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_dir():
                path.write_bytes(raw)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a duplicate name is the case under test
            with zipfile.ZipFile(archive, "w") as handle:
                for name, raw in members:
                    handle.writestr(name, raw)
    overlay = folder / "o.yaml"
    config = copy.deepcopy(BASE)
    config["data"].update(
        source="imagefolder", path=str(archive), image_mode=image_mode, train_size=None, test_size=None
    )
    overlay.write_text(yaml.safe_dump(config))
    out = folder / "prepared"
    code, err = run_cli(["data", "--params", str(overlay), "--out", str(out)], capsys)
    return code, err, out


def _arrays(out: Path) -> dict:
    manifest = json.loads((out / "manifest.json").read_text())
    return {"files": {k: v["sha256"] for k, v in manifest["files"].items()}, "classes": manifest["classes"]}


@settings(SETTINGS, max_examples=60)
@given(
    mutation=archive_members(),
    image_mode=st.sampled_from(["strict", "convert"]),
    kind=st.sampled_from(["zip", "folder"]),
)
def test_a_mutated_archive_prepares_the_same_images_or_is_one_line_exit_2(
    tmp_path_factory, capsys, mutation, image_mode, kind
):
    members, neutral = mutation
    plain = tmp_path_factory.mktemp("plain")
    base = [(n, _png(k)) for n, k in ARCHIVE_BASE.items()]
    code, err, expected = prepare_zip(plain, base, image_mode, capsys, kind)
    assert code == 0, err
    folder = tmp_path_factory.mktemp("mutated")
    code, err, out = prepare_zip(folder, members, image_mode, capsys, kind)
    if neutral:
        assert code == 0, err
        assert _arrays(out) == _arrays(expected)
    elif code != 0:
        assert_one_line_exit_2(code, err)
        assert not out.exists()
    else:
        manifest = json.loads((out / "manifest.json").read_text())
        names = {n.replace("\\", "/") for n, _ in members if n.startswith(("train/", "test/")) and not n.endswith("/")}
        assert manifest["counts"]["train"]["total"] + manifest["counts"]["test"]["total"] <= len(names)
