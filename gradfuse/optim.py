"""`gradfuse.optim`: the optimizers under PyTorch's module name (the same classes as
`gradfuse.nn`'s), so that `import torch.optim as optim` code reads as it is written.

import gradfuse.optim as optim
optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
"""

import sys

from gradfuse.frontend import lr_scheduler
from gradfuse.frontend.optim import SGD, Adam, AdamW, Optimizer
from gradfuse.frontend.optim_adaptive import Adadelta, Adagrad, RMSprop

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "lr_scheduler"]

sys.modules[f"{__name__}.lr_scheduler"] = lr_scheduler  # `from gradfuse.optim.lr_scheduler import StepLR`
