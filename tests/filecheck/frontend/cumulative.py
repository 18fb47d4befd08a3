# RUN: python3 %s | filecheck %s
# cumsum as Hillis and Steele's scan (y + y shifted by 1, 2, ... with zeros in front),
# flip as a gather at a broadcast reversed index, roll as two slices concatenated.
import numpy as np

import gradfuse
from gradfuse import Parameter

x = Parameter(np.zeros((2, 3), np.float32), name="x")

# CHECK-LABEL: func @main
# CHECK: %[[X:.*]] = tg.param "x" : tensor<2x3xf32>
# CHECK: %[[Z1:.*]] = tg.constant 0.0 : tensor<2x1xf32>
# CHECK: %[[S1:.*]] = tg.slice %[[X]] starts=[0, 0] limits=[2, 2]
# CHECK: %[[SH1:.*]] = tg.concat %[[Z1]], %[[S1]] dim=1 : tensor<2x3xf32>
# CHECK: %[[Y1:.*]] = tg.add %[[X]], %[[SH1]]
# CHECK: %[[Z2:.*]] = tg.constant 0.0 : tensor<2x2xf32>
# CHECK: %[[S2:.*]] = tg.slice %[[Y1]] starts=[0, 0] limits=[2, 1]
# CHECK: %[[SH2:.*]] = tg.concat %[[Z2]], %[[S2]] dim=1
# CHECK: tg.add %[[Y1]], %[[SH2]] : tensor<2x3xf32>
x.cumsum(1)

# CHECK: %[[R:.*]] = tg.constant dense<{{\[\[}}1.0], [0.0]]> : tensor<2x1xf32>
# CHECK: %[[I:.*]] = tg.broadcast %[[R]] : tensor<2x3xf32>
# CHECK: tg.gather %[[X]], %[[I]] dim=0
x.flip(0)

# CHECK: %[[TAIL:.*]] = tg.slice %[[X]] starts=[0, 2] limits=[2, 3]
# CHECK: %[[REST:.*]] = tg.slice %[[X]] starts=[0, 0] limits=[2, 2]
# CHECK: tg.concat %[[TAIL]], %[[REST]] dim=1 : tensor<2x3xf32>
x.roll(1, 1)
print(gradfuse.ir_text())
