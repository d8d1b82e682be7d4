"""The command line (issue 16, issue 17): a small dispatcher, one module per command, one-line errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO, tool_env

from gpuscale import cli

HEAVY = (
    "torch",
    "polars",
    "altair",
    "jinja2",
    "gpuscale.present.report",
    "gpuscale.present.charts",
    "gpuscale.analyze.aggregate",
)


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code` (which may end in SystemExit)."""
    script = (
        f"import sys\ntry:\n    {code}\nexcept SystemExit:\n    pass\nprint('MODULES', ' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=tool_env(), capture_output=True, text=True, check=True, cwd=REPO
    )
    return set(done.stdout.split("MODULES")[-1].split())


def test_help_lists_every_command_from_the_registry_without_importing_any(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, (_, text) in cli.COMMANDS.items():
        assert name in out and text in out
    loaded = modules_after("from gpuscale import cli; cli.main(['--help'])")
    assert not any(m.startswith("gpuscale.commands.") for m in loaded)
    assert not any(m.split(".")[0] in HEAVY or m in HEAVY for m in loaded)


def test_a_command_imports_its_own_module_only():
    loaded = modules_after("from gpuscale import cli; cli.main(['train', '--help'])")
    assert "gpuscale.commands.train" in loaded
    assert not {m for m in loaded if m.startswith("gpuscale.commands.")} - {
        "gpuscale.commands",
        "gpuscale.commands.train",
    }
    assert not any(m in HEAVY or m.split(".")[0] in HEAVY for m in loaded)


def test_every_command_module_has_the_interface():
    import importlib

    for name, (module, _) in cli.COMMANDS.items():
        mod = importlib.import_module(f"gpuscale.commands.{module}")
        assert callable(mod.add_arguments) and callable(mod.run), name
        assert cli.build_parser(name).prog == f"gpuscale {name}"


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_debug_is_accepted_by_every_command_before_or_after_its_name(name, capsys):
    for argv in ([name, "--debug", "--help"], ["--debug", name, "--help"]):
        with pytest.raises(SystemExit) as done:
            cli.main(argv)
        assert done.value.code == 0
    capsys.readouterr()


def test_validate_debug_shows_the_traceback_and_without_it_one_line(tmp_path, capsys):
    missing = str(tmp_path / "nope.yaml")
    assert cli.main(["validate", "--params", missing]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nope.yaml: file not found" in err and "Traceback" not in err
    from gpuscale.contract.params import ParamsError

    with pytest.raises(ParamsError):
        cli.main(["validate", "--debug", "--params", missing])


def test_unknown_command_is_one_line_with_a_suggestion(capsys):
    assert cli.main(["trian"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "did you mean train?" in err and "allowed: validate" in err


def test_a_usage_error_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["train", "--model", "simplecnn"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("gpuscale train: error:") and "--device" in err


def test_no_command_prints_the_list_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "commands:" in capsys.readouterr().err
