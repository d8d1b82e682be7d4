"""A misspelt params key is named with its likely meaning, from the CLI, Snakemake and DVC alike; Snakemake
validates the schema without a "No validator found" warning (issue 16)."""

from __future__ import annotations

import logging

import pytest
import yaml
from conftest import REPO, TINY, copy_project, run, write_yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale import cli
from gpuscale.contract import params, yamlcheck

MESSAGE = "train.epohcs: unknown key; did you mean train.epochs?"


def misspelt(path):
    config = yaml.safe_load((REPO / "params.yaml").read_text())
    config["train"]["epohcs"] = config["train"].pop("epochs")
    return write_yaml(path, config)


@pytest.mark.parametrize("whole_file", [True, False], ids=["in params.yaml", "in an overlay"])
def test_the_cli_names_the_misspelt_key_and_its_likely_meaning(tmp_path, capsys, whole_file):
    if whole_file:
        argv = ["validate", "--params", str(misspelt(tmp_path / "p.yaml"))]
    else:
        overlay = write_yaml(tmp_path / "o.yaml", {"train": {"epohcs": 3}})
        argv = ["validate", "--params", str(REPO / "params.yaml"), "--params", str(overlay)]
    assert cli.main(argv) == 2
    logging.getLogger().handlers.clear()
    err = capsys.readouterr().err.strip()
    assert MESSAGE in err and len(err.splitlines()) == 1


def test_no_suggestion_when_nothing_is_close(tmp_path, capsys):
    overlay = write_yaml(tmp_path / "o.yaml", {"train": {"zzzqqq": 3}})
    assert cli.main(["validate", "--params", str(REPO / "params.yaml"), "--params", str(overlay)]) == 2
    logging.getLogger().handlers.clear()
    err = capsys.readouterr().err
    assert "train.zzzqqq: unknown key (allowed here:" in err and "did you mean" not in err


def test_params_files_that_are_not_text_or_not_files_are_one_line(tmp_path, capsys):
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    numeric = tmp_path / "n.yaml"
    numeric.write_text("train: {1: 2}\n")
    cases = ((binary, "not UTF-8"), (tmp_path, "is a folder where a file is expected"), (numeric, "key 1 is not text"))
    for path, text in cases:
        assert cli.main(["validate", "--params", str(path)]) == 2
        logging.getLogger().handlers.clear()
        err = capsys.readouterr().err.strip()
        assert text in err and len(err.splitlines()) == 1, err


@pytest.mark.e2e
def test_snakemake_names_the_misspelt_key_and_validates_without_a_schema_warning(tmp_path):
    repo = copy_project(tmp_path / "repo")
    write_yaml(repo / "typo.yaml", {"train": {"epohcs": 3}})
    done = run(["snakemake", "-n", "--cores", "1", "--configfile", "typo.yaml"], repo, check=False)
    assert done.returncode != 0 and MESSAGE in done.stderr + done.stdout
    write_yaml(repo / "tiny.yaml", TINY)
    done = run(["snakemake", "-n", "--cores", "1", "--configfile", "tiny.yaml"], repo)
    assert "No validator found" not in done.stdout + done.stderr


@pytest.mark.e2e
def test_dvc_names_the_misspelt_key(tmp_path):
    repo = copy_project(tmp_path / "repo", git=True)
    misspelt(repo / "params.yaml")
    done = run(["dvc", "repro", "data"], repo, check=False)
    assert done.returncode != 0 and MESSAGE in done.stdout + done.stderr


# ----------------------------------------------------------------------------- one meaning for three readers (issue 28)

