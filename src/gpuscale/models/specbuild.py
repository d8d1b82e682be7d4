"""Building a model named by spec (gpuscale.models.spec): the user's code run, torch imported.

`build` returns the untrained network; `preflight` also runs two 32x32 images through it on the CPU and checks
the output's shape. Each failure is a SpecError whose str() is one line saying what is wrong and the fix.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

from gpuscale.models.spec import IMAGE_SHAPE, NUM_CLASSES, TIMM_INSTALL, ModelRef, SpecError, parse


def _function(ref: ModelRef):
    if ref.kind == "file":
        path = Path(ref.target)
        if not path.is_file():
            raise SpecError(f"model spec {ref.text!r}: no file {ref.target} (a path relative to the project folder)")
        module_name = f"gpuscale_user_model_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as err:  # the user's code: any failure is theirs to fix, said in one line
            del sys.modules[module_name]
            raise SpecError(
                f"model spec {ref.text!r}: {ref.target} fails on import: {type(err).__name__}: {err}"
            ) from None
    else:
        try:
            module = importlib.import_module(ref.target)
        except ModuleNotFoundError as err:
            raise SpecError(
                f"model spec {ref.text!r}: module {ref.target} is not importable ({err}); install its package, or "
                f"put its folder on PYTHONPATH"
            ) from None
        except Exception as err:
            raise SpecError(
                f"model spec {ref.text!r}: module {ref.target} fails on import: {type(err).__name__}: {err}"
            ) from None
    function = getattr(module, ref.function, None)
    if function is None or not callable(function):
        raise SpecError(
            f"model spec {ref.text!r}: {ref.target} defines no function {ref.function}; name a function that returns "
            f"the model"
        )
    return function


def _takes_num_classes(function) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return "num_classes" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _close(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=3)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def build(name: str, num_classes: int = NUM_CLASSES):
    """The untrained network a spec names, for `num_classes` classes (imports torch and runs the user's code)."""
    from torch import nn

    ref = parse(name)
    if ref.kind == "torchvision":
        import torchvision

        builders = torchvision.models.list_models(module=torchvision.models)
        if ref.target not in builders:
            raise SpecError(
                f"model spec {name!r}: torchvision has no classification builder {ref.target!r}"
                f"{_close(ref.target, builders)} (torchvision.models.list_models() lists them)"
            )
        model = torchvision.models.get_model(ref.target, weights=None, num_classes=num_classes)
    elif ref.kind == "timm":
        try:
            import timm
        except ImportError:
            raise SpecError(f"model spec {name!r}: timm is not installed; {TIMM_INSTALL}") from None
        names = timm.list_models()
        if ref.target not in names:
            raise SpecError(f"model spec {name!r}: timm has no model {ref.target!r}{_close(ref.target, names)}")
        model = timm.create_model(ref.target, pretrained=False, num_classes=num_classes)
    else:
        function = _function(ref)
        try:
            model = function(num_classes=num_classes) if _takes_num_classes(function) else function()
        except Exception as err:
            raise SpecError(f"model spec {name!r}: {ref.function}() raised {type(err).__name__}: {err}") from None
    if not isinstance(model, nn.Module):
        raise SpecError(
            f"model spec {name!r}: {ref.function or ref.target}() returned {type(model).__name__}, not a "
            f"torch.nn.Module; return the network"
        )
    return model


def preflight(name: str, num_classes: int = NUM_CLASSES):
    """build(), then a training-mode forward of two 32x32 images on the CPU: the output must be (2, num_classes).
    Returns the model. Run before any timing job (gpuscale validate, train's checks, the Snakefile)."""
    import torch

    model = build(name, num_classes)
    with torch.random.fork_rng(devices=[]):
        try:
            out = model.cpu().train()(torch.randn(2, *IMAGE_SHAPE))
        except Exception as err:
            raise SpecError(
                f"model spec {name!r}: fails on a batch of 32x32 images: {type(err).__name__}: {_first_line(err)}"
            ) from None
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else None
    if shape != (2, num_classes):
        got = f"shape {shape}" if shape is not None else type(out).__name__
        raise SpecError(
            f"model spec {name!r}: gives {got} for 2 images, not (2, {num_classes}): its last layer must have "
            f"{num_classes} outputs (or take num_classes)"
        )
    return model


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else ""
