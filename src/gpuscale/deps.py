"""Each stage's code dependencies, computed from its imports rather than listed by hand.

A stage depends on the files of every gpuscale module in the static import closure of its command
(imports inside functions included), plus the package data files those modules read, which each
module declares next to its code as a literal `DATA_FILES = ("schemas/x.json", ...)`. The Snakefile
calls `code_files_by_stage()` when it parses and gives each rule those files as inputs; it keeps the result in
.snakemake/gpuscale/code-deps.json under a hash of every module file's path and content, so a parse reads the
modules again only after one changed (0.4 s of a 2-core machine's dry run otherwise). dvc.yaml cannot run
code, so `python -m gpuscale.deps --write dvc.yaml` rewrites its params lists and links each command's
code files into one folder, workflow/code/<command>/ (relative symlinks, mirroring src/gpuscale): a
stage's one code dep is that folder. DVC hashes a folder through its links, so an edit to a linked
module reruns exactly the stages whose command imports it, and `dvc exp show` has one code column per
command instead of one per module. A new import, module or data file needs `--write` again
(tests/test_deps.py fails while dvc.yaml or a link folder is stale).

The entry of a stage is gpuscale.cli plus gpuscale.commands.<command> where that module exists.
While the CLI is one module, only the branches of gpuscale.cli that the command takes are
followed: the imports inside another command's `cmd_<name>` function, and inside an
`if args.command == ...` test naming other commands, are left out.

Standard library only: the Snakefile imports it.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

PACKAGE = "gpuscale"
SOURCE_ROOT = "src/gpuscale"  # as written in the Snakefile and dvc.yaml (relative to the repository)
LINK_ROOT = "workflow/code"  # <command>/: links to the command's code files, a DVC stage's code dep

# The workflow's stages and the `gpuscale` command each one runs.
STAGE_COMMANDS = {
    "use": "use",
    "host": "host",
    "data": "data",
    "train": "train",
    "sweep_threads": "train",
    "sweep_batch": "train",
    "aggregate": "aggregate",
    "charts": "charts",
    "report": "report",
    "probe": "probe",
    "predict": "predict",
}

# The params keys each stage reads (DVC reruns a stage when one changes; Snakemake passes the same
# values as rule params). ${item.x} is the stage's matrix value; `gpuscale.contract.params.select` resolves them.
STAGE_PARAMS = {
    "probe": ["predict.probe_seconds", "train"],
    "predict": ["study.devices", "report.reference", "train.batch_size", "data.train_size"],
    "use": [],
    "host": ["run.host"],  # this host's fingerprint, in .gpuscale/run.yaml (STAGE_PARAMS_FILE)
    "data": ["data"],
    "train": ["study.on_missing_device", "study.label", "variants.${item.variant}", "train", "models.${item.model}"],
    "sweep_threads": [
        "study.on_missing_device",
        "study.label",
        "sweeps.variant",
        "sweeps.train",
        "variants",
        "train",
        "models.${item.model}",
    ],
    "sweep_batch": [
        "study.on_missing_device",
        "study.label",
        "sweeps.variant",
        "sweeps.gpu_device",
        "sweeps.train",
        "variants",
        "train",
        "models.${item.model}",
    ],
    "aggregate": [
        "study.models",
        "study.devices",
        "study.variants",
        "study.seeds",
        "study.rounds",
        "study.on_missing_device",
        "study.label",
        "sweeps",
        "report.reference",
        "report.accuracy_tolerance",
        "report.skip_bad_records",
        "report.pairing",
    ],
    "charts": ["report.accuracy_tolerance"],
    "report": ["report", "study.label"],
}


# The file each stage's params keys are read from in dvc.yaml (gpuscale.commands.use): the merge of params.yaml and
# the overlays chosen with `gpuscale use`, which every stage command reads; the host stage's from run.yaml.
MERGED_PARAMS = ".gpuscale/params.yaml"  # gpuscale.commands.use.MERGED_PARAMS (tests/test_use.py checks they agree)
RUN_VARS = ".gpuscale/run.yaml"  # gpuscale.commands.use.RUN_VARS
STAGE_PARAMS_FILE = {"host": RUN_VARS}


def params_file(stage: str) -> str:
    return STAGE_PARAMS_FILE.get(stage, MERGED_PARAMS)


def package_root() -> Path:
    return Path(__file__).resolve().parent


def module_file(name: str, root: Path) -> Path | None:
    """gpuscale.a.b -> root/a/b.py or root/a/b/__init__.py, where it exists."""
    parts = name.split(".")[1:]
    base = root.joinpath(*parts) if parts else root
    for candidate in (base.with_suffix(".py") if parts else None, base / "__init__.py"):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _parents(name: str) -> list[str]:
    """gpuscale.commands.train -> [gpuscale, gpuscale.commands]: importing a module runs its packages."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _absolute(node: ast.ImportFrom, current: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _commands_named(test: ast.expr) -> set[str] | None:
    """The commands an `if X.command == "a"` / `if X.command in ("a", "b")` test names, else None."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Attribute)):
        return None
    if test.left.attr != "command":
        return None
    right = test.comparators[0]
    if isinstance(test.ops[0], ast.Eq) and isinstance(right, ast.Constant):
        return {right.value}
    if isinstance(test.ops[0], ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        values = {e.value for e in right.elts if isinstance(e, ast.Constant)}
        return values if len(values) == len(right.elts) else None
    return None


class _Imports(ast.NodeVisitor):
    def __init__(self, current: str, is_package: bool, command: str | None):
        self.current, self.is_package, self.command = current, is_package, command
        self.found: set[str] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if self.command is not None and node.name.startswith("cmd_") and node.name != f"cmd_{self.command}":
            return  # another command's body (the one-module CLI)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        named = _commands_named(node.test) if self.command is not None else None
        if named is not None and self.command not in named:
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _add(self, name: str) -> None:
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            self.found.add(name)  # a module where its file exists (imports_of): `from gpuscale.x import name`

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _absolute(node, self.current, self.is_package)
        self._add(base)
        for alias in node.names:
            self._add(f"{base}.{alias.name}")  # `from gpuscale import data`: a module, where one exists


def _parse(path: Path) -> ast.Module:
    """The module's syntax tree, parsed once per process for each content of the file: a Snakefile computes every
    stage's closure, and the stages share most of their modules."""
    return _parse_source(str(path), path.read_bytes())


