"""Device kinds: one line in gpuscale.devices.KINDS and one module (here: this test module) make a kind.

"fakegpu" is registered in this test process only: a GPU whose torch side is defined below and whose tensors live
on the CPU (its device is the string "cpu" with fakegpu's type). Nothing else is edited for it.
"""

from __future__ import annotations

import sys

import pytest

from gpuscale import devices, words
from gpuscale.contract import settings
from gpuscale.predict import prediction

torch = pytest.importorskip("torch")

from gpuscale.measure import devices as runtimes  # noqa: E402
from gpuscale.measure import energy, epoch, layertable, train, variants  # noqa: E402


class FakeDevice(str):
    """What fakegpu's torch side hands out: torch reads it as "cpu", measure asks its `type` for the kind."""

    type = "fakegpu"

    def __new__(cls, index=None):
        device = super().__new__(cls, "cpu")
        device.index = index
        return device


class FakeStamps(runtimes.Stamps):
    taken: list[int] = []

    def __call__(self, i: int) -> None:
        FakeStamps.taken.append(i)
        super().__call__(i)


class FakeGpu(runtimes.Device):
    phase_clock = "fake events"
    clock = "perf_counter after the fake synchronize"
    syncs = 0

    def torch_device(self, index):
        return FakeDevice(index)

    def unavailable(self, device):
        return None if (device.index or 0) < 2 else f"this host has 2 fake GPUs; fakegpu-{device.index} does not exist"

    def unavailable_processes(self, spec, world):
        return f"{spec} needs {world} fake GPUs; this host has 2" if world > 2 else None

    def synchronize(self, device):
        FakeGpu.syncs += 1

    def stamps(self):
        return FakeStamps()

    def energy_meter(self, device):
        meter = energy.Meter()
        meter.reason = "a fake GPU has no energy counter"
        return meter


DEVICE = FakeGpu
FAKE = devices.Kind(
    "fakegpu", gpu=True, words="GPU (fake)", indexed=True, parallel="{n} fake GPUs", runtime=__name__
)  # the one line


@pytest.fixture
def fakegpu(monkeypatch):
    assert sys.modules[__name__].DEVICE is FakeGpu
    monkeypatch.setitem(devices.KINDS, "fakegpu", FAKE)
    FakeGpu.syncs = 0
    FakeStamps.taken = []
    return FAKE


def test_a_registered_kind_is_parsed_named_and_counted_a_gpu(fakegpu):
    assert not settings.is_device("fakegpu-3-1") and settings.is_device("fakegpu-ddp2")
    spec = settings.DeviceSpec.parse("fakegpu-1")
    assert (spec.kind, spec.index, spec.world_size, spec.gpu) == ("fakegpu", 1, 1, True)
    assert settings.DeviceSpec.parse("fakegpu-ddp4").per_process == "fakegpu"
    assert "fakegpu(-[0-9]+)?" in settings.DEVICE_PATTERN and "fakegpu" in settings.GPU_DEVICE_PATTERN
    assert "fakegpu-N" in settings.DEVICE_ALLOWED and "fakegpu-ddpN" in settings.DEVICE_ALLOWED
    assert (words.device("fakegpu-1"), words.device("fakegpu-ddp3")) == ("GPU (fake) #1", "3 fake GPUs")
    assert devices.is_gpu("fakegpu-ddp2") and "fakegpu" in prediction.GPU_DEVICES
    assert list(prediction.GPU_DEVICES) == ["cuda", "mps", "fakegpu"]


def test_without_its_line_the_kind_is_refused():
    assert not settings.is_device("fakegpu") and not devices.is_gpu("fakegpu")
    with pytest.raises(ValueError, match=r"'fakegpu' is malformed \(allowed: cpu, cuda, cuda-N, mps, cpu-ddpN"):
        settings.DeviceSpec.parse("fakegpu")
    assert words.device("fakegpu") == "fakegpu" and "fakegpu" not in prediction.GPU_DEVICES


