// Round trip of every kernel op: custom format -> custom format, and through the
// generic format.
// RUN: ir-opt %s | ir-opt -f mlir | filecheck %s
// RUN: ir-opt %s --print-op-generic | ir-opt -f mlir | filecheck %s

// Host ops: named params (with and without an init), temporaries (planned or not),
// read-only constants, host callbacks.
func.func @host(%x: memref<2x3xf32>) {
  %w = kernel.param "fc.weight" : memref<3x3xf32>
  %b = kernel.param "fc.bias" {init = 5.000000e-01 : f64} : memref<3xf32>
  %d = kernel.param "emb" {init = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>} : memref<2xf32>
  %t = kernel.alloc : memref<2x3xf32>
  %u = kernel.alloc {offset = 64 : i64} : memref<f32>
  %c = kernel.constant dense<[1.000000e+00, -2.000000e+00, 3.000000e+00]> : tensor<3xf32> : memref<3xf32>
  %s = kernel.constant 2.500000e-01 : f32 : memref<f32>
  kernel.feed "x", %t : memref<2x3xf32>
  kernel.receive "out", %t, %u : memref<2x3xf32>, memref<f32>
  kernel.receive "tick"
  func.return
}
// CHECK-LABEL: func.func @host(%x: memref<2x3xf32>) {
// CHECK-NEXT:    %w = kernel.param "fc.weight" : memref<3x3xf32>
// CHECK-NEXT:    %b = kernel.param "fc.bias" {init = 5.000000e-01 : f64} : memref<3xf32>
// CHECK-NEXT:    %d = kernel.param "emb" {init = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>} : memref<2xf32>
// CHECK-NEXT:    %t = kernel.alloc : memref<2x3xf32>
// CHECK-NEXT:    %u = kernel.alloc {offset = 64 : i64} : memref<f32>
// CHECK-NEXT:    %c = kernel.constant dense<[1.000000e+00, -2.000000e+00, 3.000000e+00]> : tensor<3xf32> : memref<3xf32>
// CHECK-NEXT:    %s = kernel.constant 2.500000e-01 : f32 : memref<f32>
// CHECK-NEXT:    kernel.feed "x", %t : memref<2x3xf32>
// CHECK-NEXT:    kernel.receive "out", %t, %u : memref<2x3xf32>, memref<f32>
// CHECK-NEXT:    kernel.receive "tick"
// CHECK-NEXT:    func.return

// An elementwise kernel: a padded (guarded) load, a random number, a store.
func.func @elementwise(%x: memref<5x3xf32>, %c: memref<f32>, %y: memref<7x5xf32>) {
  "kernel.kernel"(%x, %c, %y) <{sym_name = "k0", kind = "elementwise", domain = array<i64: 7, 5>, parallel = 2 : i64}> ({
  ^bb0(%i: index, %j: index, %bx: memref<5x3xf32>, %bc: memref<f32>, %by: memref<7x5xf32>):
    %a = kernel.load %bx[affine_map<(d0, d1) -> ((d0 + -1), (d1 + -1))>] {guard = affine_set<(d0, d1) : ((d0 + -1) >= 0, ((d0 * -1) + 5) >= 0, (d1 + -1) >= 0, ((d1 * -1) + 3) >= 0)>} : memref<5x3xf32> -> f32
    %n = kernel.load %bc[affine_map<(d0, d1) -> ()>] : memref<f32> -> f32
    %u = kernel.random %n[affine_map<(d0, d1) -> (((d0 * 5) + d1))>] seed 7 : i64 : f32 -> f32
    %s = arith.addf %a, %u : f32
    kernel.store %s, %by[affine_map<(d0, d1) -> (d0, d1)>] : f32, memref<7x5xf32>
  }) : (memref<5x3xf32>, memref<f32>, memref<7x5xf32>) -> ()
  func.return
}
// CHECK-LABEL: func.func @elementwise
// CHECK:         "kernel.kernel"(%x, %c, %y) <{sym_name = "k0", kind = "elementwise", domain = array<i64: 7, 5>, parallel = 2 : i64}> ({
// CHECK-NEXT:    ^bb0(%i: index, %j: index, %bx: memref<5x3xf32>, %bc: memref<f32>, %by: memref<7x5xf32>):
// CHECK-NEXT:      %a = kernel.load %bx[affine_map<(d0, d1) -> ((d0 + -1), (d1 + -1))>] {guard = affine_set<(d0, d1) : ((d0 + -1) >= 0, ((d0 * -1) + 5) >= 0, (d1 + -1) >= 0, ((d1 * -1) + 3) >= 0)>} : memref<5x3xf32> -> f32
// CHECK-NEXT:      %n = kernel.load %bc[affine_map<(d0, d1) -> ()>] : memref<f32> -> f32
// CHECK-NEXT:      %u = kernel.random %n[affine_map<(d0, d1) -> (((d0 * 5) + d1))>] seed 7 : i64 : f32 -> f32
// CHECK-NEXT:      %s = arith.addf %a, %u : f32
// CHECK-NEXT:      kernel.store %s, %by[affine_map<(d0, d1) -> (d0, d1)>] : f32, memref<7x5xf32>
// CHECK-NEXT:    }) : (memref<5x3xf32>, memref<f32>, memref<7x5xf32>) -> ()

