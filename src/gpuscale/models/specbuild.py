"""Building a model named by spec (gpuscale.models.spec): the user's code run, torch imported.

`build` returns the untrained network; `preflight` also asks of it what a training job will (trainable parameters, a
forward and backward pass of 32x32 images on the CPU giving 10 logits each, an evaluation pass). Each failure is a
SpecError whose str() is one line saying what is wrong and the fix; what the user's code prints goes to stderr.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import io
import sys
import warnings
from pathlib import Path

from gpuscale.models.spec import (
    IMAGE_SHAPE,
    NUM_CLASSES,
    TIMM_INSTALL,
    ModelRef,
    SpecError,
    parse,
    project_on_path,
    user_error,
)


def _torch_state() -> dict:
    """torch's process-wide settings a model's code can change and a timing would silently carry (None where torch
    is not imported yet)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    return {
        "threads": torch.get_num_threads(),
        "default dtype": torch.get_default_dtype(),
        "anomaly detection": torch.is_anomaly_enabled(),
        "grad mode": torch.is_grad_enabled(),
        "deterministic algorithms": (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ),
    }


def _restore_torch_state(state: dict) -> list[str]:
    """Set back what the user's code changed of `state`; returns what it had changed, as 'name old -> new'."""
    import torch

    now = _torch_state()
    changed = [f"{key} {state[key]} -> {now[key]}" for key in state if now.get(key) != state[key]]
    torch.set_num_threads(state["threads"])
    torch.set_default_dtype(state["default dtype"])
    torch.autograd.set_detect_anomaly(state["anomaly detection"])
    torch.set_grad_enabled(state["grad mode"])
    torch.use_deterministic_algorithms(
        state["deterministic algorithms"][0], warn_only=state["deterministic algorithms"][1]
    )
    return changed


@contextlib.contextmanager
def _user_code(failure: str, raised: bool = False, fix: str = ""):
    """Run the user's code (an import, a builder, a forward pass) with what it prints kept off stdout, where a
    command's answer goes: said on stderr once it has returned; where it fails (an exception, sys.exit(), any
    BaseException but a signal's, or an argparse parser reading our command line), one SpecError line: `failure`
    ("... raised TypeError: ..." where `raised`), why, the last line it printed, if any, and `fix`. torch's
    process-wide settings (threads, default dtype, anomaly detection, grad mode, deterministic algorithms) are set
    back afterwards, with a note on stderr where it changed them: a builder calling torch.set_num_threads(1) had
    every epoch timed on one thread, the record none the wiser."""
    printed = io.StringIO()
    state = _torch_state()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            yield
    except BaseException as err:
        if isinstance(err, KeyboardInterrupt) or getattr(err, "from_signal", False):
            raise  # Ctrl-C or SIGTERM while the user's code ran: the command says it was interrupted
        if isinstance(err, SpecError):
            raise
        lines = printed.getvalue().strip().splitlines()
        said = f" (it printed: {lines[-1].strip()[:160]})" if lines else ""
        exited = isinstance(err, SystemExit)
        text = f"{failure} raised {user_error(err)}" if raised and not exited else f"{failure}: {user_error(err)}"
        raise SpecError(f"{text}{said}{f'; {fix}' if fix and not exited else ''}") from None
    finally:
        changed = _restore_torch_state(state) if state else []
    sys.stderr.write(printed.getvalue())
    if changed:
        who = failure.split(": ")[0]
        print(
            f"gpuscale: note: {who} changed torch's {', '.join(changed)}; set back (a model's code must leave "
            f"torch's settings as it found them)",
            file=sys.stderr,
        )


