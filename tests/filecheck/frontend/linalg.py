# RUN: python3 %s | filecheck %s
# diagonal as one tg.gather at (i, i + offset) along the last dim; index_select as a
# tg.gather at the index broadcast along the other dims; index_add as x plus a
# tg.scatter_add of the rows; outer as a broadcast product.
import numpy as np

import gradfuse
from gradfuse import Parameter

x = Parameter(np.zeros((3, 4), np.float32), name="x")

# CHECK-LABEL: func @main
# CHECK: %[[X:.*]] = tg.param "x" : tensor<3x4xf32>
# CHECK-NEXT: %[[AT:.*]] = tg.constant dense<{{\[\[}}1.0], [2.0], [3.0]]> : tensor<3x1xf32>
# CHECK-NEXT: %[[D:.*]] = tg.gather %[[X]], %[[AT]] dim=1 : tensor<3x1xf32>
# CHECK-NEXT: tg.reshape %[[D]] : tensor<3xf32>
x.diagonal(1)

# CHECK: %[[IDS:.*]] = tg.constant dense<[2.0, 0.0]> : tensor<2xf32>
# CHECK-NEXT: %[[ROW:.*]] = tg.reshape %[[IDS]] : tensor<1x2xf32>
# CHECK-NEXT: %[[ALL:.*]] = tg.broadcast %[[ROW]] : tensor<3x2xf32>
# CHECK-NEXT: tg.gather %[[X]], %[[ALL]] dim=1 : tensor<3x2xf32>
x.index_select(1, gradfuse.tensor([2, 0]))

# CHECK: %[[TO:.*]] = tg.constant dense<[1.0, 1.0, 0.0]> : tensor<3xf32>
# CHECK-NEXT: %[[COL:.*]] = tg.reshape %[[TO]] : tensor<3x1xf32>
# CHECK-NEXT: %[[WIDE:.*]] = tg.broadcast %[[COL]] : tensor<3x4xf32>
# CHECK-NEXT: %[[ADDED:.*]] = tg.scatter_add %[[WIDE]], %[[X]] dim=0 : tensor<3x4xf32>
# CHECK-NEXT: tg.add %[[X]], %[[ADDED]] : tensor<3x4xf32>
x.index_add(0, gradfuse.tensor([1, 1, 0]), x)

# CHECK: %[[V:.*]] = tg.param "v" : tensor<4xf32>
# CHECK-NEXT: %[[C:.*]] = tg.reshape %[[V]] : tensor<4x1xf32>
# CHECK-NEXT: %[[R:.*]] = tg.reshape %[[V]] : tensor<1x4xf32>
# CHECK-NEXT: %[[CB:.*]] = tg.broadcast %[[C]] : tensor<4x4xf32>
# CHECK-NEXT: %[[RB:.*]] = tg.broadcast %[[R]] : tensor<4x4xf32>
# CHECK-NEXT: tg.mul %[[CB]], %[[RB]] : tensor<4x4xf32>
v = Parameter(np.zeros((4,), np.float32), name="v")
gradfuse.outer(v, v)
print(gradfuse.ir_text())
