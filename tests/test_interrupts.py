"""Interruptions and limits (issue 28, family 5): a full disk or a file-size limit while writing a record, a
table, a chart or the report; SIGTERM and SIGINT in every stage. Each ends in one line, leaves nothing
half-written where a later run would take it for whole, and the next run completes."""

from __future__ import annotations

import logging
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import records
from conftest import REPO, TINY, tool_env, write_yaml

from gpuscale import cli
from gpuscale.contract import fsutil


@pytest.fixture(autouse=True)
def _restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGXFSZ)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    logging.getLogger().handlers.clear()


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project folder with a small reference study (hand-written records) and the params naming it."""
    root = tmp_path_factory.mktemp("interrupts")
    records.study(root / "reference" / "small", records.SPEEDUPS, records.CPU_EPOCH)
    predict = TINY["predict"]
    train = {**TINY["train"], "epochs": 1, "phase_profile_steps": 0}
    overlay = {**TINY, "train": train, "report": {"reference": ["reference/small"]}, "predict": predict}
    write_yaml(root / "o.yaml", overlay)
    return root


def params(project: Path) -> list[str]:
    return ["--params", str(REPO / "params.yaml"), "--params", str(project / "o.yaml")]


STAGES = {  # argv after the params, what it writes, what the next stage needs from it
    "aggregate": (["--reference-only", "--out", "tables", "--metrics", "metrics.json"], "tables/notes.json"),
    "charts": (["--tables", "tables", "--out", "charts"], "charts/speedup_vs_flops.vl.json"),
    "report": (["--tables", "tables", "--charts", "charts", "--out", "index.html"], "index.html"),
}


def gpuscale(project: Path, command: str, *args, limit: int | None = None, **kwargs) -> subprocess.CompletedProcess:
    """`python -m gpuscale COMMAND` in its own process, under a file-size limit of `limit` bytes (RLIMIT_FSIZE;
    gpuscale itself ignores SIGXFSZ, so the write fails with EFBIG rather than killing it)."""

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    argv = [sys.executable, "-m", "gpuscale", command, *params(project), *map(str, args)]
    return subprocess.run(
        argv,
        cwd=project,
        env=tool_env(),
        capture_output=True,
        text=True,
        preexec_fn=limited if limit else None,
        check=False,
        **kwargs,
    )


def partials(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".partial")]


def one_line(done: subprocess.CompletedProcess, code: int, *expected) -> str:
    err = done.stderr.strip()
    last = err.splitlines()[-1] if err else ""
    assert done.returncode == code, err
    assert "Traceback" not in err, err
    for text in expected:
        assert text in last, err
    return last


def test_a_file_size_limit_while_writing_tables_charts_and_report_is_one_line_and_the_next_run_completes(project):
    """Each stage under a limit its largest file exceeds: one line naming the file and the cause (exit 1), no
    partial file, nothing the next stage takes for whole; then, without the limit, the stage completes."""
    limits = {"aggregate": 1000, "charts": 100_000, "report": 100_000}
    for stage, (args, marker) in STAGES.items():
        done = gpuscale(project, stage, *args, limit=limits[stage])
        one_line(done, 1, f"gpuscale {stage}: error: cannot write ", "the file-size limit", "ulimit -f")
        assert not (project / marker).exists() and not partials(project), stage
        if stage != "report":  # the next stage says to run this one again
            nxt = list(STAGES)[list(STAGES).index(stage) + 1]
            one_line(gpuscale(project, nxt, *STAGES[nxt][0]), 2, f"run the {stage} stage first")
        assert gpuscale(project, stage, *args).returncode == 0, stage
        assert (project / marker).is_file()


def test_a_file_size_limit_while_writing_a_record_is_one_line(project, prepared):
    args = ["--model", "simplecnn", "--device", "cpu", "--data", prepared, "--out", "runs/r.json"]
    done = gpuscale(project, "train", *args, limit=4000, timeout=300)
    one_line(done, 1, "cannot write runs/r.json: the file-size limit (4000 bytes")
    assert not (project / "runs" / "r.json").exists() and not partials(project / "runs")


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (root only; skipped where mounting is not allowed)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=False, capture_output=True
    )
    if done.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_while_writing_tables_is_one_line(project, small_disk):
    (small_disk / "filler").write_bytes(b"x" * (250 << 10))
    done = gpuscale(project, "aggregate", "--reference-only", "--out", small_disk / "t", "--metrics", "m2.json")
    one_line(done, 1, f"cannot write {small_disk}/t", "is full", "free space there and run again")
    assert not (small_disk / "t" / "notes.json").exists() and not partials(small_disk)
    (small_disk / "filler").unlink()
    done = gpuscale(project, "aggregate", "--reference-only", "--out", small_disk / "t", "--metrics", "m2.json")
    assert done.returncode == 0, done.stderr


# ----------------------------------------------------------------------------- SIGTERM and SIGINT in every stage


def interrupt_at_the_rename(monkeypatch, sig: int) -> list[Path]:
    """Send `sig` to this process at the worst moment of the first atomic write: the file whole under its partial
    name, not yet in place. Returns the paths it stopped (one)."""
    real = os.replace
    stopped: list[Path] = []

    def replace(src, dst):
        if not stopped:
            stopped.append(Path(dst))
            os.kill(os.getpid(), sig)
            time.sleep(1)  # the handler runs at the next bytecode
        return real(src, dst)

    monkeypatch.setattr(fsutil.os, "replace", replace)
    return stopped


IN_PROCESS = {  # argv after the params, the output it must leave as it was
    "host": (["--out", "host.json"], "host.json"),
    "data": (["--out", "prepared"], "prepared"),
    "aggregate": (STAGES["aggregate"][0], "tables"),
    "charts": (STAGES["charts"][0], "charts"),
    "report": (STAGES["report"][0], "index.html"),
    "predict": (["--probes", "no-probes", "--out", "predicted"], "predicted"),
}


def contents(path: Path) -> dict:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []
    return {p: p.read_bytes() for p in files}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("stage", list(IN_PROCESS))
def test_a_signal_in_every_stage_is_one_line_and_leaves_nothing_half_written(stage, sig, project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    for before in list(STAGES)[: list(STAGES).index(stage) if stage in STAGES else 0]:
        assert cli.main([before, *params(project), *STAGES[before][0]]) == 0
    argv, output = IN_PROCESS[stage]
    before = contents(project / output)
    capsys.readouterr()
    stopped = interrupt_at_the_rename(monkeypatch, sig)
    code = cli.main([stage, *params(project), *argv])
    err = capsys.readouterr().err.strip()
    name = "SIGTERM" if sig == signal.SIGTERM else "SIGINT"
    assert code == (143 if sig == signal.SIGTERM else 130), err
    assert (
        err.splitlines()[-1]
        == f"gpuscale {stage}: "
        + ("stopped by SIGTERM" if name == "SIGTERM" else "interrupted (SIGINT)")
        + "; no partial output was left: run it again to finish"
    ), err
    assert stopped and not partials(project), stopped
    if stage in ("host", "data", "charts", "report", "predict"):  # one file, or one folder swapped whole: as it was
        assert contents(project / output) == before
    else:  # files replaced one by one: what the next stage requires is gone until the stage ends
        assert not (project / STAGES[stage][1]).exists()
    monkeypatch.undo()
    monkeypatch.chdir(project)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert cli.main([stage, *params(project), *argv]) == 0, capsys.readouterr().err
    assert contents(project / output)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_training_is_one_line_and_the_next_run_completes(sig, project, prepared):
    """`gpuscale train` in its own process, signalled once it logs its first epoch: no record, no partial file; the
    same command then writes the record."""
    args = ["--model", "simplecnn", "--device", "cpu", "--data", prepared, "--out", f"runs/{sig.name}.json"]
    argv = [sys.executable, "-m", "gpuscale", "train", *params(project), *map(str, args)]
    proc = subprocess.Popen(argv, cwd=project, env=tool_env(), stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "sentinel" in line:  # the first timed part of a run: the record is still to come
            proc.send_signal(sig)
            break
    rest = proc.stderr.read()
    code = proc.wait(timeout=120)
    last = (("".join(lines) + rest).strip().splitlines() or [""])[-1]
    assert code == (143 if sig == signal.SIGTERM else 130), "".join(lines) + rest
    assert last.startswith("gpuscale train: ") and "no partial output was left" in last, last
    assert not (project / "runs" / f"{sig.name}.json").exists() and not partials(project / "runs")
    assert gpuscale(project, "train", *args, timeout=300).returncode == 0


def test_an_address_space_limit_met_while_torch_loads_is_one_line(tmp_path):
    """An address-space limit failed inside torch's loading (ImportError: failed to map segment) with a traceback:
    now one line naming the limit (exit 1)."""

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20))

    done = subprocess.run(
        # sentinel loads torch at once (`gpuscale models` no longer does: it reads the shipped facts)
        [sys.executable, "-m", "gpuscale", "sentinel", "--out", str(tmp_path / "sentinel.json")],
        cwd=tmp_path,
        env=tool_env(),
        capture_output=True,
        text=True,
        preexec_fn=limited,
        check=False,
        timeout=300,
    )
    one_line(done, 1, "gpuscale sentinel: error: ", "for want of address space", "ulimit -v: 400 MiB")


def test_tempfile_under_a_zero_file_size_limit_is_named():
    """A file-size limit of 0 bytes stops Python's tempfile (it finds no folder it can write 'blat' in): torch's
    import met it in some environments and not others, so the error itself is made here, in a fresh process."""
    code = (
        "import resource, tempfile\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))\n"
        "from gpuscale import cli\n"
        "try:\n    tempfile.gettempdir()\nexcept Exception as err:\n    print(cli.out_of_resources(err))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=tool_env(), capture_output=True, text=True, check=True)
    assert done.stdout.startswith("no temporary folder could be written") and "ulimit -f: 0 MiB" in done.stdout


def test_an_error_that_is_no_limit_keeps_its_traceback():
    import errno

    assert cli.out_of_resources(ImportError("No module named 'thing'")) is None
    assert cli.out_of_resources(OSError(errno.ENOENT, "missing")) is None
    assert cli.out_of_resources(ValueError("bad")) is None
    assert "could not write a file" in cli.out_of_resources(OSError(errno.ENOSPC, "No space left on device"))
    assert "out of memory" in cli.out_of_resources(MemoryError())
