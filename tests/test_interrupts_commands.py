"""SIGTERM and SIGINT in every command (issue 28, family 5), each `gpuscale COMMAND` in its own process, signalled
from outside while it works, to its whole process group (as Ctrl-C in a terminal and Snakemake's stop do): one
line on stderr, exit 143 (SIGTERM) or 130 (SIGINT), no traceback, nothing at the final path and no partial file;
the same command then completes. `gpuscale train` is tested in test_interrupts.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import records
from conftest import REPO, TINY, tool_env, write_yaml


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A small reference study, its tables and charts, and a prepared synthetic dataset."""
    root = tmp_path_factory.mktemp("signals")
    records.study(root / "reference" / "small", records.SPEEDUPS, records.CPU_EPOCH)
    predict = {**TINY["predict"], "probe_seconds": 20}
    train = {**TINY["train"], "epochs": 1, "phase_profile_steps": 0}
    data = {**TINY["data"], "train_size": 20_000, "test_size": 2_000}  # long enough to be stopped mid-way
    overlay = {**TINY, "data": data, "train": train, "report": {"reference": ["reference/small"]}, "predict": predict}
    write_yaml(root / "o.yaml", overlay)
    for command, args in (("aggregate", AGGREGATE), ("charts", CHARTS), ("data", ["--out", "prepared"])):
        done = run(gpuscale(command, *args), root)
        assert done.returncode == 0, done.stderr
    return root


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=tool_env(), capture_output=True, text=True, check=False)


def gpuscale(command: str, *args) -> list[str]:
    params = ["--params", str(REPO / "params.yaml"), "--params", "o.yaml"]
    return [sys.executable, "-m", "gpuscale", command, *params, *map(str, args)]


AGGREGATE = ["--reference-only", "--out", "tables", "--metrics", "metrics.json"]
CHARTS = ["--tables", "tables", "--out", "charts"]
COMMANDS = {  # argv, the output it must not leave, seconds to let it work once its handlers are in place
    "validate": ([], None, 0.0),
    "models": ([], None, 3.0),
    "host": (["--out", "out/host.json"], "out/host.json", 0.0),
    "data": (["--out", "out/prepared"], "out/prepared", 1.0),
    "aggregate": (["--reference-only", "--out", "out/tables", "--metrics", "out/m.json"], "out/tables", 0.2),
    "charts": (["--tables", "tables", "--out", "out/charts"], "out/charts", 2.0),
    "report": (["--tables", "tables", "--charts", "charts", "--out", "out/index.html"], "out/index.html", 2.0),
    "predict": (["--probes", "no-probes", "--out", "out/predict"], "out/predict", 0.3),
    "estimate": (["--plan", "out/plan.json", "--quick-seconds", "20"], "out/plan.json", 3.0),
    "sentinel": (["--out", "out/sentinel.json"], "out/sentinel.json", 3.0),
    "probe": (["--device", "cpu", "--out", "out/cpu.json", "--data", "prepared"], "out/cpu.json", 5.0),
}


def catches_sigterm(pid: int) -> bool:
    """gpuscale's own handlers are in place (SigCgt holds SIGTERM): a signal from now on is the command's to end."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(status.split("SigCgt:")[1].split()[0], 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def stop(argv: list[str], cwd: Path, sig: int, after: float) -> tuple[int, str]:
    proc = subprocess.Popen(
        argv, cwd=cwd, env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not catches_sigterm(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(after)
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_signal_to_any_command_is_one_line_and_leaves_no_output(command, sig, project):
    argv, output, after = COMMANDS[command]
    # the command's own pace sets whether `after` lands mid-work: where it finished first, the signal comes again
    # earlier, at last the moment its handlers are in place (it is still importing then)
    for delay in (after, after / 4, 0.0):
        code, err = stop(gpuscale(command, *argv), project, sig, delay)
        if code != 0:
            break
        subprocess.run(["rm", "-rf", str(project / output)] if output else ["true"], check=True)
    lines = err.strip().splitlines()
    said = "stopped by SIGTERM" if sig == signal.SIGTERM else "interrupted (SIGINT)"
    assert code != 0, f"{command} finished before the signal even at once ({err[-500:]})"
    assert code == (143 if sig == signal.SIGTERM else 130), err
    assert "Traceback" not in err, err
    assert lines[-1] == f"gpuscale {command}: {said}; no partial output was left: run it again to finish", err
    assert not [p for p in project.rglob("*.partial")]
    if output:
        # estimate empties its plan first (an earlier study's plan never passes for this one's): the only state left;
        # otherwise an output is there only if it was swapped in whole before the signal: a complete run's files
        left = json.loads((project / output).read_text()) if (project / output).is_file() else None
        interrupted = sorted(p.relative_to(project) for p in (project / output).rglob("*"))
        done = run(gpuscale(command, *argv), project)
        assert done.returncode == 0 and (project / output).exists(), done.stderr
        if command == "estimate":
            assert left in (None, {"jobs": {}}) or left == json.loads((project / output).read_text()), left
        elif (project / output).is_dir() and interrupted:
            assert interrupted == sorted(p.relative_to(project) for p in (project / output).rglob("*")), output
        subprocess.run(["rm", "-rf", str(project / output)], check=True)


SET_NAME = "class Late:\n    def __set_name__(self, owner, name):\n        raise KeyboardInterrupt\n"
WRAPPED = {  # where Python hands a signal on in disguise, each as it lands while a command's modules import
    # CPython marks a KeyboardInterrupt that ended any string exec/eval (dataclasses and namedtuple build code so)
    # and under `python -m` turned main's 130 into death by SIGINT (-2) at exit: the CI caught it once in 60 runs
    "string exec": "lambda argv, state: exec('raise KeyboardInterrupt', {})",
    # a signal in a class body's __set_name__ comes as a RuntimeError whose cause it is (platform.uname_result, as
    # polars imports it: 1 in 120 signals to `aggregate`)
    "__set_name__": f"lambda argv, state: exec({SET_NAME!r} + 'class Owner:\\n    late = Late()\\n', {{}})",
}


@pytest.mark.parametrize("where", list(WRAPPED))
def test_a_signal_python_hands_on_in_disguise_is_still_one_line_and_130_under_python_m(where, tmp_path):
    (tmp_path / "disguised.py").write_text(
        f"from gpuscale import cli\ncli._dispatch = {WRAPPED[where]}\ncli.exit_as_module(cli.main())\n"
    )
    env = {**tool_env(), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO / "src")])}
    done = subprocess.run(
        [sys.executable, "-m", "disguised"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "gpuscale: interrupted (SIGINT); no partial output was left: run it again to finish"


def test_a_command_whose_bug_is_no_signal_still_shows_its_traceback(tmp_path):
    """The disguise test must not swallow real errors: a RuntimeError of its own is a bug, exit 1 with its trace."""
    (tmp_path / "bug.py").write_text(
        "from gpuscale import cli\n"
        "def boom(argv, state):\n    raise RuntimeError('a bug')\n"
        "cli._dispatch = boom\ncli.exit_as_module(cli.main())\n"
    )
    env = {**tool_env(), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO / "src")])}
    done = subprocess.run(
        [sys.executable, "-m", "bug"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and "Traceback" in done.stderr and "RuntimeError: a bug" in done.stderr