READ_APART = [
    ("train: {deterministic: no}", "train.deterministic: `no` is read as the boolean false", "write false"),
    ("train: {deterministic: on}", "`on` is read as the boolean true", "write true"),
    ("report: {skip_bad_records: yes}", "`yes` is read as the boolean true", "write true"),
    ("runtime: {resume: off}", "`off` is read as the boolean false", "write false"),
    ("study: {label: no}", "study.label: `no` is read as the boolean false", "write 'no'"),
    ("data: {path: off}", "data.path: `off`", "write 'off'"),
    ("train: {epochs: 0o17}", "`0o17` is read as text by YAML 1.1 readers", "write 15"),
    ("train: {epochs: 017}", "`017` is read as the integer 15 by YAML 1.1 readers", "write 17 (as YAML 1.2 reads it)"),
    ("train: {cpu_threads: 09}", "`09` is read as text", "write 9"),
    ("study: {label: 12:30}", "`12:30` is read as the integer 750", "write '12:30'"),
    ("study: {label: 1e3}", "`1e3` is read as text", "write '1e3'"),
    ("study: {label: -.5}", "as the number -0.5 by YAML 1.2 readers (ruamel.yaml: DVC)", "write '-.5'"),
    ("train: {epochs: 1e1}", "`1e1` is read as text", "write 10"),
    ("train: {epochs: 3, epochs: 4}", "train.epochs: key given twice (lines 1 and 1)", "remove one"),
    (
        "train:\n  epochs: 3\ntrain:\n  batch_size: 8",
        "line 3: train: key given twice (lines 1 and 3)",
        "refuses the file",
    ),
    ("no: 3", "key `no` is read as the boolean false", "quote it ('no')"),
    ("train: {optimizer: {lr: .nan}}", "`.nan` is not a finite number", "write a number"),
    ("train: {optimizer: {lr: .inf}}", "`.inf` is not a finite number", "write a number"),
    ("train: {optimizer: {lr: 1.0e400}}", "`1.0e400` is not a finite number", "write a number"),
    ("study: {label: 2026-12-02}", "study.label: `2026-12-02` is read as a date", "write '2026-12-02'"),
    ("study: {label: 2026-12-02 10:00:00}", "is read as a date", "write '2026-12-02 10:00:00'"),
    ("train: {epochs: !!int 3}", "tag !!int is not allowed in a params file", "write the plain value"),
    ("study: {seeds: !!set {1, 2}}", "study.seeds: tag !!set is not allowed", "remove it"),
    ("study: {label: !!binary aGk=}", "tag !!binary is not allowed", "write the plain value"),
    ("study: {seeds: !!python/tuple [1, 2]}", "tag !!python/tuple is not allowed", "remove it"),
    ("train: {epochs: 0b_}", "`0b_` is an error to every YAML reader", "quote it for text"),
    ("study: {label: =}", "`=` is an error to every YAML reader", "quote it for text"),
    ("train: {0x_: 1}", "a key or value no YAML reader can read", "quote it"),
    ("a: &x [*x]", "a.0: an alias that holds itself", "write the value out"),
    ("__use_yte__: true", "Snakemake would read this file as a YTE template", "remove the key"),
]


@pytest.mark.parametrize("text, problem, fix", READ_APART, ids=[t for t, _, _ in READ_APART])
def test_what_yaml_1_1_and_1_2_read_apart_is_refused_naming_the_key_line_and_fix(tmp_path, capsys, text, problem, fix):
    overlay = tmp_path / "o.yaml"
    overlay.write_text(text + "\n")
    assert cli.main(["validate", "--params", str(REPO / "params.yaml"), "--params", str(overlay)]) == 2
    logging.getLogger().handlers.clear()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{overlay}:" in err and problem in err and fix in err, err


READ_ALIKE = [
    ("train: {optimizer: {lr: 1.0e-3}}", ("train", "optimizer", "lr"), 0.001),
    ("train: {optimizer: {lr: 0.001}}", ("train", "optimizer", "lr"), 0.001),
    ("train: {deterministic: false}", ("train", "deterministic"), False),
    ("study: {label: 'no'}", ("study", "label"), "no"),
    ('study: {label: "1e-3"}', ("study", "label"), "1e-3"),
    ("study: {label: !!str 12:30}", ("study", "label"), "12:30"),
    ("train: {epochs: 1_000}", ("train", "epochs"), 1000),
    ("train: {epochs: 0x1F}", ("train", "epochs"), 31),
    ("train: {epochs: 0b101}", ("train", "epochs"), 5),
    ("train: {epochs: +7}", ("train", "epochs"), 7),
    ("defaults: &d {epochs: 3}\n", None, None),
    ("train:\n  <<: {epochs: 3}\n  batch_size: 8", ("train", "epochs"), 3),
]


@pytest.mark.parametrize("text, key, value", READ_ALIKE, ids=[t for t, _, _ in READ_ALIKE])
def test_what_every_reader_reads_alike_is_read_as_they_read_it(tmp_path, text, key, value):
    from ruamel.yaml import YAML

    path = tmp_path / "o.yaml"
    path.write_text(text + "\n")
    ours = params.read_yaml(path)
    assert ours == yaml.load(text, Loader=yaml.FullLoader) == YAML(typ="safe").load(text)  # Snakemake (yte), DVC
    if key:
        node = ours
        for part in key:
            node = node[part]
        assert node == value and type(node) is type(value)