def _function(ref: ModelRef):
    if ref.kind == "file":
        path = Path(ref.target)
        if not path.is_file():
            raise SpecError(f"model spec {ref.text!r}: no file {ref.target} (a path relative to the project folder)")
        project_on_path()  # its own imports of the project's modules (a helper) resolve from any entry point
        module_name = f"gpuscale_user_model_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        try:
            with _user_code(f"model spec {ref.text!r}: {ref.target} fails on import"):
                loader_spec.loader.exec_module(module)
        except SpecError:
            del sys.modules[module_name]
            raise
    else:
        project_on_path()
        with _user_code(f"model spec {ref.text!r}: module {ref.target} fails on import"):
            try:
                module = importlib.import_module(ref.target)
            except ModuleNotFoundError as err:
                raise SpecError(
                    f"model spec {ref.text!r}: module {ref.target} is not importable ({err}); install its "
                    f"package, or put its folder on PYTHONPATH"
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
        with warnings.catch_warnings(), _user_code(f"model spec {name!r}: torchvision's {ref.target}"):
            warnings.simplefilter("ignore")  # its own deprecations are not the user's to act on
            model = torchvision.models.get_model(ref.target, weights=None, num_classes=num_classes)
    elif ref.kind == "timm":
        try:
            import timm
        except ImportError:
            raise SpecError(f"model spec {name!r}: timm is not installed; {TIMM_INSTALL}") from None
        names = timm.list_models()
        if ref.target not in names:
            raise SpecError(f"model spec {name!r}: timm has no model {ref.target!r}{_close(ref.target, names)}")
        with warnings.catch_warnings(), _user_code(f"model spec {name!r}: timm's {ref.target}"):
            warnings.simplefilter("ignore")
            model = timm.create_model(ref.target, pretrained=False, num_classes=num_classes)
    else:
        function = _function(ref)
        if isinstance(function, nn.Module):  # `model = nn.Sequential(...)` at the module's top level: the network
            return function
        takes = _takes_num_classes(function)
        call = f"{ref.function}(num_classes={num_classes})" if takes else f"{ref.function}()"
        with _user_code(
            f"model spec {name!r}: {ref.function}()", True, f"it must return the network when called as {call}"
        ):
            model = function(num_classes=num_classes) if takes else function()
    if not isinstance(model, nn.Module):
        raise SpecError(
            f"model spec {name!r}: {ref.function or ref.target}() returned {type(model).__name__}, not a "
            f"torch.nn.Module; return the network"
        )
    return model


_UNCOUNTABLE = (
    "gpuscale copies the network, counts its parameters and hooks its layers: lazy modules, torch.nn.utils.weight_norm "
    "(use torch.nn.utils.parametrizations.weight_norm), objects that cannot be copied and TorchScript modules cannot be"
)


def preflight(name: str, num_classes: int = NUM_CLASSES):
    """build(), then what a training job will ask of the network, on the CPU: trainable parameters, a training-mode
    forward of two 32x32 images giving one (2, num_classes) tensor, its backward pass, an evaluation-mode forward of
    three, and gpuscale's own counting, copying and hooking of it. Returns the model. Run before any timing job
    (gpuscale validate, train's checks, probe, estimate, the Snakefile)."""
    import torch

    model = build(name, num_classes)
    with torch.random.fork_rng(devices=[]):
        if not any(p.requires_grad for p in model.parameters()):
            raise SpecError(
                f"model spec {name!r}: has no trainable parameters (none, or all frozen); training needs some: "
                f"return the network with requires_grad left on"
            )
        # what gpuscale does with a model before it runs it: counts its parameters (a record's first fact), copies
        # it (the facts, the layer table); a LazyLinear, the old weight_norm, a module holding a lock passed every
        # other check and ended in a traceback there
        from gpuscale.models import nets

        with _user_code(f"model spec {name!r}: cannot be counted or copied", fix=_UNCOUNTABLE):
            nets.parameter_count(model)
            copy.deepcopy(model)
        with _user_code(f"model spec {name!r}: fails on a batch of 32x32 images"):
            out = model.cpu().train()(torch.randn(2, *IMAGE_SHAPE))
        _check_output(name, out, 2, num_classes, "in training mode")
        with _user_code(f"model spec {name!r}: fails on the backward pass of a batch of 32x32 images"):
            out.float().square().mean().backward()
        # a third image and evaluation mode, as the test pass runs it: a batch size written into the network, or a
        # forward that only works while training, fails here rather than in the timing job
        with _user_code(f"model spec {name!r}: fails on 3 images in evaluation mode"), torch.no_grad():
            out = model.eval()(torch.randn(3, *IMAGE_SHAPE))
        _check_output(name, out, 3, num_classes, "in evaluation mode")
        model.zero_grad(set_to_none=True)
        # then what gpuscale's probe does with it: hooks its layers, counts its FLOPs (on a copy)
        with _user_code(f"model spec {name!r}: cannot be counted or copied", fix=_UNCOUNTABLE):
            nets.training_cost(model)
            nets.layer_calls(model)
    return model.train()


def _check_output(name: str, out, images: int, num_classes: int, mode: str) -> None:
    import torch

    if not isinstance(out, torch.Tensor):
        builder = parse(name).kind in ("torchvision", "timm")
        fix = (
            "gpuscale trains networks that return their logits alone: wrap it in your own function, or pick another"
            if builder
            else "return the logits alone (no auxiliary outputs)"
        )
        raise SpecError(
            f"model spec {name!r}: returns {type(out).__name__} {mode}, not one tensor of logits ({images}, "
            f"{num_classes}); {fix}"
        )
    if tuple(out.shape) != (images, num_classes):
        raise SpecError(
            f"model spec {name!r}: gives shape {tuple(out.shape)} for {images} images, not ({images}, {num_classes}), "
            f"{mode}: its last layer must have {num_classes} outputs (or take num_classes)"
        )
