// RUN: ir-opt %s -p kernel-plan-buffers,convert-kernel-to-gpu -t c | filecheck %s

// The C backend's packed sums (backend/c/pack.py, vector.py) on a weight gradient stored
// transposed, as autodiff leaves a Linear's: g[k, j] = sum_i h[i / 7, i % 7, k] * dy[i, j]
// over the domain [j, k | i]. The lanes go along j, which g is stored contiguously
// along (not along the domain's innermost k: each lane would write a row of its own),
// and h's rows are read as i * 40, not (i / 7) * 280 + (i % 7) * 40 for every i.
// tests/unit/backend/test_c_lanes.py runs the same program against NumPy.
func.func @main() {
  %h = kernel.param "h" : memref<9x7x40xf32>
  %dy = kernel.param "dy" : memref<63x96xf32>
  %g = kernel.alloc : memref<40x96xf32>
  "kernel.kernel"(%h, %dy, %g) <{sym_name = "wgrad", kind = "contraction", domain = array<i64: 96, 40, 63>, parallel = 2 : i64}> ({
  ^bb0(%i0: index, %i1: index, %i2: index, %b0: memref<9x7x40xf32>, %b1: memref<63x96xf32>, %b2: memref<40x96xf32>):
    %a = kernel.load %b0[affine_map<(d0, d1, d2) -> (d2 floordiv 7, d2 mod 7, d1)>] : memref<9x7x40xf32> -> f32
    %c = kernel.load %b1[affine_map<(d0, d1, d2) -> (d2, d0)>] : memref<63x96xf32> -> f32
    %p = arith.mulf %a, %c : f32
    %s = kernel.reduce "add" %p : f32
    kernel.store %s, %b2[affine_map<(d0, d1) -> (d1, d0)>] : f32, memref<40x96xf32>
  }) : (memref<9x7x40xf32>, memref<63x96xf32>, memref<40x96xf32>) -> ()
  kernel.receive "g", %g : memref<40x96xf32>
  func.return
}
// CHECK:       static void wgrad(
// CHECK:         for (long b = 0; b < 96; b += 16) {
// CHECK:           for (long i1b = 0; i1b < 40; i1b += 8) {
// CHECK:             const float* gf_w0 = &v0[i1b + [[K:v[0-9]+]] * 40];
// CHECK-NOT:         / 7
// CHECK:             v2[i1 * 96 + (b + l)] = gf_sum0[gf_t][gf_s * 16 + l];