// A contraction: the prologue at every point of [2, 4 | 3], the reduction over d2,
// the epilogue (bias, sigmoid's exp2) once per point of [2, 4].
func.func @contraction(%x: memref<2x3xf32>, %w: memref<4x3xf32>, %b: memref<4xf32>, %h: memref<2x4xf32>) {
  "kernel.kernel"(%x, %w, %b, %h) <{sym_name = "mm", kind = "contraction", domain = array<i64: 2, 4, 3>, parallel = 2 : i64}> ({
  ^bb0(%i: index, %j: index, %k: index, %bx: memref<2x3xf32>, %bw: memref<4x3xf32>, %bb: memref<4xf32>, %bh: memref<2x4xf32>):
    %l = kernel.load %bx[affine_map<(d0, d1, d2) -> (d0, d2)>] : memref<2x3xf32> -> f32
    %r = kernel.load %bw[affine_map<(d0, d1, d2) -> (d1, d2)>] : memref<4x3xf32> -> f32
    %p = arith.mulf %l, %r : f32
    %s = kernel.reduce "add" %p : f32
    %bias = kernel.load %bb[affine_map<(d0, d1) -> (d1)>] : memref<4xf32> -> f32
    %z = arith.addf %s, %bias : f32
    %e = math.exp2 %z : f32
    kernel.store %e, %bh[affine_map<(d0, d1) -> (d0, d1)>] : f32, memref<2x4xf32>
  }) : (memref<2x3xf32>, memref<4x3xf32>, memref<4xf32>, memref<2x4xf32>) -> ()
  func.return
}
// CHECK-LABEL: func.func @contraction
// CHECK:         "kernel.kernel"(%x, %w, %b, %h) <{sym_name = "mm", kind = "contraction", domain = array<i64: 2, 4, 3>, parallel = 2 : i64}> ({
// CHECK:           %p = arith.mulf %l, %r : f32
// CHECK-NEXT:      %s = kernel.reduce "add" %p : f32
// CHECK-NEXT:      %bias = kernel.load %bb[affine_map<(d0, d1) -> (d1)>] : memref<4xf32> -> f32
// CHECK-NEXT:      %z = arith.addf %s, %bias : f32
// CHECK-NEXT:      %e = math.exp2 %z : f32
// CHECK-NEXT:      kernel.store %e, %bh[affine_map<(d0, d1) -> (d0, d1)>] : f32, memref<2x4xf32>

