"""The lock files of requirements/ and the checks around them (standard library only: runs before any venv).

    python requirements/lock.py compile      # refresh core.txt and lock.txt from pyproject.toml (needs uv)
    python requirements/lock.py check        # exit 1, saying why, when a lock disagrees with pyproject.toml
    python requirements/lock.py without-torch requirements/lock.txt   # the lock less the torch/CUDA stack
    python requirements/lock.py advise TORCH # the note `make install` prints first

lock.txt pins the full environment (every extra: what `make reproduce` and `make test` need), core.txt the
training core alone (a bare GPU host). Both are resolved for CPython 3.11 on x86_64 Linux (manylinux_2_28),
with the sha256 of every file of each pinned release, so `pip install --require-hashes -r` refuses anything else.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
LOCKS = {"core.txt": [], "lock.txt": ["workflow", "report", "slurm", "energy", "hardware", "test"]}
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_28"
STAMP = "# pyproject-dependencies-sha256: "
# What PyPI's torch wheel brings for CUDA; another TORCH flavour brings its own from the PyTorch index.
TORCH_STACK = re.compile(r"^(torch|torchvision|triton|nvidia-(?!ml-py$)[a-z0-9-]+|cuda-[a-z0-9-]+)$")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["project"]


def dependencies_digest(extras: list[str]) -> str:
    """A hash of exactly what a lock was resolved from: the core list and the extras it includes."""
    meta = project()
    chosen = {"dependencies": meta["dependencies"], "requires-python": meta.get("requires-python")}
    chosen["extras"] = {name: meta["optional-dependencies"][name] for name in extras}
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()


def pins(lock: Path) -> dict[str, str]:
    """{normalized name: version} of every requirement line in a lock file."""
    found = {}
    for line in lock.read_text().splitlines():
        match = PIN.match(line)
        if match:
            found[normalize(match.group(1))] = match.group(2)
    return found


def requirements(extras: list[str]) -> list[str]:
    meta = project()
    reqs = list(meta["dependencies"])
    for name in extras:
        reqs += [r for r in meta["optional-dependencies"][name] if not normalize(r).startswith("gpuscale[")]
    return reqs


def problems(lock_name: str) -> list[str]:
    """Why requirements/<lock_name> does not match pyproject.toml ([] when it does)."""
    lock = ROOT / "requirements" / lock_name
    extras = LOCKS[lock_name]
    if not lock.is_file():
        return [f"requirements/{lock_name} is missing: run `make lock`"]
    text = lock.read_text()
    found = []
    stamp = next((line[len(STAMP) :].strip() for line in text.splitlines() if line.startswith(STAMP)), None)
    if stamp != dependencies_digest(extras):
        found.append(
            f"requirements/{lock_name} was resolved from other dependencies than pyproject.toml's: run `make lock`"
        )
    locked = pins(lock)
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip vendors packaging; the stamp above already caught any edit
        return found
    for line in requirements(extras):
        req = Requirement(line)
        version = locked.get(normalize(req.name))
        if version is None:
            found.append(f"requirements/{lock_name}: {req.name} (pyproject.toml: {line}) is not locked")
        elif not req.specifier.contains(version, prereleases=True):
            found.append(f"requirements/{lock_name}: {req.name}=={version} does not satisfy pyproject.toml's {line}")
    return found


def compile_locks(uv: str) -> None:
    for lock_name, extras in LOCKS.items():
        out = ROOT / "requirements" / lock_name
        argv = [uv, "pip", "compile", "pyproject.toml", "--quiet", "--generate-hashes", "--no-header"]
        argv += [
            "--python-version",
            PYTHON_VERSION,
            "--python-platform",
            PLATFORM,
            "--index-url",
            "https://pypi.org/simple",
        ]
        argv += [f"--extra={name}" for name in extras] + ["-o", str(out)]
        subprocess.run(argv, cwd=ROOT, check=True)
        header = [
            f"# requirements/{lock_name}: {'the full environment' if extras else 'the training core'}, written by"
            f" `make lock` (python requirements/lock.py compile) with uv:",
            f"#   uv pip compile pyproject.toml --generate-hashes --python-version {PYTHON_VERSION}"
            f" --python-platform {PLATFORM}" + "".join(f" --extra={name}" for name in extras),
            "# Install: pip install --require-hashes -r requirements/" + lock_name + " && pip install --no-deps -e .",
            STAMP + dependencies_digest(extras),
        ]
        out.write_text("\n".join(header) + "\n" + out.read_text())
        print(f"wrote requirements/{lock_name} ({len(pins(out))} packages)")


def without_torch(lock: Path) -> str:
    """The lock's text less the torch/torchvision/CUDA entries (each entry is a line plus its --hash lines)."""
    kept, skipping = [], False
    for line in lock.read_text().splitlines():
        match = PIN.match(line)
        if match:
            skipping = bool(TORCH_STACK.match(normalize(match.group(1))))
        elif not line.startswith((" ", "\t")):
            skipping = False
        if not skipping:
            kept.append(line)
    return "\n".join(kept) + "\n"


def has_nvidia_gpu() -> bool:
    return Path("/proc/driver/nvidia/gpus").is_dir() or shutil.which("nvidia-smi") is not None


def advise(torch_flavour: str) -> str:
    if torch_flavour in ("", "default", "pypi"):
        if has_nvidia_gpu():
            return "gpuscale: installing torch 2.14.1 from PyPI (CUDA build) from requirements/lock.txt"
        return (
            "gpuscale: no NVIDIA GPU on this machine, but PyPI's torch brings about 5 GB of CUDA libraries.\n"
            "gpuscale: to save them, stop now (Ctrl-C) and run `make reproduce TORCH=cpu` (CPU wheels from the PyTorch"
            " index; see docs/install.md)."
        )
    return f"gpuscale: installing torch 2.14.1+{torch_flavour} from https://download.pytorch.org/whl/{torch_flavour}"


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "check"
    if command == "compile":
        uv = argv[1] if len(argv) > 1 else shutil.which("uv")
        if not uv:
            print("uv not found: `make lock` installs it into .venv-tools", file=sys.stderr)
            return 1
        compile_locks(uv)
        return 0
    if command == "check":
        found = [p for name in LOCKS for p in problems(name)]
        for problem in found:
            print(problem, file=sys.stderr)
        return 1 if found else 0
    if command == "without-torch":
        sys.stdout.write(without_torch(Path(argv[1])))
        return 0
    if command == "advise":
        print(advise(argv[1] if len(argv) > 1 else ""))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
