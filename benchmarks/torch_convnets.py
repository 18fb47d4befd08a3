"""The PyTorch side of benchmarks/convnets.py: one eager training step of the DCGAN
tutorial's model and of torchvision's ResNet-18 (tests/unit/torch_resnet.py, the one
the ResNet tests compare with; torchvision is not needed), written as PyTorch's
tutorials write them. Import only where torch is importable.

    step = dcgan_step(batch=8, device="cpu"); step()
    step = resnet18_step(batch=8, image=64, classes=10, device="cpu"); step()
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
from torch_resnet import TorchResNet18  # noqa: E402 (torchvision's ResNet-18, as the tests use it)


def dcgan_step(batch: int, device: str) -> Callable[[], None]:
    """The DCGAN tutorial's training step (nc=1, nz=100, ngf=ndf=64, Adam, BCELoss)."""
    nz, ngf, ndf, nc = 100, 64, 64, 1
    g = nn.Sequential(
        nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
        nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh(),
    )  # fmt: skip
    d = nn.Sequential(
        nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 8), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
    )  # fmt: skip
    g, d = g.to(device), d.to(device)
    opt_d = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    loss = nn.BCELoss()
    real = torch.randn(batch, nc, 64, 64, device=device)
    noise = torch.randn(batch, nz, 1, 1, device=device)
    ones, zeros = torch.ones(batch, device=device), torch.zeros(batch, device=device)

    def step() -> None:
        d.zero_grad()
        loss(d(real).view(-1), ones).backward()
        fake = g(noise)
        loss(d(fake.detach()).view(-1), zeros).backward()
        opt_d.step()
        g.zero_grad()
        loss(d(fake).view(-1), ones).backward()
        opt_g.step()

    return step


def resnet18_step(batch: int, image: int, classes: int, device: str) -> Callable[[], None]:
    """One SGD step (momentum 0.9, CrossEntropyLoss) of ResNet-18, as examples/resnet18.py."""
    model = TorchResNet18(classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, image, image, device=device)
    labels = torch.randint(0, classes, (batch,), device=device)

    def step() -> None:
        optimizer.zero_grad()
        criterion(model(images), labels).backward()
        optimizer.step()

    return step
