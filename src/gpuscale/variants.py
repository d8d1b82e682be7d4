"""Execution variants: how a run uses its device (precision, memory format, compilation, input pipeline,
fused optimizer, cuDNN autotuning). A variant is a named set of these knobs in params.yaml (`variants:`).

Where a knob cannot apply on a device (a fused optimizer or bf16 the device lacks), the run falls back
and says so in the record's `variant.effective`, so no setting is claimed that did not run.
"""

from __future__ import annotations

import contextlib

import torch

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# The knobs of params.yaml's `paper` variant, for callers that train without params (benchmarks).
PAPER_KNOBS = {"precision": "default", "memory_format": "contiguous", "compile": "none", "loader": "host",
               "fused_optimizer": False, "cudnn_benchmark": False}


class Runner:
    """Applies a variant's knobs to one run on one device and remembers what was in effect."""

    def __init__(self, name: str, knobs: dict, device: torch.device):
        self.name, self.knobs, self.device = name, dict(knobs), device
        self.effective: dict = {}
        self.notes: list[str] = []
        self._backend()
        self.autocast_dtype = AUTOCAST_DTYPES.get(knobs["precision"])
        if self.autocast_dtype is not None and device.type == "cpu" and not self._cpu_autocast_ok():
            self.notes.append(f"{knobs['precision']} autocast unavailable on this CPU: ran fp32")
            self.autocast_dtype = None
        self.effective["autocast"] = str(self.autocast_dtype).replace("torch.", "") if self.autocast_dtype else None
        self.scaler = (torch.amp.GradScaler("cuda") if self.autocast_dtype == torch.float16 and device.type == "cuda"
                       else None)
        self.channels_last = knobs["memory_format"] == "channels_last"

    def _backend(self) -> None:
        precision = self.knobs["precision"]
        if self.device.type == "cuda":
            if precision == "fp32":  # strict fp32: no TF32 anywhere
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
            elif precision in ("tf32", "bf16", "fp16"):
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
            # "default": PyTorch's own (TF32 convolutions, fp32 matmuls)
            self.effective["matmul_tf32"] = torch.backends.cuda.matmul.allow_tf32
            self.effective["cudnn_tf32"] = torch.backends.cudnn.allow_tf32
        # autotuning picks algorithms by timing: never together with deterministic mode
        torch.backends.cudnn.benchmark = (bool(self.knobs["cudnn_benchmark"])
                                          and not torch.are_deterministic_algorithms_enabled())
        self.effective["cudnn_benchmark"] = torch.backends.cudnn.benchmark

    def _cpu_autocast_ok(self) -> bool:
        try:
            with torch.autocast("cpu", dtype=self.autocast_dtype):
                torch.nn.functional.linear(torch.ones(2, 2), torch.ones(2, 2))
            return True
        except (RuntimeError, AssertionError):
            return False

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
        mode = self.knobs["compile"]
        if mode == "reduce-overhead" and self.device.type != "cuda":
            self.notes.append("compile reduce-overhead means CUDA graphs, which need a CUDA device: ran uncompiled")
            mode = "none"
        if mode != "none":
            # static shapes: the last, smaller batch gets its own graph instead of a dynamic-shape rebuild
            model = torch.compile(model, mode=None if mode == "default" else mode, dynamic=False)
        self.effective["compile"] = mode
        return model

    def inputs(self, images: torch.Tensor) -> torch.Tensor:
        images = images.to(self.device, non_blocking=True)
        if self.channels_last and images.dim() == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        return images

    def optimizer_kwargs(self) -> dict:
        return {"fused": True} if self.knobs["fused_optimizer"] else {}

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
        return {"name": self.name, "knobs": self.knobs, "effective": self.effective, "notes": self.notes}