@functools.cache
def _parse_source(path: str, source: bytes) -> ast.Module:
    return ast.parse(source, filename=path)


def imports_of(name: str, root: Path, command: str | None = None) -> set[str]:
    """The gpuscale modules module `name` imports anywhere in its body (function bodies included)."""
    path = module_file(name, root)
    named = _names_imported(name, path.name == "__init__.py", command, str(path), path.read_bytes())
    found = [m for m in named if module_file(m, root) is not None]  # files come and go: checked on every call
    return {m for module in found for m in (*_parents(module), module)}


@functools.cache
def _names_imported(name: str, is_package: bool, command: str | None, path: str, source: bytes) -> frozenset[str]:
    """Every gpuscale.* name a module's source imports (a module, or a name from one)."""
    visitor = _Imports(name, is_package, command)
    visitor.visit(_parse_source(path, source))
    return frozenset(visitor.found)


def data_files_of(name: str, root: Path) -> list[str]:
    """The package data files a module declares as `DATA_FILES = (...)` (paths relative to the package)."""
    for node in _parse(module_file(name, root)).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DATA_FILES" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def entry_modules(command: str, root: Path) -> list[str]:
    entry = [f"{PACKAGE}.cli"]
    if module_file(f"{PACKAGE}.commands.{command}", root) is not None:
        entry.append(f"{PACKAGE}.commands.{command}")
    return entry


