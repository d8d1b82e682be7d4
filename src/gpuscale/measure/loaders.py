"""Input pipelines: the host DataLoader of the `paper` variant and the device-resident loader of `tuned`.

Both yield (images, labels) batches; `len()` is the number of batches per epoch and `.dataset` has a
length, so the training loop treats them alike.
"""

from __future__ import annotations

import random

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, DistributedSampler

from gpuscale.contract.settings import TrainSettings, Variant
from gpuscale.inputs import data as data_stage
from gpuscale.measure import devices


class ArrayImages(torch.utils.data.Dataset):
    """uint8 NHWC images handed out as PIL images through per-sample transforms, as torchvision's CIFAR10 does."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.transform(Image.fromarray(np.asarray(self.images[index]))), int(self.labels[index])


def paper_transforms(settings: TrainSettings | dict):
    from torchvision import transforms as T

    settings = TrainSettings.of(settings)
    normalize = T.Normalize(list(settings.normalize.mean), list(settings.normalize.std))
    augment = []
    if settings.augment.random_crop_padding:
        augment.append(T.RandomCrop(32, padding=settings.augment.random_crop_padding))
    if settings.augment.horizontal_flip:
        augment.append(T.RandomHorizontalFlip())
    return T.Compose([*augment, T.ToTensor(), normalize]), T.Compose([T.ToTensor(), normalize])


def _seed_worker(worker_id: int) -> None:
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


def host_loaders(
    dataset: data_stage.Dataset,
    settings: TrainSettings | dict,
    device: torch.device,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
):
    """The paper's pipeline. With several processes, each trains on its shard (DistributedSampler, which pads
    the shards to one length so every process runs the same number of steps); all evaluate the whole test set."""
    settings = TrainSettings.of(settings)
    train_tf, test_tf = paper_transforms(settings)
    loader = settings.loader
    common = {
        "num_workers": loader.num_workers,
        "pin_memory": loader.pin_memory and devices.of(device).pins_memory,
        "persistent_workers": loader.persistent_workers and loader.num_workers > 0,
        "worker_init_fn": _seed_worker,
    }
    generator = torch.Generator().manual_seed(seed)
    images = ArrayImages(dataset.train_images, dataset.train_labels, train_tf)
    sampler = (
        DistributedSampler(images, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        if world_size > 1
        else None
    )
    train = DataLoader(
        images,
        batch_size=settings.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        generator=generator,
        **common,
    )
    test = DataLoader(
        ArrayImages(dataset.test_images, dataset.test_labels, test_tf),
        batch_size=settings.eval_batch_size,
        shuffle=False,
        **common,
    )
    return train, test


def synthetic_host_loader(count: int, settings: TrainSettings | dict, device: torch.device, label: str):
    """The paper's host DataLoader (configured workers, pinning, transforms) over `count` seeded random 32x32 RGB
    images, the same ones on every call: the probe's and the sentinel's input-pipeline rates time it."""
    images = np.random.default_rng(0).integers(0, 256, size=(count, 32, 32, 3), dtype=np.uint8)
    dataset = data_stage.Dataset(
        train_images=images,
        train_labels=np.arange(count, dtype=np.int64) % 10,
        test_images=np.zeros((1, 32, 32, 3), dtype=np.uint8),
        test_labels=np.zeros(1, dtype=np.int64),
        classes=tuple(str(i) for i in range(10)),
        source={"source": label},
    )
    loader, _ = host_loaders(dataset, settings, device, seed=0)
    return loader


class DeviceLoader:
    """uint8 images resident on the device; each batch is cropped, flipped and normalised on the device.

    The whole dataset moves to the device once (50,000 CIFAR images are 150 MB); no worker processes,
    no per-sample Python. Augmentation matches the host pipeline: random crop with zero padding, then a
    horizontal flip with probability 1/2.
    """

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        settings: TrainSettings | dict,
        device: torch.device,
        batch_size: int,
        train: bool,
        seed: int,
        channels_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.device, self.batch_size, self.train = device, batch_size, train
        self.rank, self.world_size = rank, world_size
        self.images = torch.tensor(np.asarray(images)).to(device).permute(0, 3, 1, 2).contiguous()  # N,C,H,W uint8
        self.labels = torch.tensor(np.asarray(labels)).to(device)
        self.dataset = self.labels  # len() = number of images
        settings = TrainSettings.of(settings)
        norm = settings.normalize
        self.mean = torch.tensor(list(norm.mean), device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(list(norm.std), device=device).view(1, 3, 1, 1) * 255
        self.padding = settings.augment.random_crop_padding if train else 0
        self.flip = settings.augment.horizontal_flip and train
        self.channels_last = channels_last
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def _shard_size(self) -> int:
        return -(-len(self.labels) // self.world_size)  # padded: every process gets as many images

    def __len__(self) -> int:
        return (self._shard_size() + self.batch_size - 1) // self.batch_size

    def _augment(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        if self.padding:
            p = self.padding
            padded = torch.nn.functional.pad(x, (p, p, p, p))
            dy = torch.randint(0, 2 * p + 1, (n,), device=self.device, generator=self.generator)
            dx = torch.randint(0, 2 * p + 1, (n,), device=self.device, generator=self.generator)
            rows = (torch.arange(h, device=self.device)[None, :] + dy[:, None])[:, None, :, None]
            cols = (torch.arange(w, device=self.device)[None, :] + dx[:, None])[:, None, None, :]
            index = torch.arange(n, device=self.device)[:, None, None, None]
            channel = torch.arange(x.shape[1], device=self.device)[None, :, None, None]
            x = padded[index, channel, rows, cols]
        if self.flip:
            flip = torch.rand(n, device=self.device, generator=self.generator) < 0.5
            x = torch.where(flip[:, None, None, None], x.flip(3), x)
        return x

    def __iter__(self):
        count = len(self.labels)
        order = (
            torch.randperm(count, device=self.device, generator=self.generator)
            if self.train
            else torch.arange(count, device=self.device)
        )
        if self.world_size > 1:  # the same permutation in every process (same seed), padded, then its shard
            padded = self._shard_size() * self.world_size
            order = torch.cat([order, order[: padded - count]])[self.rank :: self.world_size]
            count = len(order)
        for start in range(0, count, self.batch_size):
            index = order[start : start + self.batch_size]
            x = self.images[index].float()
            if self.train:
                x = self._augment(x)
            x = (x - self.mean) / self.std
            if self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            yield x, self.labels[index]


def make_loaders(
    dataset: data_stage.Dataset,
    settings: TrainSettings | dict,
    knobs: Variant | dict,
    device: torch.device,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
):
    """(train, test) loaders for the variant's `loader` knob: `host` (DataLoader) or `device`; with several
    processes, the training loader hands each its shard."""
    settings, knobs = TrainSettings.of(settings), Variant.of(knobs)
    if knobs.loader == "device":
        cl = knobs.memory_format == "channels_last"
        return (
            DeviceLoader(
                dataset.train_images,
                dataset.train_labels,
                settings,
                device,
                settings.batch_size,
                True,
                seed,
                cl,
                rank=rank,
                world_size=world_size,
            ),
            DeviceLoader(
                dataset.test_images, dataset.test_labels, settings, device, settings.eval_batch_size, False, seed, cl
            ),
        )
    return host_loaders(dataset, settings, device, seed, rank=rank, world_size=world_size)
