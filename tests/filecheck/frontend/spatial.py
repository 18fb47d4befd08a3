# RUN: python3 %s | filecheck %s
# pixel_shuffle as reshape, permute, reshape; a reflect pad as one tg.gather at the
# mirrored positions (2 1 | 0 1 2 3 | 2); max_pool1d as max_pool2d of a 1-row image.
import gradfuse.nn.functional as F
import numpy as np

import gradfuse
from gradfuse import Parameter

x = Parameter(np.zeros((1, 4, 2, 3), np.float32), name="x")
s = Parameter(np.zeros((1, 2, 4), np.float32), name="s")

# CHECK-LABEL: func @main
# CHECK: %[[X:.*]] = tg.param "x" : tensor<1x4x2x3xf32>
# CHECK-NEXT: %[[BLOCKS:.*]] = tg.reshape %[[X]] : tensor<1x1x2x2x2x3xf32>
# CHECK-NEXT: %[[MOVED:.*]] = tg.permute %[[BLOCKS]] perm=[0, 1, 4, 2, 5, 3] : tensor<1x1x2x2x3x2xf32>
# CHECK-NEXT: tg.reshape %[[MOVED]] : tensor<1x1x4x6xf32>
F.pixel_shuffle(x, 2)

# CHECK: %[[AT:.*]] = tg.constant dense<{{\[\[\[}}2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 2.0]]]> : tensor<1x1x7xf32>
# CHECK-NEXT: %[[ALL:.*]] = tg.broadcast %[[AT]] : tensor<1x2x7xf32>
# CHECK-NEXT: %[[S:.*]] = tg.param "s" : tensor<1x2x4xf32>
# CHECK-NEXT: tg.gather %[[S]], %[[ALL]] dim=2 : tensor<1x2x7xf32>
F.pad(s, (2, 1), mode="reflect")

# CHECK: %[[ROW:.*]] = tg.reshape %[[S]] : tensor<1x2x1x4xf32>
# CHECK-NEXT: %[[W:.*]] = tg.windows %[[ROW]] kernel=[1, 2] stride=[1, 2]
# CHECK-NEXT: %[[M:.*]] = tg.reduce_max %[[W]] dims=[4, 5] : tensor<1x2x1x2xf32>
# CHECK-NEXT: tg.reshape %[[M]] : tensor<1x2x2xf32>
F.max_pool1d(s, 2)
print(gradfuse.ir_text())
