"""Data-parallel training on one host: torchrun starts the processes, DistributedDataParallel trains.

A device spec `cuda-ddpN` runs N processes, one GPU each, over NCCL; `cpu-ddpN` runs N processes on the CPU
over gloo (the same code path, testable anywhere). `gpuscale train` relaunches itself through torchrun
(`python -m torch.distributed.run --standalone`) when given such a device; inside, rank 0 keeps the clock,
with every rank meeting at a barrier wherever the clock is read, and writes the one record.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from dataclasses import dataclass

import torch
import torch.distributed as dist

from gpuscale.measure import devices

log = logging.getLogger("gpuscale.distributed")


def launched() -> bool:
    """True inside a process that torchrun started."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def relaunch(world_size: int, argv: list[str]) -> int:
    """Run `gpuscale <argv>` as `world_size` processes with torchrun's launcher (torch.distributed.elastic, as
    `torchrun --standalone --nproc-per-node N` sets it up: a c10d rendezvous on a free local port, no restarts).
    Called through its API rather than its command line, whose parser would take our --log for its --log-dir."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=world_size,
        run_id=uuid.uuid4().hex,
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
    )
    log.info("data-parallel: %d processes of `gpuscale %s` (torchrun's launcher)", world_size, " ".join(argv))
    try:
        elastic_launch(config, sys.executable)("-m", "gpuscale", *argv)
    except ChildFailedError as err:
        first = next(iter(err.failures.values()))
        log.error("data-parallel run failed: rank %d exited with %s", first.local_rank, first.exitcode)
        return first.exitcode if isinstance(first.exitcode, int) and first.exitcode > 0 else 1
    return 0


@dataclass
class Context:
    world_size: int
    rank: int
    local_rank: int
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.backend == "nccl":
            dist.barrier(device_ids=[self.local_rank])
        else:
            dist.barrier()

    def sum(self, values: list[float], device: torch.device) -> list[float]:
        """Element-wise sum over all processes."""
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def describe(self) -> dict:
        return {
            "world_size": self.world_size,
            "backend": self.backend,
            "launcher": "torchrun's (torch.distributed.elastic, standalone c10d rendezvous)",
            "clock": "rank 0's, every rank meeting at a barrier (after a device synchronise) where it is read",
            "energy_scope": "rank 0's device only (energy.gpu); CPU package energy covers the host",
        }


def setup(device_type: str, world_size: int) -> Context:
    """Join the process group torchrun set up (env:// rendezvous); pin this process to its GPU."""
    if not launched() or int(os.environ["WORLD_SIZE"]) != world_size:
        raise RuntimeError(f"a {world_size}-process device needs `gpuscale train` to start it (through torchrun)")
    local_rank = int(os.environ["LOCAL_RANK"])
    kind = devices.of(device_type)
    backend = kind.process_group
    kind.join(local_rank)
    dist.init_process_group(backend=backend)
    return Context(world_size=world_size, rank=dist.get_rank(), local_rank=local_rank, backend=backend)


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