def closure(command: str, root: Path | None = None) -> list[str]:
    """Every gpuscale module `gpuscale <command>` can import, sorted."""
    root = Path(root) if root is not None else package_root()
    split_cli = len(entry_modules(command, root)) > 1
    seen: set[str] = set()
    todo = [m for e in entry_modules(command, root) for m in (*_parents(e), e)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        # The one-module CLI: follow only this command's branches of it.
        only = command if name == f"{PACKAGE}.cli" and not split_cli else None
        todo += sorted(imports_of(name, root, only) - seen)
    return sorted(seen)


def code_files(stage: str, root: Path | str = SOURCE_ROOT) -> list[str]:
    """The files a stage's result depends on, as `src/gpuscale/...` paths: module files, then data files."""
    root = Path(root)
    modules = closure(STAGE_COMMANDS[stage], root)
    files = [module_file(m, root) for m in modules]
    paths = [f"{SOURCE_ROOT}/{p.relative_to(root).as_posix()}" for p in files]
    data = sorted({f"{SOURCE_ROOT}/{d}" for m in modules for d in data_files_of(m, root)})
    return paths + data


def _source_key(root: Path) -> str:
    """A hash of what the closures are computed from: every module file under `root` (its path and content) and
    this module's own code. Content, not mtimes: a checkout, a copy or an edit within one clock tick changes it."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for folder, subfolders, names in os.walk(root):
        subfolders.sort()
        for name in sorted(n for n in names if n.endswith(".py")):
            path = Path(folder, name)
            digest.update(f"\0{path.relative_to(root).as_posix()}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _cached_code(cache: Path, key: str) -> dict[str, list[str]] | None:
    """The closures stored in `cache` for the sources `key` stands for; None where absent, stale or unreadable."""
    try:
        stored = json.loads(cache.read_text())
        code = stored["code"] if stored["key"] == key else None
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not (isinstance(code, dict) and set(code) == set(STAGE_COMMANDS)):
        return None
    return (
        code
        if all(isinstance(files, list) and all(isinstance(f, str) for f in files) for files in code.values())
        else None
    )


def _store_code(cache: Path, key: str, code: dict[str, list[str]]) -> None:
    partial = None
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=cache.parent, prefix=f"{cache.name}.", suffix=".partial")
        with os.fdopen(handle, "w") as out:
            json.dump({"key": key, "code": code}, out)
        os.replace(partial, cache)  # whole or not at all: Snakemake may parse the Snakefile in several processes
    except OSError:  # a read-only checkout, a full disk: computed again next time
        if partial is not None:
            with contextlib.suppress(OSError):
                os.unlink(partial)


def code_files_by_stage(root: Path | str = SOURCE_ROOT, cache: Path | str | None = None) -> dict[str, list[str]]:
    """code_files() of every stage. With `cache` (a git-ignored file), the closures are read from it where it was
    written for the same sources (_source_key), else computed and written there: a Snakefile parses the module
    files once per change of them instead of once per run."""
    root = Path(root)
    key = _source_key(root) if cache is not None else ""
    code = _cached_code(Path(cache), key) if cache is not None else None
    if code is None:
        code = {stage: code_files(stage, root) for stage in STAGE_COMMANDS}
        if cache is not None:
            _store_code(Path(cache), key, code)
    return code


def link_folder(stage: str) -> str:
    """The folder of links that stands for a stage's code files in dvc.yaml: one per command."""
    return f"{LINK_ROOT}/{STAGE_COMMANDS[stage]}"


def linked_files(folder: Path) -> list[str]:
    """The repository paths a link folder points at, sorted (`src/gpuscale/...`)."""
    folder = Path(folder)
    repo = folder.parents[len(Path(LINK_ROOT).parts)]
    return sorted(
        Path(os.path.normpath(link.parent / os.readlink(link))).relative_to(repo).as_posix()
        for link in folder.rglob("*")
        if link.is_symlink()
    )


def write_links(repo: Path, root: Path | str = SOURCE_ROOT) -> None:
    """(Re)make workflow/code/<command>/: one relative link per code file of the command, nothing else."""
    repo = Path(repo)
    for command in sorted(set(STAGE_COMMANDS.values())):
        stage = next(s for s, c in STAGE_COMMANDS.items() if c == command)
        folder = repo / LINK_ROOT / command
        if folder.exists():
            shutil.rmtree(folder)
        for path in code_files(stage, root):
            link = folder / Path(path).relative_to(SOURCE_ROOT)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(repo / path, link.parent))


_STAGE = re.compile(r"^  ([A-Za-z_][A-Za-z0-9_]*):\s*$")
_KEY = re.compile(r"^    ([A-Za-z_]+):(.*)$")


def _table_outputs() -> list[str]:
    from gpuscale.analyze import tablefiles

    return list(tablefiles.outputs().values())


