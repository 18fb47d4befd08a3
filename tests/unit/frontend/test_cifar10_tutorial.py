"""PyTorch's "Training a classifier" tutorial (CIFAR-10), its network and training loop
written as the tutorial writes them, `torch` replaced by `gradfuse`: three steps of SGD
with momentum give PyTorch's losses, parameters and predictions."""

from __future__ import annotations

from typing import Any

import gradfuse.nn.functional as F
import numpy as np
import pytest

import gradfuse
import gradfuse.nn as nn
import gradfuse.optim as optim
from gradfuse import Feeder, Receiver, execute, ir_for

RNG = np.random.default_rng(10)
IMAGES = RNG.normal(size=(3, 4, 3, 32, 32)).astype(np.float32)  # 3 batches of 4
LABELS = RNG.integers(0, 10, size=(3, 4)).astype(np.float32)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):  # noqa: ANN001, ANN201
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = gradfuse.flatten(x, 1)  # flatten all dimensions except batch
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


def torch_net(torch: Any) -> Any:
    """The tutorial's `Net` in PyTorch, as the tutorial writes it."""
    tnn, tF = torch.nn, torch.nn.functional

    class TorchNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = tnn.Conv2d(3, 6, 5)
            self.pool = tnn.MaxPool2d(2, 2)
            self.conv2 = tnn.Conv2d(6, 16, 5)
            self.fc1 = tnn.Linear(16 * 5 * 5, 120)
            self.fc2 = tnn.Linear(120, 84)
            self.fc3 = tnn.Linear(84, 10)

        def forward(self, x):  # noqa: ANN001, ANN201
            x = self.pool(tF.relu(self.conv1(x)))
            x = self.pool(tF.relu(self.conv2(x)))
            x = torch.flatten(x, 1)
            x = tF.relu(self.fc1(x))
            x = tF.relu(self.fc2(x))
            return self.fc3(x)

    return TorchNet()


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_three_steps_give_pytorchs_losses_parameters_and_predictions(backend: str) -> None:
    torch = pytest.importorskip("torch")
    gradfuse.reset()
    gradfuse.manual_seed(0)
    net = Net()
    start = {k: v.copy() for k, v in net.state_dict().items()}
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    images, labels_fed = iter(IMAGES), iter(LABELS)  # (a feeder is called every step)
    losses: list[float] = []
    predictions: list[np.ndarray] = []

    def step() -> None:
        inputs = Feeder(lambda: next(images), shape=[4, 3, 32, 32], name="inputs")
        labels = Feeder(lambda: next(labels_fed), shape=[4], name="labels")
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        _, predicted = gradfuse.max(outputs, 1)
        Receiver(lambda v, p: (losses.append(float(v)), predictions.append(p)), [loss, predicted])

    ir_for(range(3), step)
    execute(backend=backend)

    tnet = torch_net(torch).double()  # float64: the reference for both float32 runs
    tnet.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in start.items()})
    topt = torch.optim.SGD(tnet.parameters(), lr=0.001, momentum=0.9)
    want_losses, want_predictions = [], []
    for k in range(3):
        topt.zero_grad()
        outputs = tnet(torch.tensor(IMAGES[k], dtype=torch.float64))
        loss = torch.nn.CrossEntropyLoss()(outputs, torch.tensor(LABELS[k]).long())
        loss.backward()
        topt.step()
        want_losses.append(loss.item())
        want_predictions.append(torch.max(outputs, 1)[1].numpy())
    # float32 against PyTorch's float64 run (2026-12-07, reference and c, AVX2 with FMA):
    # the losses within 8.6e-8 relative, the params within 1.1e-8 absolute (weights of
    # 0.01-0.1 that three steps of lr 0.001 move by 1e-3: their float32 rounding, 4e-9,
    # plus the steps' errors). The bounds are 12 and 9 times those: a CPU that sums in
    # another order (vector width, FMA) moves each sum by a few units of 2^-24 too.
    np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
    for k in range(3):
        np.testing.assert_array_equal(predictions[k], want_predictions[k])
    for key, value in tnet.state_dict().items():
        np.testing.assert_allclose(net.state_dict()[key], value.numpy(), rtol=0, atol=1e-7)
