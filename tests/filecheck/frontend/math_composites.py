# RUN: python3 %s | filecheck %s
# asin as tg.atan2(x, sqrt((1 - x)(1 + x))); logsumexp shifted by its detached max (0
# where the max is infinite); prod as halves multiplied pairwise, the odd element carried;
# a % b as a - b floor(a / b), the floor detached.
import numpy as np

import gradfuse
from gradfuse import Parameter

x = Parameter(np.zeros((2, 3), np.float32), name="x")

# CHECK-LABEL: func @main
# CHECK: %[[X:.*]] = tg.param "x" : tensor<2x3xf32>
# CHECK: %[[ONE:.*]] = tg.constant 1.0 : tensor<2x3xf32>
# CHECK-NEXT: %[[LOW:.*]] = tg.sub %[[ONE]], %[[X]]
# CHECK: %[[HIGH:.*]] = tg.add %{{.*}}, %[[X]]
# CHECK-NEXT: %[[C2:.*]] = tg.mul %[[LOW]], %[[HIGH]]
# CHECK-NEXT: %[[C:.*]] = tg.sqrt %[[C2]]
# CHECK-NEXT: tg.atan2 %[[X]], %[[C]] : tensor<2x3xf32>
x.asin()

# CHECK: %[[MAX:.*]] = tg.reduce_max %[[X]] dims=[1] : tensor<2xf32>
# CHECK: %[[M:.*]] = tg.stop_gradient %{{.*}} : tensor<2x1xf32>
# CHECK: tg.constant inf : tensor<2x1xf32>
# CHECK: tg.constant -inf : tensor<2x1xf32>
# CHECK: %[[SHIFT:.*]] = tg.where %{{.*}}, %[[M]], %{{.*}} : tensor<2x1xf32>
# CHECK: tg.sub %[[X]], %{{.*}} : tensor<2x3xf32>
# CHECK: tg.exp2
# CHECK: tg.reduce_sum %{{.*}} dims=[1] : tensor<2xf32>
# CHECK: tg.log2
# CHECK: tg.add %{{.*}}, %[[SHIFT]] : tensor<2x1xf32>
x.logsumexp(1)

# CHECK: %[[A:.*]] = tg.slice %[[X]] starts=[0, 0] limits=[2, 1]
# CHECK-NEXT: %[[B:.*]] = tg.slice %[[X]] starts=[0, 1] limits=[2, 2]
# CHECK-NEXT: %[[AB:.*]] = tg.mul %[[A]], %[[B]] : tensor<2x1xf32>
# CHECK-NEXT: %[[ODD:.*]] = tg.slice %[[X]] starts=[0, 2] limits=[2, 3]
# CHECK-NEXT: %[[NEXT:.*]] = tg.concat %[[AB]], %[[ODD]] dim=1 : tensor<2x2xf32>
# CHECK: tg.mul %{{.*}}, %{{.*}} : tensor<2x1xf32>
x.prod(1)

# CHECK: %[[TWO:.*]] = tg.constant 2.0 : tensor<2x3xf32>
# CHECK-NEXT: %[[TIMES:.*]] = tg.mul %[[TWO]], %{{.*}} : tensor<2x3xf32>
# CHECK-NEXT: tg.sub %[[X]], %[[TIMES]] : tensor<2x3xf32>
x % 2.0
print(gradfuse.ir_text())
