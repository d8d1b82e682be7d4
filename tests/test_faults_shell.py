"""Every path or name that reaches a shell is quoted (issue 16): Snakemake rules, the Makefile, the scripts."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
from conftest import REPO, TINY, copy_project, run, tool_env, write_yaml

RULES = sorted((REPO / "workflow/rules").glob("*.smk"))
UNQUOTED_OK = {
    "params.params_args",
    "threads",
    "params.only",
    "params.round_arg",
}  # quoted where built (common.smk) / an integer / a flag the rule picks / " --round N" from a digits-only wildcard


def shell_fields(text: str) -> list[str]:
    fields = []
    for block in re.findall(r"    shell:\n((?:        \".*\"\n)+)", text):
        fields += re.findall(r"\{([^{}]+)\}", block)
    return fields


@pytest.mark.parametrize("rules", RULES, ids=lambda p: p.name)
def test_every_field_of_every_shell_command_is_quoted(rules):
    fields = shell_fields(rules.read_text())
    assert all(f.endswith(":q") or f in UNQUOTED_OK for f in fields), [f for f in fields if not f.endswith(":q")]


def test_params_args_name_one_fixed_file_and_no_user_path():
    """The stage commands read the merged params (`gpuscale use`), a path of gpuscale's own: no overlay's name, which
    could hold a space or a semicolon, is written into a shell command."""
    text = (REPO / "workflow/rules/common.smk").read_text()
    assert 'PARAMS_ARGS = f"--params {overlay_choice.MERGED_PARAMS}"' in text
    from gpuscale.commands import use as overlay_choice

    assert re.fullmatch(r"[\w./-]+", str(overlay_choice.MERGED_PARAMS))


@pytest.mark.e2e
def test_an_overlay_whose_name_holds_a_space_and_a_semicolon_reaches_the_command_whole(tmp_path):
    repo = copy_project(tmp_path / "repo")
    overlay = write_yaml(repo / "my overlay;echo pwned.yaml", TINY)
    done = run(["snakemake", "-n", "-p", "--cores", "1", "--configfile", overlay.name], repo)
    commands = [line.split(":", 1)[1] for line in done.stdout.splitlines() if line.startswith("Shell command: ")]
    assert len(commands) >= 5, done.stdout[-2000:]
    for command in commands:
        words = shlex.split(command)
        # the overlay reaches the commands merged into the params file gpuscale names itself, never as a word of
        # the shell line (where its `;echo pwned` could run)
        assert "pwned.yaml" not in words and not any("my overlay" in word for word in words), command
        if "--params" in words:
            assert words[words.index("--params") + 1] == ".gpuscale/params.yaml", command


def test_make_quotes_overlays_and_validates_them_before_snakemake(tmp_path):
    done = subprocess.run(
        [
            "make",
            "-n",
            "--no-print-directory",
            "-o",
            ".venv/.installed",
            "reproduce",
            "CONFIGS=config/quick.yaml it's;here.yaml",
        ],
        cwd=REPO,
        # under `make test` (CI) the parent's MAKEFLAGS/MAKELEVEL would make this a sub-make printing its directory
        env={k: v for k, v in tool_env().items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")},
        capture_output=True,
        text=True,
        check=True,
    )
    line = done.stdout.replace("\\\n", " ").strip().splitlines()[-1]
    words = shlex.split(line)
    # `gpuscale use` checks the overlays and records them; snakemake then runs with no overlay on its command line
    assert words[words.index("use") - 1] == "gpuscale" and words.index("use") < words.index("snakemake")
    start = words.index("use")
    assert words[start + 1 : words.index("&&", start)] == ["config/quick.yaml", "it's;here.yaml"]
    assert words[words.index("snakemake") :] == ["snakemake", "--cores", "4"]


SCRIPTS = sorted([*REPO.glob("benchmarks/*.sh"), *REPO.glob("research/**/*.sh"), *REPO.glob("reference/*.sh")])


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_pass_params_and_commands_as_arrays_not_split_strings(script):
    text = script.read_text()
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert not re.search(r'^\s*[PSG]="', text, re.M), "a params chain or command held in a string is word-split"
    assert not re.search(r"\$[PSG]\b", text), "an unquoted $P/$S/$G expansion"
    assert "path: $ZIP" not in text, "a path written into YAML unquoted"