def test_a_registered_kind_answers_for_its_availability_and_energy(fakegpu):
    device = train.torch_device("fakegpu-1")
    assert isinstance(device, FakeDevice) and device.index == 1
    assert train.device_unavailable_reason(device) is None
    assert "fakegpu-2 does not exist" in train.device_unavailable_reason(train.torch_device("fakegpu-2"))
    assert train.spec_unavailable_reason("fakegpu-ddp2") is None
    assert "needs 3 fake GPUs" in train.spec_unavailable_reason("fakegpu-ddp3")
    assert runtimes.of(device).energy_meter(device).describe()["reason"] == "a fake GPU has no energy counter"
    assert variants.compile_mode({**variants.PAPER_KNOBS.to_dict(), "compile": "reduce-overhead"}, "fakegpu") == "none"


def _tiny(device):
    torch.manual_seed(0)
    images, labels = torch.randn(24, 3, 4, 4), torch.randint(0, 3, (24,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels), batch_size=8)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 3)).to(device)
    return model, loader, torch.nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1)


def test_a_registered_kind_is_synchronised_and_timed_by_its_own_module(fakegpu):
    device = train.torch_device("fakegpu")
    model, loader, criterion, optimizer = _tiny(device)
    runner = variants.Runner("paper", variants.PAPER_KNOBS, device)
    stats = epoch.train_epoch(model, loader, device, criterion, optimizer, lambda *a: None, runner=runner)
    assert stats["steps"] == 3 and FakeGpu.syncs == 2  # before the clock starts, and before it stops
    profile = epoch.profile_phases(model, loader, device, criterion, optimizer, 2, runner)
    assert profile["clock"] == "fake events" and FakeStamps.taken == [0, 1, 2, 3, 4] * 2
    assert FakeGpu.syncs == 2 + 1 + 2  # the profile's start, then after each step
    layertable.timed_window(lambda: None, device, 0.0, max_steps=1)
    assert FakeGpu.syncs == 6
    assert runtimes.of(device).clock == "perf_counter after the fake synchronize"


@pytest.mark.parametrize(
    ("name", "gpu", "clock", "pins"),
    [("cpu", False, "perf_counter", False), ("cuda", True, "perf_counter after torch.cuda.synchronize", True),
     ("mps", True, "perf_counter", False)],
)  # fmt: skip
def test_the_built_in_kinds_keep_what_records_say(name, gpu, clock, pins):
    kind = runtimes.of(name)
    assert (kind.facts.gpu, kind.clock, kind.pins_memory) == (gpu, clock, pins)
    assert kind.process_group == ("nccl" if name == "cuda" else "gloo")
    assert (kind.phase_clock == "cuda events (data wait: perf_counter)") == (name == "cuda")


def test_the_cpu_kind_times_with_perf_counter_and_has_no_gpu_facts():
    device = torch.device("cpu")
    kind = runtimes.of(device)
    stamps = kind.stamps()
    for i in range(5):
        stamps(i)
    assert len(stamps.spans()) == 4 and all(s >= 0 for s in stamps.spans())
    assert kind.environment(device) is None and kind.energy_meter(device).describe()["reason"] == "no GPU in this run"
    assert kind.unavailable(device) is None and kind.precision("fp32") == {}


def test_the_pattern_is_the_one_the_schemas_and_rules_had():
    assert devices.pattern() == "cpu|cuda(-[0-9]+)?|mps|(cpu|cuda)-ddp([2-9]|[1-9][0-9]+)"
    assert devices.pattern(parallel=False) == "cpu|cuda(-[0-9]+)?|mps"
    assert devices.pattern(gpu_only=True) == "cuda(-[0-9]+)?|mps"
    assert [words.device(d) for d in ("cpu", "cuda", "cuda-1", "cuda-0", "mps", "cuda-ddp4", "cpu-ddp2")] == [
        "CPU", "GPU (CUDA)", "GPU (CUDA) #1", "GPU (CUDA) #0", "GPU (Apple MPS)", "4 GPUs (CUDA, data-parallel)",
        "2 CPU processes (gloo, data-parallel)",
    ]  # fmt: skip


def test_a_kind_name_is_letters_and_digits():
    with pytest.raises(ValueError, match="lower-case letters and digits"):
        devices.Kind("fake-gpu", gpu=True, words="x")
