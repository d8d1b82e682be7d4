"""The layer table's timed step does, for one layer call, what the network does for it and nothing more (issue 27):
the same operations as that layer's share of a real forward + backward of a tiny network, the same gradients, and
no gradient accumulated into any leaf. No timing here: the ops are counted and the gradients compared."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from gpuscale.measure import layertable
from gpuscale.models import nets

# ops that move no data: how a view or an alias is made differs between a network and an isolated call
METADATA_OPS = ("detach", "alias", "view", "as_strided", "expand", "transpose", "permute", "t.default", "select.int")


class TinyNet(nn.Module):
    """A first layer whose images need no gradient, batch norm, in-place activations (ReLU6 keeps a copy of its
    input for its gradient, ReLU does not), a depthwise convolution, attention (a tuple output, the same tensor
    three times, a non-tensor option, a non-contiguous input) and a linear head. Each module called once."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(8)
        self.act = nn.ReLU6(inplace=True)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.relu = nn.ReLU(inplace=True)
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        x = self.act(self.norm(self.stem(x)))
        x = self.relu(self.depthwise(x))
        tokens = x.flatten(2).transpose(1, 2)
        tokens = self.attention(tokens, tokens, tokens, need_weights=False)[0]
        return self.head(tokens[:, 0])  # a class token's way: the attention's upstream gradient is dense


class OpLog(TorchDispatchMode):
    """Every aten op that runs, with the layer whose forward or backward runs it (None: neither)."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[object, str]] = []
        self.layer = None  # set by the forward hooks
        self.nodes: dict = {}  # backward node -> layer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        node = torch._C._current_autograd_node()
        self.ops.append((self.nodes.get(node) if node is not None else self.layer, str(func)))
        return func(*args, **(kwargs or {}))

    def counted(self, layer=None) -> Counter:
        return Counter(op for who, op in self.ops if who is layer and not any(m in op for m in METADATA_OPS))


def _backward_nodes(outputs, stop) -> set:
    """The backward nodes a layer's forward made: from its outputs' nodes back to its inputs' (not into them)."""
    seen, todo = set(), [o.grad_fn for o in outputs if o.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or node in seen or node in stop or type(node).__name__ == "AccumulateGrad":
            continue
        seen.add(node)
        todo += [n for n, _ in node.next_functions]
    return seen


def network_run(batch: int = 4):
    """The tiny network's forward + backward of a cross-entropy loss, as training makes them: per leaf-module call
    (in call order) its ops, its input values, the gradients that reached its outputs and its inputs, its
    parameters' gradients; and its LayerCalls."""
    torch.manual_seed(0)
    model = TinyNet().train()
    _, protos = nets.layer_calls(model, (3, 4, 4))
    log, seen, handles = OpLog(), [], []

    def before(module, args):
        tensors: list[torch.Tensor] = []  # the distinct tensors, as nets.TensorSpec names them
        for a in args:
            if isinstance(a, torch.Tensor) and all(a is not b for b in tensors):
                tensors.append(a)
        row = {"module": module, "inputs": [a.detach().clone() for a in tensors], "grads": {}, "out_grads": {}}
        row["stop"] = {a.grad_fn for a in tensors if a.grad_fn is not None}
        for i, a in enumerate(tensors):  # registered before an in-place op changes it: the gradient of its input
            if a.requires_grad:
                a.register_hook(lambda g, row=row, i=i: row["grads"].__setitem__(i, g))  # no op: nothing logged
        seen.append(row)
        log.layer = len(seen) - 1

    def after(module, args, out):
        row = seen[log.layer]
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, torch.Tensor)]
        for i, o in enumerate(outs):
            if o.requires_grad:
                o.register_hook(lambda g, row=row, i=i: row["out_grads"].__setitem__(i, g))
        for node in _backward_nodes(outs, row["stop"]):
            log.nodes[node] = log.layer
        log.layer = None

    for m in nets._leaf_modules(model):
        handles += [m.register_forward_pre_hook(before), m.register_forward_hook(after)]
    with log:
        nn.functional.cross_entropy(model(torch.randn(batch, 3, 4, 4)), torch.arange(batch) % 4).backward()
    for h in handles:
        h.remove()
    return seen, log, list(protos.values())


