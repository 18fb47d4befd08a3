// RUN: ir-opt %s --split-input-file -p loops-transpose-reads | filecheck %s
// RUN: ir-opt %s --split-input-file -p loops-transpose-reads -t c | filecheck %s --check-prefix=C

// loops-transpose-reads: an input gradient's weight copy gathers 16 lanes 9 apart
// (w[co, ci, kh, kw] along ci); the 16 x 9 floats of a tile's lanes and taps are one
// contiguous block: 9 vector loads of it, each tap's vector built by 8 two-source
// shuffles, stored where the gathered vector was; the tile runs outermost.
func.func private @pack(%w: memref<32x16x3x3xf32>, %p: memref<1x3x3x32x16xf32>) attributes {gradfuse.kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %pad = arith.constant 0.000000e+00 : f32
  "scf.parallel"(%c0, %c0, %c0, %c0, %c0, %c32, %c1, %c3, %c3, %c16, %c1, %c1, %c1, %c1, %c16) <{operandSegmentSizes = array<i32: 5, 5, 5, 0>}> ({
  ^bb0(%co: index, %t: index, %kh: index, %kw: index, %q: index):
    %b = arith.muli %t, %c16 : index
    %ci = arith.addi %b, %q : index
    %v = vector.transfer_read %w[%co, %ci, %kh, %kw], %pad {in_bounds = [true], permutation_map = affine_map<(d0, d1, d2, d3) -> (d1)>} : memref<32x16x3x3xf32>, vector<16xf32>
    vector.store %v, %p[%t, %kh, %kw, %co, %q] : memref<1x3x3x32x16xf32>, vector<16xf32>
    scf.reduce
  }) : (index, index, index, index, index, index, index, index, index, index, index, index, index, index, index) -> ()
  func.return
}
func.func @main(%w: memref<32x16x3x3xf32>, %p: memref<1x3x3x32x16xf32>) {
  func.call @pack(%w, %p) {gradfuse.kernel} : (memref<32x16x3x3xf32>, memref<1x3x3x32x16xf32>) -> ()
  func.return
}
// CHECK:      %[[F:.*]] = memref.collapse_shape %w {{\[}}[0 : i64], [1 : i64, 2 : i64, 3 : i64]] : memref<32x16x3x3xf32> into memref<32x144xf32>
// CHECK-NEXT: "scf.parallel"
// CHECK-NEXT: ^bb0(%t: index, %co: index, %q: index):
// CHECK:        %[[CI:.*]] = arith.addi %b, %q : index
// CHECK:        %[[B:.*]] = arith.muli %[[CI]], %{{.*}} : index
// CHECK-NEXT:   %[[R0:.*]] = vector.load %[[F]][%co, %[[B]]] : memref<32x144xf32>, vector<16xf32>
// CHECK:        %[[R1:.*]] = vector.load %[[F]][%co, %{{.*}}] : memref<32x144xf32>, vector<16xf32>
// CHECK-COUNT-7: vector.load %[[F]][%co, %{{.*}}] : memref<32x144xf32>, vector<16xf32>
// CHECK-NEXT:   vector.shuffle %[[R0]], %[[R1]] [0, 9, 18, 27, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
// CHECK-COUNT-7: vector.shuffle
// CHECK:        vector.store %{{.*}}, %p[%t, %{{.*}}, %{{.*}}, %co, %q]
// CHECK-COUNT-8: vector.store
// CHECK-NOT:    vector.transfer_read
// C:      for (long v{{[0-9]+}} = 0; v{{[0-9]+}} < 1; v{{[0-9]+}}++)
// C-NEXT: for (long v{{[0-9]+}} = 0; v{{[0-9]+}} < 32; v{{[0-9]+}}++)
// C:        __builtin_memcpy(&[[R:v[0-9]+]], &v0[v{{[0-9]+}} * 144 + v{{[0-9]+}}], sizeof [[R]]);
// C:        gf_floatx16 {{v[0-9]+}} = __builtin_shuffle({{v[0-9]+}}, {{v[0-9]+}}, (gf_intx16){0, 9, 18, 27, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});

// -----

// Lanes of 8 (a machine that runs 16 no faster, `gradfuse.backend.c.lanes`) across
// 3 x 3 taps: each lane's 9 taps are contiguous, taps 0-7 one 8 x 8 tile (8 vector
// loads, 24 shuffles), tap 8 past it gathered as before; the tile runs outermost.
func.func private @eight(%w: memref<32x8x3x3xf32>, %p: memref<1x3x3x32x8xf32>) attributes {gradfuse.kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %pad = arith.constant 0.000000e+00 : f32
  "scf.parallel"(%c0, %c0, %c0, %c0, %c0, %c32, %c1, %c3, %c3, %c8, %c1, %c1, %c1, %c1, %c8) <{operandSegmentSizes = array<i32: 5, 5, 5, 0>}> ({
  ^bb0(%co: index, %t: index, %kh: index, %kw: index, %q: index):
    %b = arith.muli %t, %c8 : index
    %ci = arith.addi %b, %q : index
    %v = vector.transfer_read %w[%co, %ci, %kh, %kw], %pad {in_bounds = [true], permutation_map = affine_map<(d0, d1, d2, d3) -> (d1)>} : memref<32x8x3x3xf32>, vector<8xf32>
    vector.store %v, %p[%t, %kh, %kw, %co, %q] : memref<1x3x3x32x8xf32>, vector<8xf32>
    scf.reduce
  }) : (index, index, index, index, index, index, index, index, index, index, index, index, index, index, index) -> ()
  func.return
}
func.func @main(%w: memref<32x8x3x3xf32>, %p: memref<1x3x3x32x8xf32>) {
  func.call @eight(%w, %p) {gradfuse.kernel} : (memref<32x8x3x3xf32>, memref<1x3x3x32x8xf32>) -> ()
  func.return
}
// CHECK-LABEL: func.func private @eight
// CHECK:       %[[F:.*]] = memref.collapse_shape %w {{\[}}[0 : i64], [1 : i64], [2 : i64, 3 : i64]] : memref<32x8x3x3xf32> into memref<32x8x9xf32>
// CHECK:       ^bb0(%t: index, %co: index, %q: index):
// CHECK-COUNT-8: vector.load %[[F]][%co, %{{.*}}, %{{.*}}] : memref<32x8x9xf32>, vector<8xf32>
// CHECK-COUNT-24: vector.shuffle
// CHECK:       %[[EIGHT:.*]] = arith.constant 8 : index
// CHECK:       %[[LAST:.*]] = vector.transfer_read %[[F]][%co, %ci, %[[EIGHT]]]
// CHECK-COUNT-8: vector.store
// CHECK:       vector.store %[[LAST]], %p[%t, %{{.*}}, %{{.*}}, %co, %q]

