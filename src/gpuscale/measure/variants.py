"""Execution variants: how a run uses its device (precision, memory format, compilation, input pipeline,
fused optimizer, cuDNN autotuning). A variant is a named set of these knobs in params.yaml (`variants:`).

Where a knob cannot apply on a device (a fused optimizer or bf16 the device lacks), the run falls back
and says so in the record's `variant.effective`, so no setting is claimed that did not run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

import torch

from gpuscale.contract.settings import Variant
from gpuscale.measure import devices

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# The knobs of params.yaml's `paper` variant, for callers that train without params (benchmarks).
PAPER_KNOBS = Variant(
    precision="default",
    memory_format="contiguous",
    compile="none",
    compile_cache="cold",
    loader="host",
    fused_optimizer=False,
    cudnn_benchmark=False,
)
CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def compile_mode(knobs: Variant | dict, device_type: str) -> str:
    """The torch.compile mode a run gets on this kind of device: CUDA graphs (reduce-overhead) need a kind that has
    them (its `graphs`), so elsewhere the run is uncompiled."""
    knobs = Variant.of(knobs)
    return "none" if knobs.compile == "reduce-overhead" and not devices.of(device_type).graphs else knobs.compile


def inductor_cache_dir() -> str:
    """The directory torch.compile (Inductor) reads and fills unless told otherwise."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return os.environ["TORCHINDUCTOR_CACHE_DIR"]
    try:  # private, but it is what Inductor itself calls
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        return default_cache_dir()
    except ImportError:
        return os.path.join(tempfile.gettempdir(), "torchinductor_" + (os.environ.get("USER") or "unknown"))


def count_files(directory: str) -> int:
    return sum(len(files) for _, _, files in os.walk(directory))


@contextlib.contextmanager
def compile_cache(knobs: Variant | dict, device_type: str) -> Iterator[dict | None]:
    """Where a compiled run keeps what torch.compile produces, for the whole run (every process of it).

    `cold` (the default): a private, empty cache directory, removed afterwards, so the first epoch pays the whole
    compilation whatever ran on this machine before; runs of any order time alike. `shared`: Inductor's usual
    cache, which earlier runs may have filled; a warm cache can cut the first epoch several-fold, so the record
    counts the files it held when the run began. Yields None for a run that compiles nothing on this device.
    """
    if compile_mode(knobs, device_type) == "none":
        yield None
        return
    policy = Variant.of(knobs).cache_policy
    torch.compiler.reset()  # nothing compiled earlier in this process is reused: only the on-disk cache can be
    if policy == "shared":
        directory = inductor_cache_dir()
        yield {"policy": "shared", "files_at_start": count_files(directory) if os.path.isdir(directory) else 0}
        return
    saved = {name: os.environ.get(name) for name in CACHE_ENV}
    directory = tempfile.mkdtemp(prefix="gpuscale-compile-cache-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = directory
    os.environ["TRITON_CACHE_DIR"] = os.path.join(directory, "triton")
    try:
        yield {"policy": "cold", "files_at_start": 0}
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(directory, ignore_errors=True)


class Runner:
    """Applies a variant's knobs to one run on one device and remembers what was in effect."""

    def __init__(self, name: str, knobs: Variant | dict, device: torch.device, cache: dict | None = None):
        knobs = Variant.of(knobs)
        self.name, self.knobs, self.device, self.cache = name, knobs, device, cache
        self.kind = devices.of(device)
        self.effective: dict = {}
        self.notes: list[str] = []
        self._backend()
        self.autocast_dtype = AUTOCAST_DTYPES.get(knobs.precision)
        if self.autocast_dtype is not None and not self.kind.autocast_ok(self.autocast_dtype):
            self.notes.append(f"{knobs.precision} autocast unavailable on this {self.kind.facts.words}: ran fp32")
            self.autocast_dtype = None
        self.effective["autocast"] = str(self.autocast_dtype).replace("torch.", "") if self.autocast_dtype else None
        self.scaler = self.kind.grad_scaler(self.autocast_dtype) if self.autocast_dtype is not None else None
        self.channels_last = knobs.memory_format == "channels_last"

    def _backend(self) -> None:
        self.effective.update(self.kind.precision(self.knobs.precision))  # its own switches (CUDA's TF32)
        # autotuning picks algorithms by timing: never together with deterministic mode
        torch.backends.cudnn.benchmark = (
            bool(self.knobs.cudnn_benchmark) and not torch.are_deterministic_algorithms_enabled()
        )
        self.effective["cudnn_benchmark"] = torch.backends.cudnn.benchmark

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def prepare_model(self, model: torch.nn.Module, wrap=None) -> torch.nn.Module:
        """Memory format, then `wrap` (DistributedDataParallel, for data-parallel runs), then compilation."""
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.effective["memory_format"] = "channels_last" if self.channels_last else "contiguous"
        if wrap is not None:
            model = wrap(model)
        mode = compile_mode(self.knobs, self.device.type)
        if mode != self.knobs.compile:
            self.notes.append("compile reduce-overhead means CUDA graphs, which need a CUDA device: ran uncompiled")
        if mode != "none":
            # static shapes: the last, smaller batch gets its own graph instead of a dynamic-shape rebuild
            model = torch.compile(model, mode=None if mode == "default" else mode, dynamic=False)
            if self.cache is not None:  # which cache the compilation found: its cost lands in the warm-up epoch
                self.effective["compile_cache"] = self.cache["policy"]
                self.effective["compile_cache_files_at_start"] = self.cache["files_at_start"]
        self.effective["compile"] = mode
        return model

    def inputs(self, images: torch.Tensor) -> torch.Tensor:
        images = images.to(self.device, non_blocking=True)
        if self.channels_last and images.dim() == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        return images

    def optimizer_kwargs(self) -> dict:
        return {"fused": True} if self.knobs.fused_optimizer else {}

    def note_optimizer(self, fused: bool, reason: str | None = None) -> None:
        self.effective["fused_optimizer"] = fused
        if reason:
            self.notes.append(reason)

    def backward(self, loss: torch.Tensor) -> None:
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def step(self, optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)
            self.scaler.update()

    def backward_step(self, loss: torch.Tensor, optimizer) -> None:
        self.backward(loss)
        self.step(optimizer)

    def describe(self) -> dict:
        return {"name": self.name, "knobs": self.knobs.to_dict(), "effective": self.effective, "notes": self.notes}