def layer_step(call, row=None) -> layertable.LayerStep:
    """The table's step for `call`; with a network `row`, on that call's input values and upstream gradient."""
    if row is None:
        return layertable.LayerStep(call, torch.device("cpu"), 4)
    specs = [a for a in call.args if isinstance(a, nets.TensorSpec)]
    leaves = iter([x.clone().requires_grad_(s.requires_grad) for x, s in zip(row["inputs"], specs, strict=True)])
    inputs: list = []
    for a in call.args:
        inputs.append(
            inputs[a.index] if isinstance(a, nets.SameAs) else next(leaves) if isinstance(a, nets.TensorSpec) else a
        )
    step = layertable.LayerStep(call, torch.device("cpu"), 4, inputs=inputs)
    step.grad_outputs = [row["out_grads"][i] for i in sorted(row["out_grads"])]
    return step


def test_the_timed_step_makes_the_layer_s_own_ops_as_the_network_makes_them_and_no_others():
    """No sum of the outputs, no accumulation into a `.grad`, no copy of an in-place layer's input beyond the one
    autograd makes inside the network (ReLU6's): op for op, the layer's share of the network's step."""
    seen, log, calls = network_run()
    assert len(seen) == len(calls) == 7
    for index, call in enumerate(calls):
        step = layer_step(call)
        step()  # warm-up: from the second call on, harness 1 also accumulated into the leaves' .grad
        mine = OpLog()
        with mine:
            step()
        assert mine.counted() == log.counted(index), call.key
        leaves = [a for a in step.inputs if isinstance(a, torch.Tensor)] + list(step.module.parameters())
        assert all(t.grad is None for t in leaves), call.key
    clones = [log.counted(i)["aten.clone.default"] for i in range(len(calls))]
    assert clones[2] == 1 and clones[4] == 0  # ReLU6 in place: autograd's own copy; ReLU in place: none


def test_the_timed_step_returns_the_gradients_the_network_computes_for_that_layer():
    seen, _, calls = network_run()
    for row, call in zip(seen, calls, strict=True):
        step = layer_step(call, row)
        got = step()
        params = list(step.module.parameters())
        assert len(got) == len(step.wanted) + len(params), call.key
        wanted = [
            i for i, spec in enumerate(a for a in call.args if isinstance(a, nets.TensorSpec)) if spec.requires_grad
        ]
        assert sorted(row["grads"]) == wanted, call.key  # the first layer's images: no gradient
        for grad, i in zip(got, wanted, strict=False):
            assert grad.shape == row["inputs"][i].shape
            assert torch.allclose(grad, row["grads"][i], atol=1e-5), call.key
        for grad, original in zip(got[len(step.wanted) :], row["module"].parameters(), strict=True):
            assert grad.shape == original.shape
            assert torch.allclose(grad, original.grad, atol=1e-5), call.key


def test_an_in_place_layer_starts_each_pass_from_its_input_as_made_and_a_layer_without_gradients_only_runs():
    calls = network_run()[2]
    relu = layer_step(calls[4])
    before = relu.inputs[0].detach().clone()
    relu()
    assert not torch.equal(relu.inputs[0], before)  # rewritten in place, as inside the network
    layertable.timed_passes({"relu": relu}, torch.device("cpu"), 1, 0.0)
    relu.reset()
    assert torch.equal(relu.inputs[0], before)
    frozen = nets.LayerCall("frozen", nn.Conv2d(3, 4, 1).requires_grad_(False), calls[0].args, {})
    assert layer_step(frozen)() == ()  # nothing needs a gradient: the forward alone, as in a network


@pytest.mark.parametrize("harness", [None, 1, 2])
def test_the_probe_schema_reads_a_layer_table_of_either_harness(harness):
    from test_costmodel import table_probe

    from gpuscale.measure import probe

    doc = table_probe()
    if harness is not None:
        doc["layer_table"]["harness"] = harness
    probe.validate(doc)
    doc["layer_table"]["harness"] = 0
    with pytest.raises(probe.ProbeError, match="harness"):
        probe.validate(doc)
