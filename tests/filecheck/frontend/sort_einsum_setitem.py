# RUN: python3 %s | filecheck %s
# PyTorch's functions that gradfuse composes of tg ops, as recorded: einsum (one
# batched tg.dot of the operands permuted to [batch, own, summed]), isnan (no
# comparison holds for NaN: x < inf and -inf < x both false), != (true where either
# side is NaN), sort (each element's rank counted over all pairs, the values gathered)
# and x[key] = value (tg.scatter_add to the positions key selects, tg.where).
import numpy as np

import gradfuse
from gradfuse import Parameter

q = Parameter(np.zeros((2, 4, 3), np.float32), name="q")
k = Parameter(np.zeros((2, 5, 3), np.float32), name="k")
x = Parameter(np.zeros((2, 6), np.float32), name="x")
v = Parameter(np.zeros((2, 3), np.float32), name="v")

# CHECK-LABEL: func @main
# CHECK: %[[Q:.*]] = tg.param "q" : tensor<2x4x3xf32>
# CHECK: %[[K:.*]] = tg.param "k" : tensor<2x5x3xf32>
# CHECK: %[[KT:.*]] = tg.permute %[[K]] perm=[0, 2, 1] : tensor<2x3x5xf32>
# CHECK: tg.dot %[[Q]], %[[KT]] : tensor<2x4x5xf32>
gradfuse.einsum("bid,bjd->bij", q, k)

# CHECK: %[[X:.*]] = tg.param "x" : tensor<2x6xf32>
# CHECK: %[[INF:.*]] = tg.constant inf
# CHECK: %[[BELOW:.*]] = tg.cmplt %[[X]], %[[INF]]
# CHECK: %[[NINF:.*]] = tg.constant -inf
# CHECK: %[[ABOVE:.*]] = tg.cmplt %[[NINF]], %[[X]]
# CHECK: %[[B:.*]] = tg.cast %[[BELOW]]
# CHECK: %[[A:.*]] = tg.cast %[[ABOVE]]
# CHECK: %[[COUNT:.*]] = tg.add %[[B]], %[[A]]
# CHECK: %[[HALF:.*]] = tg.constant 0.5
# CHECK: tg.cmplt %[[COUNT]], %[[HALF]] : tensor<2x6xi1>
x.isnan()

# CHECK: %[[LT:.*]] = tg.cmplt %[[X]], %[[V:.*]] : tensor<2x6xi1>
# CHECK: %[[GT:.*]] = tg.cmplt %[[V]], %[[X]] : tensor<2x6xi1>
# CHECK-COUNT-2: tg.constant inf
# CHECK: tg.cmplt %{{.*}}, %{{.*}} : tensor<2x6xi1>
differs = x != x.detach()

# CHECK: %[[KEY:.*]] = tg.stop_gradient %[[X]]
# CHECK: tg.reshape %[[KEY]] : tensor<2x6x1xf32>
# CHECK: tg.reshape %[[KEY]] : tensor<2x1x6xf32>
# CHECK: tg.cmplt %{{.*}} : tensor<2x6x6xi1>
# CHECK: %[[RANK:.*]] = tg.reduce_sum %{{.*}} dims=[2] : tensor<2x6xf32>
# CHECK: tg.reshape %[[RANK]] : tensor<2x1x6xf32>
# CHECK: %[[INDEX:.*]] = tg.reduce_sum %{{.*}} dims=[2] : tensor<2x6xf32>
# CHECK: tg.gather %[[X]], %[[INDEX]] dim=1 : tensor<2x6xf32>
x.sort(1)

# CHECK: %[[Y:.*]] = tg.mul %[[X]]
# CHECK: %[[COVERED:.*]] = tg.constant dense<{{\[\[}}1.0, 0.0, 1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]]>
# CHECK: %[[MASK:.*]] = tg.cmplt %{{.*}}, %[[COVERED]] : tensor<2x6xi1>
# CHECK: %[[AT:.*]] = tg.constant dense<[0.0, 2.0, 4.0, 6.0, 8.0, 10.0]> : tensor<6xf32>
# CHECK: %[[FLAT:.*]] = tg.reshape %{{.*}} : tensor<6xf32>
# CHECK: %[[S:.*]] = tg.scatter_add %[[AT]], %[[FLAT]] dim=0 : tensor<12xf32>
# CHECK: %[[BACK:.*]] = tg.reshape %[[S]] : tensor<2x6xf32>
# CHECK: tg.where %[[MASK]], %[[BACK]], %[[Y]] : tensor<2x6xf32>
y = x * 1.0
y[:, 0::2] = v * 2.0
print(gradfuse.ir_text())
