# RUN: python3 %s | filecheck %s
# gradfuse.no_grad: what is recorded inside carries no gradient. Each value that comes in
# from outside enters through one tg.stop_gradient per block; a parameter updated in
# place under it (p -= lr * p.grad) is a tg.assign of its new value.
import numpy as np

import gradfuse
from gradfuse import Parameter

# CHECK-LABEL: func @main
# CHECK: %[[W:.*]] = tg.param "w"
# CHECK: %[[G:.*]] = tg.grad %{{.*}} wrt %[[W]]
# CHECK: %[[GCUT:.*]] = tg.stop_gradient %[[G]]
# CHECK: %[[STEP:.*]] = tg.mul %[[GCUT]]
# CHECK: %[[WCUT:.*]] = tg.stop_gradient %[[W]]
# CHECK: %[[NEW:.*]] = tg.sub %[[WCUT]], %[[STEP]]
# CHECK: tg.assign "w", %[[NEW]]
# CHECK: %[[READ:.*]] = tg.stop_gradient %[[NEW]]
# CHECK-NOT: tg.stop_gradient
# CHECK: tg.reduce_sum %[[READ]]
w = Parameter(np.ones(3, np.float32), name="w")
(w * w).sum().backward()
with gradfuse.no_grad():
    w -= w.grad * 0.1
    w.sum()  # (reads the assigned value: no second cut of %w)
print(gradfuse.ir_text())