// A host loop: its body (host ops, launches) runs for i = 0, 2, 4; it ends with
// kernel.yield (kernel-level loops carry no values).
func.func @loop(%x: memref<2xf32>) {
  "kernel.for"() <{lower = 0 : i64, upper = 6 : i64, step = 2 : i64}> ({
  ^bb0(%it: index):
    kernel.feed "x", %x : memref<2xf32>
    "kernel.yield"() : () -> ()
  }) : () -> ()
  func.return
}
// CHECK-LABEL: func.func @loop
// CHECK-NEXT:    "kernel.for"() <{lower = 0 : i64, upper = 6 : i64, step = 2 : i64}> ({
// CHECK-NEXT:    ^bb0(%it: index):
// CHECK-NEXT:      kernel.feed "x", %x : memref<2xf32>
// CHECK-NEXT:      "kernel.yield"() : () -> ()
// CHECK-NEXT:    }) : () -> ()

// A full reduction to a 0-d buffer (max), and a gather/scatter_add kernel: two
// independent kernels launched as one group.
func.func @group(%x: memref<5x3xf32>, %i: memref<4x3xf32>, %m: memref<f32>, %g: memref<4x3xf32>, %s: memref<5x3xf32>) {
  "kernel.group"() <{sym_name = "g0"}> ({
    "kernel.kernel"(%x, %m) <{sym_name = "k1", kind = "reduction", domain = array<i64: 5, 3>, parallel = 0 : i64}> ({
    ^bb0(%d0: index, %d1: index, %bx: memref<5x3xf32>, %bm: memref<f32>):
      %v = kernel.load %bx[affine_map<(d0, d1) -> (d0, d1)>] : memref<5x3xf32> -> f32
      %r = kernel.reduce "max" %v : f32
      kernel.store %r, %bm[affine_map<() -> ()>] : f32, memref<f32>
    }) : (memref<5x3xf32>, memref<f32>) -> ()
    "kernel.kernel"(%i, %x, %g, %s) <{sym_name = "k2", kind = "elementwise", domain = array<i64: 4, 3>, parallel = 2 : i64}> ({
    ^bb0(%d0: index, %d1: index, %bi: memref<4x3xf32>, %bx: memref<5x3xf32>, %bg: memref<4x3xf32>, %bs: memref<5x3xf32>):
      %n = kernel.load %bi[affine_map<(d0, d1) -> (d0, d1)>] : memref<4x3xf32> -> f32
      %v = kernel.gather %bx[affine_map<(d0, d1)[s0] -> (s0, d1)>], %n : memref<5x3xf32>, f32 -> f32
      kernel.store %v, %bg[affine_map<(d0, d1) -> (d0, d1)>] : f32, memref<4x3xf32>
      kernel.scatter_add %v, %bs[affine_map<(d0, d1)[s0] -> (s0, d1)>], %n : f32, memref<5x3xf32>, f32
    }) : (memref<4x3xf32>, memref<5x3xf32>, memref<4x3xf32>, memref<5x3xf32>) -> ()
  }) : () -> ()
  func.return
}
// CHECK-LABEL: func.func @group
// CHECK-NEXT:    "kernel.group"() <{sym_name = "g0"}> ({
// CHECK-NEXT:      "kernel.kernel"(%x, %m) <{sym_name = "k1", kind = "reduction", domain = array<i64: 5, 3>, parallel = 0 : i64}> ({
// CHECK:             %r = kernel.reduce "max" %v : f32
// CHECK-NEXT:        kernel.store %r, %bm[affine_map<() -> ()>] : f32, memref<f32>
// CHECK:           "kernel.kernel"(%i, %x, %g, %s) <{sym_name = "k2", kind = "elementwise", domain = array<i64: 4, 3>, parallel = 2 : i64}> ({
// CHECK:             %v = kernel.gather %bx[affine_map<(d0, d1)[s0] -> (s0, d1)>], %n : memref<5x3xf32>, f32 -> f32
// CHECK-NEXT:        kernel.store %v, %bg[affine_map<(d0, d1) -> (d0, d1)>] : f32, memref<4x3xf32>
// CHECK-NEXT:        kernel.scatter_add %v, %bs[affine_map<(d0, d1)[s0] -> (s0, d1)>], %n : f32, memref<5x3xf32>, f32
// CHECK-NEXT:      }) : (memref<4x3xf32>, memref<5x3xf32>, memref<4x3xf32>, memref<5x3xf32>) -> ()
// CHECK-NEXT:    }) : () -> ()