SCALARS = st.text(alphabet="0123456789._-+eEoxbBaAfFnNlLtTrRuUsSyYiI:~ _", min_size=1, max_size=8) | st.sampled_from(
    ["yes", "No", "ON", "off", "y", "n", ".inf", "-.Inf", ".NaN", "0o17", "0x1F", "017", "1_000", "12:30", "<<", "="]
)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(text=SCALARS)
def test_the_yaml_1_2_reading_is_ruamel_yamls(text):
    """gpuscale.contract.yamlcheck holds ruamel.yaml's YAML 1.2 reading itself (bare GPU hosts have no ruamel): the
    same as ruamel.yaml's for any plain scalar, so a file gpuscale accepts is read alike by DVC."""
    import warnings

    from ruamel.yaml import YAML

    document = f"k: {text}\n"
    try:
        node = yaml.compose(document)
    except yaml.YAMLError:
        return
    if node.value[0][1].style is not None or text != text.strip():
        return  # quoted, or a value YAML trims: not the plain scalar under test
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = YAML(typ="safe").load(document)["k"]
    except Exception:  # noqa: BLE001 (ruamel raises ValueError, IndexError or its own errors)
        expected = yamlcheck._UNREADABLE
    tag, value = yamlcheck._reading_12(text)
    if tag in ("timestamp", "merge"):
        return
    if expected is yamlcheck._UNREADABLE or value is yamlcheck._UNREADABLE:
        assert value is expected, (text, value, expected)
    else:
        assert yamlcheck._same(value, expected), (text, value, expected)


NEAR_KEYS = [
    ("train: {epoch: 3}", "line 1: train.epoch: unknown key; did you mean train.epochs?"),
    ("models: {resnet18: {epoch: 3}}", "models.resnet18.epoch: unknown key; did you mean models.resnet18.epochs?"),
    ("sweeps: {train: {epoch: 3}}", "sweeps.train.epoch: unknown key; did you mean sweeps.train.epochs?"),
    ("variants: {paper: {precison: fp32}}", "did you mean variants.paper.precision?"),
    ("epochs: 3", "epochs: unknown key; did you mean train.epochs or sweeps.train.epochs?"),
    ("lr: 0.1", "lr: unknown key; did you mean train.optimizer.lr"),
    ("train.epochs: 3", "train.epochs: unknown key; write it nested (train: {epochs: ...})"),
    ("models: {resnt18: {epochs: 3}}", "models.resnt18: unknown model 'resnt18'; did you mean resnet18?"),
    ("study: {models: [resnt18]}", "study.models.0: unknown model 'resnt18'; did you mean resnet18?"),
    ("study: {variants: [tunned]}", "study.variants.0: 'tunned' is not defined under variants; did you mean tuned?"),
    ("sweeps: {variant: papr}", "sweeps.variant: 'papr' is not defined under variants; did you mean paper?"),
    ("train:\n  batch_size: 8\n  epochs: 0", "line 3: train.epochs: 0 is out of range (allowed: >= 1)"),
]


@pytest.mark.parametrize("text, expected", NEAR_KEYS, ids=[t for t, _ in NEAR_KEYS])
def test_a_key_or_name_near_a_known_one_is_named_with_the_file_and_line_that_set_it(tmp_path, capsys, text, expected):
    overlay = tmp_path / "o.yaml"
    overlay.write_text(text + "\n")
    assert cli.main(["validate", "--params", str(REPO / "params.yaml"), "--params", str(overlay)]) == 2
    logging.getLogger().handlers.clear()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{overlay}: " in err and expected in err, err


@pytest.mark.e2e
def test_snakemake_and_dvc_refuse_what_their_readers_read_apart_with_gpuscales_line(tmp_path):
    """Snakemake's --configfile (PyYAML) reads `1e3` as text, DVC's params.yaml (ruamel.yaml) as a number: where the
    key holds text (study.label) both stop on gpuscale's line naming the fix, before any stage runs."""
    repo = copy_project(tmp_path / "repo", git=True)
    (repo / "label.yaml").write_text("study:\n  label: 1e3\n")
    done = run(["snakemake", "-n", "--cores", "1", "--configfile", "label.yaml"], repo, check=False)
    assert done.returncode != 0
    assert "label.yaml: line 2: study.label: `1e3` is read as text" in done.stdout + done.stderr
    assert "write '1e3'" in done.stdout + done.stderr
    text = (repo / "params.yaml").read_text()
    (repo / "params.yaml").write_text(text.replace("label: paper protocol", "label: 1e3", 1))
    done = run(["dvc", "repro", "data"], repo, check=False)
    assert done.returncode != 0 and "study.label: `1e3`" in done.stdout + done.stderr
    assert "write '1e3'" in done.stdout + done.stderr and not (repo / "data/prepared").exists()


DVC_NUMBERS = ["1e-05", "1e-3", "1E3", "1e+20", ".5", "2.5e-4"]


