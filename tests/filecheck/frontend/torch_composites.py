# RUN: python3 %s | filecheck %s
# PyTorch's functions that gradfuse composes of tg ops: randn (Box-Muller on one
# tg.random of twice the size), cos (sin of x + pi/2), round ((x + c) - c with
# c = +-2^23, detached: its gradient is 0; 2^23 computed as x * 0 + 2^23 plus 2^53 - 2^24
# times (2^23 + 0.5) - 2^23, which is 0 in float32, 0.5 in a float64 run, so that such a
# run uses 2^52), and a mask counted by a sum.
import gradfuse

# CHECK-LABEL: func @main
# CHECK: %[[U:.*]] = tg.random %{{.*}} seed={{.*}} : tensor<2x3xf32>
# CHECK: tg.slice %[[U]] starts=[0, 0]
# CHECK: tg.log2
# CHECK: %[[R:.*]] = tg.sqrt
# CHECK: tg.slice %[[U]] starts=[1, 0]
# CHECK: %[[PI2:.*]] = tg.constant 1.5707963267948966 : tensor<3xf32>
# CHECK: %[[ARG:.*]] = tg.add %{{.*}}, %[[PI2]]
# CHECK: %[[COS:.*]] = tg.sin %[[ARG]]
# CHECK: %[[Z:.*]] = tg.mul %[[R]], %[[COS]]
# CHECK: %[[X:.*]] = tg.stop_gradient
# CHECK: tg.mul %[[X]]
# CHECK: tg.constant 8388608.0
# CHECK: %[[LOW:.*]] = tg.add
# CHECK: %[[TIE:.*]] = tg.add %[[LOW]]
# CHECK: %[[HALF:.*]] = tg.sub %[[TIE]], %[[LOW]]
# CHECK: tg.mul %[[HALF]]
# CHECK: %[[BIG:.*]] = tg.add %[[LOW]]
# CHECK: %[[SHIFT:.*]] = tg.add %{{.*}}, %[[BIG]]
# CHECK: %[[UP:.*]] = tg.add %[[X]], %[[SHIFT]] :
# CHECK: %[[BACK:.*]] = tg.sub %[[UP]], %[[SHIFT]]
# CHECK: tg.where %{{.*}}, %[[BACK]], %[[X]]
# CHECK: %[[MASK:.*]] = tg.cmplt %{{.*}}, %[[Z]]
# CHECK: %[[COUNT:.*]] = tg.cast %[[MASK]] : tensor<3xf32>
# CHECK: tg.reduce_sum %[[COUNT]]
z = gradfuse.randn(3)
gradfuse.round(z * 10.0)
(z > 0.0).sum()
print(gradfuse.ir_text())
