// RUN: ir-opt %s -p loops-pad | filecheck %s

// loops-pad on a guard that no read needs: the window h + kh stays inside x's 7 rows
// (h < 5, kh < 3), so the bounds it tests, h + kh >= 0 and 6 - (h + kh) >= 0, always
// hold; the border is empty, no copy is made and the read loses its guard.
builtin.module {
  func.func private @k0(%x: memref<1x2x7x7xf32>, %w: memref<3x2x3x3xf32>, %y: memref<1x3x5x5xf32>) attributes {gradfuse.kernel, gradfuse.kind = "contraction"} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %c5 = arith.constant 5 : index
    %c6 = arith.constant 6 : index
    %cm1 = arith.constant -1 : index
    %zero = arith.constant 0.000000e+00 : f32
    "scf.parallel"(%c0, %c0, %c0, %c3, %c5, %c5, %c1, %c1, %c1) <{operandSegmentSizes = array<i32: 3, 3, 3, 0>}> ({
    ^bb0(%d0: index, %d1: index, %d2: index):
      %s = scf.for %d3 = %c0 to %c2 step %c1 iter_args(%a3 = %zero) -> (f32) {
        %s4 = scf.for %d4 = %c0 to %c3 step %c1 iter_args(%a4 = %a3) -> (f32) {
          %s5 = scf.for %d5 = %c0 to %c3 step %c1 iter_args(%a5 = %a4) -> (f32) {
            %h = arith.addi %d1, %d4 : index
            %lo = arith.cmpi sge, %h, %c0 : index
            %nh = arith.muli %h, %cm1 : index
            %room = arith.addi %nh, %c6 : index
            %hi = arith.cmpi sge, %room, %c0 : index
            %in = arith.andi %lo, %hi : i1
            %col = arith.addi %d2, %d5 : index
            %hs = arith.select %in, %h, %c0 : index
            %v = memref.load %x[%c0, %d3, %hs, %col] : memref<1x2x7x7xf32>
            %g = arith.select %in, %v, %zero : f32
            %u = memref.load %w[%d0, %d3, %d4, %d5] : memref<3x2x3x3xf32>
            %p = arith.mulf %g, %u : f32
            %n = arith.addf %a5, %p : f32
            scf.yield %n : f32
          }
          scf.yield %s5 : f32
        }
        scf.yield %s4 : f32
      }
      memref.store %s, %y[%c0, %d0, %d1, %d2] : memref<1x3x5x5xf32>
      scf.reduce
    }) : (index, index, index, index, index, index, index, index, index) -> ()
    func.return
  }
}
// CHECK-NOT:     memref.alloc
// CHECK:         scf.for %d5 = %c0 to %c3 step %c1 iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK-NEXT:      %h = arith.addi %d1, %d4 : index
// CHECK-NEXT:      %col = arith.addi %d2, %d5 : index
// CHECK-NEXT:      %g = memref.load %x[%c0, %d3, %h, %col] : memref<1x2x7x7xf32>
// CHECK-NEXT:      %u = memref.load %w[%d0, %d3, %d4, %d5] : memref<3x2x3x3xf32>
// CHECK-NEXT:      %p = arith.mulf %g, %u : f32
// CHECK-NOT:     arith.select
// CHECK-NOT:     arith.cmpi
