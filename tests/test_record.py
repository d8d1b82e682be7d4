import json

import pytest

from gpuscale.contract import fsutil, record


def test_truncated_record_names_the_file(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"schema_version": 1, "kind": "gpuscale.run", "stat')
    with pytest.raises(record.RecordError) as err:
        record.load(path)
    assert str(path) in str(err.value) and "not valid JSON" in str(err.value)


def test_schema_violation_names_file_and_field(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": 1, "kind": "gpuscale.run"}))
    with pytest.raises(record.RecordError, match=str(path)):
        record.load(path)


def test_other_schema_version_is_refused(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(record.RecordError, match="schema_version"):
        record.load(path)


def test_atomic_write_leaves_no_partial_file_on_failure(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError), fsutil.atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_atomic_directory_replaces_only_on_success(tmp_path):
    target = tmp_path / "prepared"
    with fsutil.atomic_directory(target) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(RuntimeError), fsutil.atomic_directory(target) as tmp:
        (tmp / "a").write_text("2")
        raise RuntimeError("killed")
    assert (target / "a").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prepared"]
