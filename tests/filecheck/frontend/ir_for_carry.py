# RUN: python3 %s | filecheck %s
# ir_for carries Python state: a variable the body reads and sets again becomes the param
# "carry.<name>.<i>", assigned before the loop and at the body's end and read where the
# body read the old value; a constant the body caches (a mask) is a constant after it.
import numpy as np

import gradfuse
from gradfuse import Feeder, Receiver, ir_for

# CHECK-LABEL: func @main
# CHECK: %[[H0:.*]] = tg.constant 0.0 : tensor<2xf32>
# CHECK: tg.assign "carry.h.0", %[[H0]]
# CHECK: tg.for
# CHECK-NEXT: %[[H:.*]] = tg.param "carry.h.0" : tensor<2xf32>
# CHECK: %[[X:.*]] = tg.feeder "x"
# CHECK: %[[NEXT:.*]] = tg.add %[[H]], %[[X]]
# CHECK: tg.assign "carry.h.0", %[[NEXT]]
# CHECK-NEXT: tg.yield
# CHECK: %[[MASK:.*]] = tg.constant dense<[1.0, 0.0]> : tensor<2xf32>
# CHECK: %[[LAST:.*]] = tg.param "carry.h.0"
# CHECK: tg.receiver "after", %[[LAST]], %[[MASK]]
h = gradfuse.zeros(2)
mask = None


def step() -> None:
    global h, mask
    h = h + Feeder(lambda: np.ones(2, np.float32), shape=[2], name="x")
    mask = gradfuse.eye(2)[0]  # the same in every iteration


ir_for(range(3), step)
Receiver(lambda v, m: None, [h, mask], name="after")
print(gradfuse.ir_text())
