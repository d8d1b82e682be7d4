"""End to end: DVC's experiment tools on a copy of the project with tiny synthetic data (dvc exp run -S,
plain dvc exp show on a 120-column terminal, dvc metrics diff, dvc plots show, code edits rerunning only the
stages that import the edited module)."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import pty
import re
import select
import shutil
import struct
import termios
import time

import pytest
import yaml
from conftest import REPO, TINY, copy_project, run, tool_env, use_params, write_yaml

from gpuscale import deps
from gpuscale.contract import params

pytestmark = pytest.mark.e2e


def on_terminal(argv, cwd, columns=120, rows=40) -> str:
    """What `argv` shows on a pseudo-terminal of columns x rows, as a user's shell starts it (no PAGER,
    DVC_PAGER or LESS set: DVC pages through `less -RS`), escape sequences removed. Quits the pager."""
    env = {k: v for k, v in tool_env().items() if k not in ("PAGER", "DVC_PAGER", "LESS")}
    env.update(TERM="xterm", COLUMNS=str(columns), LINES=str(rows))
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal's program
        os.chdir(cwd)
        os.execvpe(argv[0], argv, env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    out, deadline, quit_sent = b"", time.monotonic() + 120, False
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the program ended
                break
            if not chunk:
                break
            out += chunk
        if b"(END)" in out and not quit_sent:
            os.write(fd, b"q")
            quit_sent = True
    os.waitpid(pid, 0)
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]|\r", b"", out).decode(errors="replace")
    return text


def commit(repo, message):
    run(["git", "add", "-A"], repo)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message], repo)


@pytest.mark.xfail(
    strict=True,
    reason="known regression (issue 48, open): since gpuscale use, the stages read the git-ignored merged params, and "
    "dvc exp show lists the experiment's train.epochs empty in both params files",
)
def test_exp_run_with_a_changed_param_then_show_and_diff(tmp_path, monkeypatch):
    repo = copy_project(tmp_path / "repo", git=True)
    config = params.deep_merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
    config["study"].update(models=["simplecnn"], devices=["cpu"])
    config["train"]["epochs"] = 1
    write_yaml(repo / "params.yaml", config)
    use_params(repo)  # the study's lists changed: what dvc.yaml's matrix reads, as `gpuscale use` writes it
    commit(repo, "tiny study")
    run(["dvc", "repro"], repo)
    commit(repo, "baseline")
    baseline = json.loads((repo / "results/metrics.json").read_text())
    assert list(baseline["s"]["paper"]["simplecnn"]) == ["cpu"]
    assert "reference" not in json.dumps(baseline)  # the shipped reference study is aggregated, not in metrics

    run(["dvc", "exp", "run", "-S", "train.epochs=2", "-n", "two-epochs"], repo)
    table = run(["dvc", "exp", "show", "--csv"], repo).stdout
    rows = {row["Experiment"] or row["rev"]: row for row in csv.DictReader(io.StringIO(table))}
    exp = rows["two-epochs"]
    # the key as params.yaml has it and as the stages read it (the merged params of `gpuscale use`): DVC names each
    # by its file where two files hold it
    epochs = [name for name in exp if name == "train.epochs" or name.endswith(":train.epochs")]
    assert epochs and {exp[name] for name in epochs} == {"2"}, sorted(exp)
    assert float(exp["s.paper.simplecnn.cpu"]) > 0
    assert all(not name.startswith(("speedup", "fits", "steady_speedup")) for name in exp)

    assert not [name for name in exp if name.startswith("src/")]  # code: one column per command, not per module
    code = {name for name in exp if name.startswith("workflow/code/")}
    assert code == {f"workflow/code/{command}" for command in deps.STAGE_COMMANDS.values()}

    # Plain `dvc exp show` on a 120-column terminal: DVC lays the whole table out unsqueezed (no … anywhere)
    # and pages it with `less -RS`; the first screen shows the experiments and their metrics in full.
    assert "…" not in run(["dvc", "exp", "show"], repo).stdout
    if shutil.which("less"):
        screen = on_terminal(["dvc", "exp", "show"], repo)
        lines = screen.splitlines()
        assert "…" not in screen and max(len(line) for line in lines) <= 120, screen
        header = next(line for line in lines if "Experiment" in line)
        assert {"Created", "s.paper.simplecnn.cpu", "acc.paper.simplecnn.cpu"} <= set(header.split()), screen
        row = next(line for line in lines if "[two-epochs]" in line)
        numbers = [float(word) for word in row.split() if re.fullmatch(r"\d+\.\d+", word)]
        for name in ("s.paper.simplecnn.cpu", "acc.paper.simplecnn.cpu"):
            assert any(abs(n - float(exp[name])) <= 1e-3 * float(exp[name]) for n in numbers), (name, row)

    monkeypatch.setenv("COLUMNS", "120")
    shown = run(["dvc", "exp", "show", "--no-pager", "--only-changed"], repo).stdout
    lines = shown.splitlines()
    assert max(len(line) for line in lines) <= 120
    header = next(line for line in lines if "Experiment" in line)
    assert "s.paper.simplecnn.cpu" in header and "train.epochs" in header, shown
    assert "two-epochs" in shown

    run(["dvc", "exp", "apply", "two-epochs"], repo)
    diff = json.loads(run(["dvc", "metrics", "diff", "--json"], repo).stdout)
    changed = diff["results/metrics.json"]
    assert set(changed) >= {"s.paper.simplecnn.cpu", "acc.paper.simplecnn.cpu"}
    assert changed["s.paper.simplecnn.cpu"]["old"] == baseline["s"]["paper"]["simplecnn"]["cpu"]

    plots = run(["dvc", "plots", "show", "--json"], repo).stdout
    for chart in ("speedup_vs_parameters", "speedup_vs_flops", "epoch_seconds", "phases"):
        assert f"reports/charts/{chart}.svg" in plots
    assert os.path.getsize(repo / "reports/charts/speedup_vs_parameters.svg") > 0
    edits_rerun_only_the_stages_that_import_the_module(repo)


def changed_stages(repo) -> set[str]:
    status = json.loads(run(["dvc", "status", "--json"], repo).stdout or "{}")
    return {name.split("@")[0] for name in status} - {"host"}  # host: always changed


def edits_rerun_only_the_stages_that_import_the_module(repo):
    """A module edit reaches DVC through the link folders: exactly the stages whose command imports it."""
    present = {name.split("@")[0] for name in yaml.safe_load((repo / "dvc.lock").read_text())["stages"]}
    assert changed_stages(repo) == set()
    for module in ("src/gpuscale/words.py", "src/gpuscale/measure/loaders.py"):
        importers = {stage for stage in deps.STAGE_COMMANDS if module in deps.code_files(stage, REPO / "src/gpuscale")}
        original = (repo / module).read_text()
        (repo / module).write_text(original + "# an edit\n")
        assert changed_stages(repo) == importers & present, module
        (repo / module).write_text(original)
        assert changed_stages(repo) == set(), module
    assert {"charts", "report"} < present and {"train", "probe"} < present  # both edits reached stages here