def render_dvc(text: str, models: dict[str, list[str]] | None = None, root: Path | str = ".") -> str:
    """dvc.yaml with each stage's code dep and params list replaced by the computed ones, and the stages of the
    models named by spec in `models` (study_models(params.yaml); see add_spec_stages) made again.

    Within a stage, the code entries of `deps:` (`- workflow/code/...`, or `- src/gpuscale/...` as older
    files listed them) become the one link folder of its command (other deps, data and outputs, keep
    their place), the `params:` list is rewritten from STAGE_PARAMS, and the aggregate stage's `outs:`
    from gpuscale.analyze.tablefiles.outputs().
    """
    text = _strip_generated(text)
    out: list[str] = []
    blank = 0
    stage = section = None

    def flush() -> None:
        if stage == "aggregate" and section == "outs":
            out.extend(f"      - {f}" for f in _table_outputs())
        if stage in STAGE_COMMANDS and section == "deps":
            out.append(f"      - {link_folder(stage)}")
        if stage in STAGE_COMMANDS and section == "params" and STAGE_PARAMS[stage]:
            out.append(f"      - {params_file(stage)}:")
            out.extend(f"          - {p}" for p in STAGE_PARAMS[stage])

    for line in text.splitlines():
        if not line.strip():
            blank += 1
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= 4:  # a new key, stage or top-level section ends the list being rewritten
            flush()
            section = None
            if indent < 4:
                match = _STAGE.match(line)
                stage = match.group(1) if match else None
            else:
                key = _KEY.match(line)
                section = key.group(1) if key and key.group(1) in ("deps", "params", "outs") else None
                if section and key.group(2).strip():
                    raise ValueError(f"dvc.yaml: stage {stage}: write {section} as a plain list ({line.strip()})")
        item = line.strip()
        drop = (
            (section == "deps" and item.startswith((f"- {SOURCE_ROOT}/", f"- {LINK_ROOT}/")))
            or (section == "params" and item.startswith("- "))
            or (section == "outs" and stage == "aggregate" and item.startswith("- "))
        )
        if not (drop and stage in STAGE_COMMANDS):
            out.extend([""] * blank)
            out.append(line)
        blank = 0
    flush()
    return add_spec_stages("\n".join(out) + "\n", models or {}, root)


# ----------------------------------------------------------------------------- models named by spec in dvc.yaml
# DVC's matrix cannot map a spec (examples/mynet.py:build) to its slug (examples-mynet-py-build), and a spec in a
# stage name or an output path is refused or misplaced. So, where params.yaml's study.models (sweeps.models) names
# a model by spec, `--write` gives that model stages of its own, copied from the matrix stage with the spec in the
# command, the slug in paths and names, and the user's file as a dep; the matrix's model axis then lists the
# registry names only. Generated lines carry GENERATED, and are dropped and made again by every `--write`.

GENERATED = "# generated for a model spec (python -m gpuscale.deps --write dvc.yaml)"
# stage -> the params key listing its models (its matrix's model axis)
MODEL_STAGES = {"train": "study.models", "sweep_threads": "sweeps.models", "sweep_batch": "sweeps.models"}
SPEC_FILE_STAGES = ("probe", "predict")  # the layer table times, and the facts count, every model of the study


def study_models(params_path: Path | str) -> dict[str, list[str]]:
    """params key (study.models, sweeps.models) -> its model names, from a params.yaml."""
    import yaml  # only when writing or checking dvc.yaml

    config = yaml.safe_load(Path(params_path).read_text()) or {}
    return {key: list((config.get(key.split(".")[0]) or {}).get("models") or []) for key in set(MODEL_STAGES.values())}


