"""A model named by spec instead of a registry name: `torchvision:<builder>`, `timm:<name>`,
`package.module:function`, `path/to/file.py:function`.

Torch-free (params validation, the run record's paths and the Snakefile import it): the spec's form, the file, the
module, the function, read from the source without running it. gpuscale.models.specbuild builds and pre-flights
a spec (torch, and the user's code). Each failure is a SpecError whose str() is one line: what is wrong, the fix.
A spec's name in file paths is `slug(spec)` (results/runs/<slug>/...); the record keeps the full spec.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

KINDS = ("torchvision", "timm", "module", "file")
TIMM_INSTALL = "make timm (pip install -r requirements/timm.txt, or pip install 'gpuscale[timm]')"
FORMS = "torchvision:<builder>, timm:<name>, package.module:function or path/to/file.py:function"
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_MODULE = re.compile(rf"^{_IDENT}(\.{_IDENT})*$")
_FUNCTION = re.compile(rf"^{_IDENT}$")
IMAGE_SHAPE = (3, 32, 32)
SLUG_MAX = 100  # a slug longer than this keeps its first 87 characters and a hash of the whole spec
NUM_CLASSES = 10


class SpecError(ValueError):
    """A model spec that cannot be used; str() is the one line shown to the user."""


@dataclass(frozen=True)
class ModelRef:
    """A parsed spec: kind (torchvision, timm, module, file), target (the builder, timm name, module or file
    path) and function (module and file only)."""

    text: str
    kind: str
    target: str
    function: str | None = None


def is_spec(name: str) -> bool:
    """A registry name has no colon; every spec has one."""
    return ":" in name


def parse(text: str) -> ModelRef:
    """The spec's form (no file or module is looked at)."""
    head, sep, tail = text.rpartition(":")
    if not sep or not head or not tail:
        raise SpecError(f"model spec {text!r} is malformed (allowed: {FORMS})")
    if head in ("torchvision", "timm"):
        if not _NAME.match(tail):
            raise SpecError(f"model spec {text!r}: {tail!r} is not a {head} model name")
        return ModelRef(text, head, tail)
    if not _FUNCTION.match(tail):
        raise SpecError(f"model spec {text!r}: {tail!r} is not a Python function name")
    if head.endswith(".py"):
        return ModelRef(text, "file", head, tail)
    if _MODULE.match(head):
        return ModelRef(text, "module", head, tail)
    raise SpecError(f"model spec {text!r}: {head!r} is neither a .py file nor a dotted module name (allowed: {FORMS})")


def slug(name: str) -> str:
    """The model's name in file paths and Snakemake wildcards: a registry name as it is; a spec with every run of
    characters other than letters, digits and _ made one '-' (examples/mynet.py:build -> examples-mynet-py-build),
    past SLUG_MAX characters cut and ended with a hash of the spec."""
    if not is_spec(name):
        return name
    text = re.sub(r"[^A-Za-z0-9_]+", "-", name).strip("-")
    if len(text) <= SLUG_MAX:
        return text
    # a long spec made one file-name component past the file system's 255 bytes (OSError: File name too long)
    return f"{text[: SLUG_MAX - 13].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def dvc_stage(stage: str, name: str) -> str:
    """The name of the dvc.yaml stage `python -m gpuscale.deps --write` gives a model named by spec (train-<slug>)."""
    return f"{stage}-{slug(name)}"


def files(name: str, root: Path | str = ".") -> list[str]:
    """The user's source files a model depends on, as paths relative to `root` where they lie under it: a file
    spec's file, or a module spec's module file where it lies under root (an installed package is not followed),
    then every module of the project those import, and theirs (`local_imports`: a helper module holding the
    network's width is as much the model as the file naming it). [] for registry names, torchvision and timm.
    The one list of a model's sources: its cached facts' key, its Snakemake inputs and its DVC deps."""
    if not is_spec(name):
        return []
    ref = parse(name)
    first: list[str] = []
    if ref.kind == "file":
        first = [ref.target]
    elif ref.kind == "module":
        origin = _module_origin(ref.target)
        if origin is not None:
            try:
                first = [Path(origin).resolve().relative_to(Path(root).resolve()).as_posix()]
            except ValueError:
                return []
            parts = ref.target.split(".")  # its packages' __init__.py run when it is imported
            inits = (Path(*parts[:i], "__init__.py") for i in range(1, len(parts)))
            first += [p.as_posix() for p in inits if (Path(root) / p).is_file() and p.as_posix() != first[0]]
    return [*first, *local_imports(first, root)] if first else []


