"""ResNet-18 as torchvision builds it (BasicBlock, 1x1 conv + BatchNorm downsample,
`fc`; the same state_dict names), trained whole in `ir_for` with CrossEntropyLoss and
SGD (momentum 0.9) on synthetic images and labels from feeders. A receiver reports
the loss every LOG_EVERY steps:

    python examples/resnet18.py              # default backend
    GRADFUSE_BACKEND=reference python examples/resnet18.py
"""

from __future__ import annotations

import time

import numpy as np

import gradfuse
from gradfuse import Feeder, Receiver, Tensor, ir_for
from gradfuse.nn import (
    SGD,
    AdaptiveAvgPool2d,
    BatchNorm2d,
    Conv2d,
    CrossEntropyLoss,
    Linear,
    MaxPool2d,
    Module,
    ReLU,
    Sequential,
)

NUM_CLASSES, IMAGE = 10, 32
BATCH, STEPS, LOG_EVERY = 8, 20, 5
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 0.0
DTYPE = np.float32  # of the feeders; np.float64 (with float64 params) runs every kernel in it


def conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> Conv2d:
    """A 3x3 convolution with padding 1 and no bias (torchvision's `conv3x3`)."""
    return Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)


class BasicBlock(Module):
    """Two 3x3 convolutions with batch norm and a residual (`conv1 bn1 conv2 bn2 downsample`).

    `BasicBlock(64, 128, stride=2, downsample=...)` halves H and W.
    """

    expansion = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: Module | None = None
    ):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = BatchNorm2d(planes)
        self.relu = ReLU()
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(Module):
    """torchvision's ResNet with BasicBlocks: images [N, 3, H, W] -> logits [N, num_classes].

    `ResNet([2, 2, 2, 2])` is ResNet-18 (`conv1 bn1 layer1..layer4 fc`).
    """

    def __init__(self, layers: list[int], num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = BatchNorm2d(64)
        self.relu = ReLU()
        self.maxpool = MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = AdaptiveAvgPool2d((1, 1))
        self.fc = Linear(512 * BasicBlock.expansion, num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = Sequential(
                Conv2d(self.inplanes, planes, 1, stride=stride, bias=False), BatchNorm2d(planes)
            )
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).reshape(x.shape[0], -1))


def resnet18(num_classes: int = 1000, seed: int = 0) -> ResNet:
    """ResNet-18 with torchvision's init: convolutions kaiming-normal (fan_out, relu),
    batch norms weight 1 and bias 0, `fc` as `Linear`. `resnet18(num_classes=10)`"""
    model = ResNet([2, 2, 2, 2], num_classes)
    rng = np.random.default_rng(seed)
    for _, m in model.named_modules():
        if isinstance(m, Conv2d):
            fan_out = m.weight.shape[0] * m.weight.shape[2] * m.weight.shape[3]
            std = np.sqrt(2.0 / fan_out)
            m.weight.data = rng.normal(0.0, std, m.weight.shape).astype(np.float32)
    return model


class Data:
    """Synthetic labelled images: each class adds its own fixed pattern to noise."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        self.patterns = np.random.default_rng(0).normal(0.0, 1.0, (NUM_CLASSES, 3, IMAGE, IMAGE))
        self.labels = np.zeros(BATCH, np.float32)

    def images(self) -> np.ndarray:
        labels = self.rng.integers(0, NUM_CLASSES, BATCH)
        self.labels = labels.astype(np.float32)
        noise = self.rng.normal(0.0, 1.0, (BATCH, 3, IMAGE, IMAGE))
        return (noise + self.patterns[labels]).astype(DTYPE)

    def targets(self) -> np.ndarray:
        """The labels of the last `images()` batch (floats holding class ids)."""
        return self.labels.astype(DTYPE)


def record(
    steps: int = STEPS,
    log_every: int = LOG_EVERY,
    model: ResNet | None = None,
    data: Data | None = None,
) -> tuple[ResNet, list[float]]:
    """Records `steps` training steps (a new ResNet-18 unless `model`); the model and the
    list that the loss receiver fills every `log_every` steps."""
    if model is None:
        gradfuse.manual_seed(0)
        model = resnet18(NUM_CLASSES)
    data = data or Data()
    opt = SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    loss_fn = CrossEntropyLoss()
    losses: list[float] = []

    def train_step() -> Tensor:
        opt.zero_grad()
        images = Feeder(data.images, shape=[BATCH, 3, IMAGE, IMAGE], dtype=DTYPE, name="images")
        labels = Feeder(data.targets, shape=[BATCH], dtype=DTYPE, name="labels")
        loss = loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        return loss

    def report(loss: np.ndarray) -> None:
        losses.append(float(loss))
        print(f"step {len(losses) * log_every:4d}  loss {float(loss):.4f}", flush=True)

    def block() -> None:
        if log_every > 1:
            ir_for(range(log_every - 1), train_step)
        Receiver(report, train_step(), name="loss")

    ir_for(range(steps // log_every), block)
    return model, losses


def train(
    steps: int = STEPS, log_every: int = LOG_EVERY, backend: str | None = None
) -> tuple[ResNet, list[float]]:
    """Trains a new ResNet-18 for `steps` steps on `backend`; the model and the losses."""
    model, losses = record(steps, log_every)
    start = time.perf_counter()
    program = gradfuse.compile(backend)
    compiled = time.perf_counter()
    program.run()
    done = time.perf_counter()
    print(
        f"{steps} steps of batch {BATCH} at {IMAGE}x{IMAGE} on the {program.backend} backend:"
        f" compile {compiled - start:.1f} s, run {done - compiled:.1f} s"
        f" ({(done - compiled) / steps * 1e3:.0f} ms a step,"
        f" {program.kernels_per_iteration} kernels per step)"
    )
    return model, losses


def main() -> None:
    train()


if __name__ == "__main__":
    main()