// -----

// Lanes of 8: a transposed convolution's weight copy, split by phase
// (`kernel-split-phases`), gathers 8 output channels 16 apart, its taps
// `kh = 2 t - r + 1`, `kw = 2 u - s + 1` (t, r, u, s the phases' and taps' indices).
// Each channel's 16 taps are contiguous: 2 vector loads a channel, the 8 x 16 block two
// 8 x 8 tiles, each transposed by 24 shuffles (`loops-transpose-writes`'s); each of
// the 16 values of (t, r, u, s) stores the vector of the tap it reads (the first,
// all 0, reads tap (1, 1): the tile's column 5). The nest runs over the rest.
func.func private @phases(%w: memref<32x16x4x4xf32>, %p: memref<2x2x2x2x32x16xf32>) attributes {gradfuse.kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %m1 = arith.constant -1 : index
  %pad = arith.constant 0.000000e+00 : f32
  "scf.parallel"(%c0, %c0, %c0, %c0, %c0, %c0, %c32, %c2, %c2, %c2, %c2, %c16, %c1, %c1, %c1, %c1, %c1, %c8) <{operandSegmentSizes = array<i32: 6, 6, 6, 0>}> ({
  ^bb0(%ci: index, %t: index, %r: index, %u: index, %s: index, %q: index):
    %a0 = arith.muli %r, %m1 : index
    %a1 = arith.muli %t, %c2 : index
    %a2 = arith.addi %a0, %a1 : index
    %kh = arith.addi %a2, %c1 : index
    %b0 = arith.muli %s, %m1 : index
    %b1 = arith.muli %u, %c2 : index
    %b2 = arith.addi %b0, %b1 : index
    %kw = arith.addi %b2, %c1 : index
    %v = vector.transfer_read %w[%ci, %q, %kh, %kw], %pad {in_bounds = [true], permutation_map = affine_map<(d0, d1, d2, d3) -> (d1)>} : memref<32x16x4x4xf32>, vector<8xf32>
    vector.store %v, %p[%r, %s, %t, %u, %ci, %q] : memref<2x2x2x2x32x16xf32>, vector<8xf32>
    scf.reduce
  }) : (index, index, index, index, index, index, index, index, index, index, index, index, index, index, index, index, index, index) -> ()
  func.return
}
func.func @main(%w: memref<32x16x4x4xf32>, %p: memref<2x2x2x2x32x16xf32>) {
  func.call @phases(%w, %p) {gradfuse.kernel} : (memref<32x16x4x4xf32>, memref<2x2x2x2x32x16xf32>) -> ()
  func.return
}
// CHECK-LABEL: func.func private @phases
// CHECK:       %[[F:.*]] = memref.collapse_shape %w {{\[}}[0 : i64], [1 : i64], [2 : i64, 3 : i64]] : memref<32x16x4x4xf32> into memref<32x16x16xf32>
// CHECK-NEXT:  "scf.parallel"
// CHECK-NEXT:  ^bb0(%ci: index, %q: index):
// CHECK:         %[[R0:.*]] = vector.load %[[F]][%ci, %q, %[[H:.*]]] : memref<32x16x16xf32>, vector<8xf32>
// CHECK-NEXT:    %[[R1:.*]] = vector.load %[[F]][%ci, %{{.*}}, %[[H]]] : memref<32x16x16xf32>, vector<8xf32>
// CHECK-COUNT-6: vector.load %[[F]][%ci, %{{.*}}, %[[H]]]
// CHECK-NEXT:    vector.shuffle %[[R0]], %[[R1]] [0, 8, 1, 9, 4, 12, 5, 13] : vector<8xf32>, vector<8xf32>
// CHECK-COUNT-23: vector.shuffle
// CHECK:         vector.load %[[F]][%ci, %q, %{{.*}}] : memref<32x16x16xf32>, vector<8xf32>
// CHECK-COUNT-7: vector.load
// CHECK-COUNT-24: vector.shuffle
// CHECK-COUNT-16: vector.store %{{.*}}, %p[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %ci, %q] : memref<2x2x2x2x32x16xf32>, vector<8xf32>
// CHECK-NOT:     vector.transfer_read
// C-LABEL:     static void phases(
// C:             __builtin_shuffle({{v[0-9]+}}, {{v[0-9]+}}, (gf_intx8){0, 8, 1, 9, 4, 12, 5, 13});