def local_imports(paths: list[str], root: Path | str = ".") -> list[str]:
    """The project's own modules (files under `root`, as root-relative paths) that the source files at `paths`
    import, at any depth (read, not run: `import a.b`, `from a.b import c` and `from a import b` where root holds
    a/b.py or a/b/__init__.py), in the order met, `paths` left out. A file that cannot be read or parsed has none
    (its spec's check says why)."""
    root = Path(root).resolve()
    seen: list[str] = list(paths)
    todo = list(paths)
    while todo:
        current = todo.pop(0)
        try:
            tree = ast.parse((root / current).read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            base: tuple[str, ...] = ()  # where the dotted names start: the project folder, or a package's
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names if a.name != "*")]
            elif isinstance(node, ast.ImportFrom) and node.level:  # from . import x, from .widths import W
                package = Path(current).parent.parts
                base = package[: len(package) - (node.level - 1)] if node.level - 1 <= len(package) else None
                if base is None:
                    continue
                head = f"{node.module}." if node.module else ""
                names = [node.module] if node.module else []
                names += [f"{head}{a.name}" for a in node.names if a.name != "*"]
            else:
                continue
            for module in names:
                parts = [*base, *module.split(".")]
                for i in range(max(len(base), 1), len(parts) + 1):  # a.b.c imports a and a.b too
                    for candidate in (Path(*parts[:i]).with_suffix(".py"), Path(*parts[:i], "__init__.py")):
                        found = candidate.as_posix()
                        if (root / candidate).is_file() and found not in seen:
                            seen.append(found)
                            todo.append(found)
    return seen[len(paths) :]


def file_sha256(name: str) -> str | None:
    """sha256 of the user's source files (None for a model without any): the key of its cached facts."""
    paths = files(name)
    if not paths:
        return None
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def project_on_path() -> None:
    """Put the project folder (the working directory) first on sys.path, as `python -m` does and the `gpuscale`
    script does not: a module spec inside the project (examples.mynet:build) then resolves the same way from
    either, and in the workflow's jobs."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def find_module(module: str):
    """importlib.util.find_spec for a module spec, the project on the path. Finding a dotted module imports its
    parent packages, so the user's code runs here: an exception or sys.exit() there is a SpecError (one line)."""
    project_on_path()
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError) as err:
        raise SpecError(
            f"module {module} is not importable ({err}); install its package, or put its folder on PYTHONPATH"
        ) from None
    except (Exception, SystemExit) as err:
        raise SpecError(f"module {module}: its package fails on import: {user_error(err)}") from None


def user_error(err: BaseException) -> str:
    """One line for a failure of the user's code: the exception's type and first line; sys.exit() said as such."""
    if isinstance(err, SystemExit):
        return f"it called sys.exit({err.code!r}); a model's code must not exit"
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def _module_origin(module: str) -> str | None:
    try:
        found = find_module(module)
    except SpecError:
        return None
    return found.origin if found is not None and found.origin not in (None, "built-in", "frozen") else None


def read_source(path: Path | str, where: str, name: str) -> bytes:
    """A Python file's bytes: its encoding is Python's to read (a `# -*- coding: latin-1 -*-` line), not ours."""
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise SpecError(f"model spec {name!r}: {where} cannot be read ({err.strerror})") from None


def _defines(source: bytes | str, function: str) -> bool:
    """Whether a module's source binds `function` at its top level: a def or class, an assignment (plain, annotated,
    augmented, unpacked, a walrus), an import, in the module's body or in any if/try/with/for/while/match block at
    that level (`try: from fast import build` / `except ImportError: def build(): ...`), not inside a def or
    class. `from x import *` may bind it: left to the build."""

    def bound(target) -> bool:
        if isinstance(target, ast.Name):
            return target.id == function
        if isinstance(target, (ast.Tuple, ast.List)):
            return any(bound(t) for t in target.elts)
        if isinstance(target, ast.Starred):
            return bound(target.value)
        return False

    def binds(node) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return node.name == function
        if isinstance(node, ast.Assign):
            return any(bound(t) for t in node.targets)
        if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            return bound(node.target)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return any((a.asname or a.name.split(".")[0]) in (function, "*") for a in node.names)
        if isinstance(node, (ast.For, ast.AsyncFor)) and bound(node.target):
            return True
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
            item.optional_vars is not None and bound(item.optional_vars) for item in node.items
        ):
            return True
        if any(isinstance(n, ast.NamedExpr) and bound(n.target) for n in _shallow(node)):
            return True
        return any(binds(child) for child in _blocks(node))

    return any(binds(node) for node in ast.parse(source).body)


