# RUN: python3 %s | filecheck %s
# What a parameter's .data update records once the program has read the parameter
# (tg.assign of the parameter and operand read without a gradient), abs as x times
# its sign (0 - x * ((x < 0) - (x > 0)): gradient 0 at 0), and the 2-norm's guard
# (0, with gradient 0, where the sum of squares is 0: sqrt of a where).
import numpy as np

import gradfuse
from gradfuse import Parameter

p = Parameter(np.zeros((2, 3), np.float32), name="p")

# CHECK-LABEL: func @main
# CHECK: %[[P:.*]] = tg.param "p" : tensor<2x3xf32>
# CHECK: %[[Y:.*]] = tg.mul %[[P]]
# CHECK: %[[OLD:.*]] = tg.stop_gradient %[[P]]
# CHECK: %[[STEP:.*]] = tg.stop_gradient %[[Y]]
# CHECK: %[[SCALED:.*]] = tg.mul %[[STEP]]
# CHECK: %[[NEW:.*]] = tg.add %[[OLD]], %[[SCALED]]
# CHECK: tg.assign "p", %[[NEW]]
# CHECK: %[[NOW:.*]] = tg.stop_gradient %[[NEW]]
y = p * 2.0
p.data.add_(y, alpha=-0.5)

# CHECK: %[[NEG:.*]] = tg.cmplt %[[NOW]], %{{.*}} : tensor<2x3xi1>
# CHECK: %[[N:.*]] = tg.cast %[[NEG]]
# CHECK: %[[POS:.*]] = tg.cmplt %{{.*}}, %[[NOW]] : tensor<2x3xi1>
# CHECK: %[[Q:.*]] = tg.cast %[[POS]]
# CHECK: %[[MINUS:.*]] = tg.sub %[[N]], %[[Q]]
# CHECK: %[[PRODUCT:.*]] = tg.mul %[[NOW]], %[[MINUS]]
# CHECK: tg.sub %{{.*}}, %[[PRODUCT]]
p.abs()

# CHECK: %[[SQUARES:.*]] = tg.reduce_sum %{{.*}} dims=[1] : tensor<2xf32>
# CHECK: %[[ONE:.*]] = tg.constant 1.0 : tensor<2xf32>
# CHECK-NEXT: %[[SAFE:.*]] = tg.where %[[ZERO:[0-9]+]], %[[ONE]], %[[SQUARES]]
# CHECK-NEXT: %[[ROOT:.*]] = tg.sqrt %[[SAFE]]
# CHECK: tg.where %[[ZERO]], %{{.*}}, %[[ROOT]] : tensor<2xf32>
p.norm(dim=1)
print(gradfuse.ir_text())
