"""The seed program (../shared/reference/autodiff_fusion_example.txt) with gradfuse's imports.

A 255-255-255 MLP with a sigmoid, trained for 1000 SGD steps on a constant batch:
the loop is traced once into a `tg.for` and runs on the backend. Run with
`python examples/mlp.py` (`make demo`).
"""

import time

import numpy as np

from gradfuse import Feeder, Receiver, execute, ir_for, manual_seed, print_graph
from gradfuse.nn import SGD, Linear, Sequential, Sigmoid

manual_seed(0)  # a reproducible checksum for `make demo`


def benchmark(fn, name=""):
    start = time.perf_counter()
    out = fn()
    print(f"{name}: {time.perf_counter() - start:.3f} s")
    return out


nn = Sequential(Linear(255, 255), Sigmoid(), Linear(255, 255))


def print_inp(res):
    pass


def save_params(*args):
    print(len(args))
    for arg in args:
        print(arg)


opt = SGD(nn.parameters(), lr=0.01)


def f():
    opt.zero_grad()
    val = Feeder(lambda: np.full((2, 255), 0.2, dtype=np.float32), shape=[2, 255])
    res = nn(val)
    res.backward()
    opt.step()


benchmark(lambda: ir_for(range(0, 1000), f), name="Tracking nodes")
Receiver(save_params, opt.parameters, name="saving params")
print("== recorded program")
print_graph()
print("== after tg-autodiff, tg-decompose, canonicalize, cse, dce")
print_graph(after="tg")
benchmark(lambda: execute(), name="full exec")
print("checksum:", sum(float(np.abs(v).sum()) for v in nn.state_dict().values()))