def _blocks(node) -> list:
    """The statements of a compound statement's blocks (if/else, try/except/else/finally, with, for, while, match),
    not those of a def or class."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    out = []
    for name in ("body", "orelse", "finalbody"):
        out += [n for n in getattr(node, name, []) or [] if isinstance(n, ast.stmt)]
    for handler in getattr(node, "handlers", []) or []:
        out += handler.body
    for case in getattr(node, "cases", []) or []:
        out += case.body
    return out


def _shallow(node) -> list:
    """The expressions of a statement itself (not of the statements in its blocks)."""
    out = []
    for field, value in ast.iter_fields(node):
        if field in ("body", "orelse", "finalbody", "handlers", "cases"):
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.AST):
                out += list(ast.walk(item))
    return out


def check(name: str) -> None:
    """Torch-free: the spec's form, its file exists (or its module can be found) and defines the function. A
    torchvision builder and a timm name are checked when built (that needs torch): `preflight`."""
    ref = parse(name)
    if ref.kind == "file":
        path = Path(ref.target)
        if not path.is_file():
            raise SpecError(f"model spec {name!r}: no file {ref.target} (a path relative to the project folder)")
        where = ref.target
        source = read_source(path, where, name)
    elif ref.kind == "module":
        try:
            found = find_module(ref.target)
        except SpecError as err:
            raise SpecError(f"model spec {name!r}: {err}") from None
        if found is None:
            raise SpecError(
                f"model spec {name!r}: module {ref.target} is not importable; install its package, or put its "
                f"folder on PYTHONPATH"
            )
        if not found.origin or not found.origin.endswith(".py"):
            return  # a compiled or namespace module: checked when built
        where = f"module {ref.target}"
        source = read_source(found.origin, where, name)
    else:
        return
    try:
        defined = _defines(source, ref.function)
    except SyntaxError as err:
        raise SpecError(f"model spec {name!r}: {where} does not parse (line {err.lineno}: {err.msg})") from None
    except (UnicodeDecodeError, ValueError) as err:  # bytes not in the file's declared (or the default) encoding
        raise SpecError(
            f"model spec {name!r}: {where} is not Python source in its encoding ({type(err).__name__}); save it as "
            f"UTF-8 or declare its encoding on its first line"
        ) from None
    if not defined:
        raise SpecError(
            f"model spec {name!r}: {where} defines no {ref.function}; name a function that returns the model"
        )


# ----------------------------------------------------------------------------- facts, cached (torch-free reading)

FACTS_FOLDER = "results/models"  # <slug>.json: a spec model's facts, keyed by the spec and its files' sha256


def facts_path(name: str, folder: Path | str = FACTS_FOLDER) -> Path:
    return Path(folder) / f"{slug(name)}.json"


def facts_document(name: str, entry: dict) -> dict:
    return {"schema": 1, "spec": name, "files": files(name), "sha256": file_sha256(name), "facts": entry}


def read_facts(name: str, folder: Path | str = FACTS_FOLDER) -> dict | None:
    """The cached facts entry of a spec model (parameters, train_flops_per_image, flops_by_kind, layers, ...; as
    modelfacts.json has them), or None where there is none or its spec or source files changed since."""
    import json

    path = facts_path(name, folder)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("spec") != name or doc.get("schema") != 1:
        return None
    try:
        current = file_sha256(name)
    except OSError:
        return None
    return doc.get("facts") if doc.get("sha256") == current else None


def description(name: str) -> str:
    ref = parse(name)
    if ref.kind in ("torchvision", "timm"):
        return f"{ref.kind} {ref.target}, untrained, {NUM_CLASSES} classes (a model named by spec)"
    return f"{ref.function}() of {ref.target} (a model named by spec)"