@pytest.mark.parametrize("text", DVC_NUMBERS)
def test_a_number_as_dvc_writes_it_is_read_as_that_number_where_a_number_is_wanted(text, tmp_path, capsys):
    """`dvc exp run -S train.optimizer.lr=1e-5` writes `lr: 1e-05` (ruamel.yaml's spelling of the float): text to
    YAML 1.1, a number to YAML 1.2. Where the schema wants a number and never text, gpuscale reads the number, as
    DVC does, and the Snakefile takes gpuscale's reading (the next test): no user of `-S` is stuck."""
    overlay = tmp_path / "o.yaml"
    overlay.write_text(f"train:\n  optimizer:\n    lr: {text}\n")
    assert cli.main(["validate", "--params", str(REPO / "params.yaml"), "--params", str(overlay)]) == 0
    logging.getLogger().handlers.clear()
    lr = params.load([REPO / "params.yaml", overlay])["train"]["optimizer"]["lr"]
    assert isinstance(lr, float) and lr == float(text)


def test_ruamel_yaml_writes_small_numbers_in_the_form_gpuscale_now_reads():
    import io

    from ruamel.yaml import YAML

    buffer = io.StringIO()
    YAML().dump({"lr": 1e-5}, buffer)
    assert buffer.getvalue().strip() == "lr: 1e-05"


@pytest.mark.e2e
def test_snakemake_reads_a_number_as_dvc_writes_it_through_gpuscale(tmp_path):
    """A dry run with `lr: 1e-05` passes Snakemake's schema validation (a number, not the text PyYAML reads)."""
    overlay = tmp_path / "lr.yaml"
    overlay.write_text("train:\n  optimizer:\n    lr: 1e-05\n")
    done = run(["snakemake", "-n", "--cores", "1", "--configfile", str(overlay)], REPO, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.e2e
def test_snakemake_refuses_a_second_configfile_flag_which_it_would_drop(tmp_path):
    """`--configfile config/mymodel.yaml --configfile offline.yaml` planned the default study: Snakemake keeps the
    last flag's files only."""
    overlay = write_yaml(tmp_path / "offline.yaml", {"data": {"source": "synthetic"}})
    argv = ["snakemake", "-n", "--cores", "1", "--configfile", "config/mymodel.yaml", "--configfile", str(overlay)]
    done = run(argv, REPO, check=False)
    assert done.returncode != 0 and "--configfile given 2 times" in done.stderr + done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize(
    "overlay, key, fix",
    [
        ({"train": {"batch_size": 32.0}}, "train.batch_size: 32.0", "write 32"),
        ({"train": {"epochs": 3.0}}, "train.epochs: 3.0", "write 3"),
        ({"models": {"resnet18": {"epochs": 2.0}}}, "models.resnet18.epochs: 2.0", "write 2"),
        ({"sweeps": {"cpu_threads": [1.0, 2]}}, "sweeps.cpu_threads.0: 1.0", "write 1"),
        ({"study": {"seeds": [0.0]}}, "study.seeds.0: 0.0", "write 0"),
    ],
)
def test_a_whole_number_written_with_a_fraction_is_refused_where_an_integer_goes(tmp_path, capsys, overlay, key, fix):
    """JSON Schema takes 32.0 for an integer and every YAML reader reads the float: `batch_size: 32.0` passed
    validate and training ended in torch's traceback."""
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump(overlay))
    assert cli.main(["validate", "--params", str(REPO / "params.yaml"), "--params", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{key} is a whole number written with a fraction; {fix}") and "o.yaml: line " in err, err
    assert len(err.splitlines()) == 1, err
    path.write_text(yaml.safe_dump({"train": {"optimizer": {"name": "adam", "lr": 1.0, "weight_decay": 0.0}}}))
    assert cli.main(["validate", "--params", str(REPO / "params.yaml"), "--params", str(path)]) == 0  # a number key


@pytest.mark.parametrize(
    "overlay, said",
    [
        (
            {"train": {"cpu_threads": 10**20}},
            "train.cpu_threads: 100000000000000000000 is out of range (allowed: <= 4096)",
        ),
        ({"sweeps": {"cpu_threads": [1, 99999]}}, "sweeps.cpu_threads.1: 99999 is out of range (allowed: <= 4096)"),
        (
            {"train": {"epochs": 10**20}},
            "train.epochs: 100000000000000000000 is beyond any count or seed gpuscale takes",
        ),
        ({"study": {"seeds": [2**32]}}, "study.seeds.0: 4294967296 is beyond any count or seed gpuscale takes"),
    ],
)
def test_an_integer_beyond_what_a_run_takes_is_refused(tmp_path, capsys, overlay, said):
    """train.cpu_threads: 10**20 passed validate and reached torch.set_num_threads as a traceback (Overflow when
    unpacking long long); a seed above numpy's largest failed only in the train job."""
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump(overlay))
    assert cli.main(["validate", "--params", str(REPO / "params.yaml"), "--params", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1, err