def _strip_generated(text: str) -> str:
    """dvc.yaml without the generated stages and deps, and with each model axis back to its params key."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if line.strip() and indent <= 2:
            skipping = GENERATED in line and indent == 2
        if skipping or (GENERATED in line and line.strip().startswith("- ")):
            continue
        match = re.match(r"^      model: .*?" + re.escape(GENERATED) + r": the registry names in (\S+)$", line)
        out.append(f"      model: ${{run.{match.group(1)}}}" if match else line)
    return "\n".join(out) + "\n"


def _stage_blocks(text: str) -> list[tuple[str | None, list[str]]]:
    """(stage name or None, its lines): the text cut where each stage under `stages:` begins."""
    blocks: list[tuple[str | None, list[str]]] = [(None, [])]
    in_stages = False
    for line in text.splitlines():
        match = _STAGE.match(line)
        if line.strip() and not line[0].isspace():
            in_stages = line.startswith("stages:") or (in_stages and line.startswith("#"))
            blocks.append((None, [line]))
        elif in_stages and match:
            blocks.append((match.group(1), [line]))
        else:
            blocks[-1][1].append(line)
    return blocks


def _spec_stage(name: str, lines: list[str], spec: str, files: list[str]) -> list[str]:
    """The matrix stage `name`'s lines made into the stages of one model named by spec."""
    import shlex

    from gpuscale.models import spec as model_spec

    slug = model_spec.slug(spec)
    out = [f"  {model_spec.dvc_stage(name, spec)}:  {GENERATED}"]
    section = None
    for line in lines[1:]:
        stripped = line.strip()
        if re.match(r"^    [A-Za-z_]+:", line):
            section = stripped.split(":")[0]
        if section == "matrix" and stripped.startswith("model:"):
            continue
        if section == "params" and stripped == "- models.${item.model}":
            # DVC splits a params key at each '.': a spec cannot be named in one, so the whole section
            out.append(line.replace("models.${item.model}", "models"))
            continue
        line = line.replace("--model ${item.model}", f"--model {shlex.quote(spec)}").replace("${item.model}", slug)
        out.append(line)
        if section == "deps" and stripped.startswith(f"- {LINK_ROOT}/"):
            out.extend(f"      - {f}  {GENERATED}" for f in files)
    while out and not out[-1].strip():
        out.pop()
    return out + [""]


def add_spec_stages(text: str, models: dict[str, list[str]], root: Path | str = ".") -> str:
    """dvc.yaml (as render_dvc leaves it) with the stages and deps of the models named by spec in `models`."""
    from gpuscale.models import spec as model_spec

    specs = {key: [m for m in names if model_spec.is_spec(m)] for key, names in models.items()}
    if not any(specs.values()):
        return text
    all_files = sorted({f for names in specs.values() for m in names for f in model_spec.files(m, root)})
    out: list[str] = []
    for name, lines in _stage_blocks(text):
        key = MODEL_STAGES.get(name)
        if key and specs[key]:
            registry = [m for m in models[key] if not model_spec.is_spec(m)]
            axis = f"      model: [{', '.join(registry)}]  {GENERATED}: the registry names in {key}"
            out.extend(axis if line.strip() == f"model: ${{run.{key}}}" else line for line in lines)
            if out[-1].strip():
                out.append("")
            for spec in specs[key]:
                out.extend(_spec_stage(name, lines, spec, model_spec.files(spec, root)))
            continue
        for line in lines:
            out.append(line)
            if name in SPEC_FILE_STAGES and line.strip() == f"- {LINK_ROOT}/{STAGE_COMMANDS[name]}":
                out.extend(f"      - {f}  {GENERATED}" for f in all_files)
    return "\n".join(out) + "\n"


def write_dvc(path: Path | str, params_path: Path | str | None = None, root: Path | str = SOURCE_ROOT) -> None:
    """Rewrite dvc.yaml (code deps, params lists, the stages of models named by spec) and its link folders."""
    path = Path(path)
    params_path = Path(params_path) if params_path else path.parent / "params.yaml"
    models = study_models(params_path) if params_path.is_file() else {}
    path.write_text(render_dvc(path.read_text(), models, path.parent))
    write_links(path.parent, root)
    if (path.parent / ".gpuscale").is_dir():  # DVC's matrix reads .gpuscale/run.yaml: brought up to date with it
        from gpuscale.commands import use
        from gpuscale.contract.params import ParamsError

        try:
            use.refresh(path.parent)
        except ParamsError as err:
            print(f"gpuscale.deps: .gpuscale/ not refreshed: {err}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gpuscale.deps", description=__doc__.splitlines()[0])
    parser.add_argument("stage", nargs="?", choices=sorted(STAGE_COMMANDS), help="print this stage's code files")
    parser.add_argument(
        "--write",
        metavar="DVC_YAML",
        help=f"rewrite this dvc.yaml's code deps and params lists, and {LINK_ROOT}/ beside it",
    )
    parser.add_argument(
        "--params",
        metavar="PARAMS_YAML",
        help="the params.yaml whose models named by spec get stages of their own (default: beside DVC_YAML)",
    )
    parser.add_argument("--root", default=SOURCE_ROOT, help="the package source folder (default %(default)s)")
    args = parser.parse_args(argv)
    if args.write:
        write_dvc(args.write, args.params, args.root)
    if args.stage:
        print("\n".join(code_files(args.stage, args.root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
