"""`gradfuse.optim`: the optimizers under PyTorch's module name (the same classes as
`gradfuse.nn`'s), so that `import torch.optim as optim` code reads as it is written.

import gradfuse.optim as optim
optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
"""

from gradfuse.frontend.optim import SGD, Adam, AdamW, Optimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
