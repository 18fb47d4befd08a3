// RUN: ir-opt %s -p loops-distribute | filecheck %s
// RUN: ir-opt %s -p loops-distribute,loops-interchange | filecheck %s --check-prefix=LANES

// loops-distribute on a row nest whose convolution reads its weight w[co, ...] with a
// row index (co) but not the others (b, oh): the rows of one output channel share the
// weight, so the nest is distributed (as DCGAN's first convolution beside a batch
// norm's apply, one `kernel.rows` over [b, co, oh]). Each phase becomes a nest over
// all rows, merged with its own `scf.parallel` over ow; loops-interchange can then run
// the output channels innermost, in lanes.
builtin.module {
  func.func private @r0(%x: memref<2x1x18x18xf32>, %w: memref<16x1x4x4xf32>, %z: memref<2x16x8x8xf32>, %y: memref<2x16x8x8xf32>, %r: memref<2x16x8x8xf32>) attributes {gradfuse.kernel, gradfuse.kind = "rows"} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %c16 = arith.constant 16 : index
    %zero = arith.constant 0.000000e+00 : f32
    "scf.parallel"(%c0, %c0, %c0, %c2, %c16, %c8, %c1, %c1, %c1) <{operandSegmentSizes = array<i32: 3, 3, 3, 0>}> ({
    ^bb0(%b: index, %co: index, %oh: index):
      "scf.parallel"(%c0, %c8, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
      ^bb1(%ow: index):
        %v = memref.load %z[%b, %co, %oh, %ow] : memref<2x16x8x8xf32>
        %m = arith.maximumf %v, %zero : f32
        memref.store %m, %r[%b, %co, %oh, %ow] : memref<2x16x8x8xf32>
        scf.reduce
      }) : (index, index, index) -> ()
      "scf.parallel"(%c0, %c8, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
      ^bb2(%ow: index):
        %s = scf.for %kh = %c0 to %c4 step %c1 iter_args(%a = %zero) -> (f32) {
          %t = scf.for %kw = %c0 to %c4 step %c1 iter_args(%a2 = %a) -> (f32) {
            %oh2 = arith.muli %oh, %c2 : index
            %ih = arith.addi %oh2, %kh : index
            %ow2 = arith.muli %ow, %c2 : index
            %iw = arith.addi %ow2, %kw : index
            %xv = memref.load %x[%b, %c0, %ih, %iw] : memref<2x1x18x18xf32>
            %wv = memref.load %w[%co, %c0, %kh, %kw] : memref<16x1x4x4xf32>
            %p = arith.mulf %xv, %wv : f32
            %n = arith.addf %a2, %p : f32
            scf.yield %n : f32
          }
          scf.yield %t : f32
        }
        memref.store %s, %y[%b, %co, %oh, %ow] : memref<2x16x8x8xf32>
        scf.reduce
      }) : (index, index, index) -> ()
      scf.reduce
    }) : (index, index, index, index, index, index, index, index, index) -> ()
    func.return
  }
}
// CHECK:         "scf.parallel"
// CHECK-NEXT:    ^bb0(%[[B:.*]]: index, %[[CO:.*]]: index, %[[OH:.*]]: index, %[[OW:.*]]: index):
// CHECK-NEXT:      memref.load %{{.*}}[%[[B]], %[[CO]], %[[OH]], %[[OW]]] : memref<2x16x8x8xf32>
// CHECK:         "scf.parallel"
// CHECK-NEXT:    ^bb0(%[[B2:.*]]: index, %[[CO2:.*]]: index, %[[OH2:.*]]: index, %[[OW2:.*]]: index):
// CHECK-NEXT:      scf.for
// CHECK:           memref.store %{{.*}}, %{{.*}}[%[[B2]], %[[CO2]], %[[OH2]], %[[OW2]]] : memref<2x16x8x8xf32>
// CHECK-NEXT:      scf.reduce
// CHECK-NOT:     "scf.parallel"
// LANES:         "scf.parallel"
// LANES:         "scf.parallel"
// LANES-NEXT:    ^bb0(%{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %[[CO:.*]]: index):
// LANES:           memref.load %{{.*}}[%[[CO]], %{{.*}}, %{{.*}}, %{{.*}}] : memref<16x1x4x4xf32>
