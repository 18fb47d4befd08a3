// Every verifier message of the kernel ops, one case each (two for the domain check
// and for the kernel.reduce-presence check, which have two triggers), each checking the
// message and the op it underlines. Messages about a body op that depend on its place
// in the kernel (access map dims, epilogue operands) are reported on the kernel.kernel.
// RUN: ir-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @bad_kind(%x: memref<2xf32>) {
  "kernel.kernel"(%x) <{sym_name = "bad_kind", kind = "bogus", domain = array<i64: 2>, parallel = 1 : i64}> ({
  ^bb0(%i: index, %b: memref<2xf32>):
  }) : (memref<2xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "bad_kind"
// CHECK:       "kernel.kernel"(%x) <{sym_name = "bad_kind"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.kernel: kind must be one of elementwise, reduction, contraction, got bogus

// -----

func.func @too_many_parallel(%x: memref<2xf32>) {
  "kernel.kernel"(%x) <{sym_name = "too_many_parallel", kind = "elementwise", domain = array<i64: 2>, parallel = 2 : i64}> ({
  ^bb0(%i: index, %b: memref<2xf32>):
  }) : (memref<2xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "too_many_parallel"
// CHECK:       "kernel.kernel"(%x) <{sym_name = "too_many_parallel"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.kernel: bad domain [2] with 2 parallel dims

// -----

func.func @empty_dim(%x: memref<2xf32>) {
  "kernel.kernel"(%x) <{sym_name = "empty_dim", kind = "elementwise", domain = array<i64: 0, 2>, parallel = 2 : i64}> ({
  ^bb0(%i: index, %j: index, %b: memref<2xf32>):
  }) : (memref<2xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "empty_dim"
// CHECK:       "kernel.kernel"(%x) <{sym_name = "empty_dim"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.kernel: bad domain [0, 2] with 2 parallel dims

// -----

func.func @body_arguments(%x: memref<2x3xf32>) {
  "kernel.kernel"(%x) <{sym_name = "body_arguments", kind = "elementwise", domain = array<i64: 2, 3>, parallel = 2 : i64}> ({
  ^bb0(%i: index, %b: memref<2x3xf32>):
  }) : (memref<2x3xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "body_arguments"
// CHECK:       "kernel.kernel"(%x) <{sym_name = "body_arguments"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.kernel: body arguments must be one index per domain dim, then the buffers

// -----

func.func @missing_reduce(%x: memref<2x3xf32>, %y: memref<2xf32>) {
  "kernel.kernel"(%x, %y) <{sym_name = "missing_reduce", kind = "reduction", domain = array<i64: 2, 3>, parallel = 1 : i64}> ({
  ^bb0(%i: index, %j: index, %bx: memref<2x3xf32>, %by: memref<2xf32>):
    %v = kernel.load %bx[affine_map<(d0, d1) -> (d0, d1)>] : memref<2x3xf32> -> f32
  }) : (memref<2x3xf32>, memref<2xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "missing_reduce"
// CHECK:       "kernel.kernel"(%x, %y) <{sym_name = "missing_reduce"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.kernel: a kernel has kernel.reduce ops exactly when it has reduction dims

// -----

func.func @reduce_without_reduction_dims(%x: memref<2xf32>) {
  "kernel.kernel"(%x) <{sym_name = "reduce_without_reduction_dims", kind = "elementwise", domain = array<i64: 2>, parallel = 1 : i64}> ({
  ^bb0(%i: index, %b: memref<2xf32>):
    %v = kernel.load %b[affine_map<(d0) -> (d0)>] : memref<2xf32> -> f32
    %s = kernel.reduce "add" %v : f32
  }) : (memref<2xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "reduce_without_reduction_dims"
// CHECK:       "kernel.kernel"(%x) <{sym_name = "reduce_without_reduction_dims"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.kernel: a kernel has kernel.reduce ops exactly when it has reduction dims

// -----

func.func @reduces_apart(%x: memref<2x3xf32>, %y: memref<2xf32>) {
  "kernel.kernel"(%x, %y) <{sym_name = "reduces_apart", kind = "reduction", domain = array<i64: 2, 3>, parallel = 1 : i64}> ({
  ^bb0(%i: index, %j: index, %bx: memref<2x3xf32>, %by: memref<2xf32>):
    %v = kernel.load %bx[affine_map<(d0, d1) -> (d0, d1)>] : memref<2x3xf32> -> f32
    %s = kernel.reduce "add" %v : f32
    %w = arith.mulf %v, %v : f32
    %m = kernel.reduce "max" %w : f32
    kernel.store %m, %by[affine_map<(d0) -> (d0)>] : f32, memref<2xf32>
  }) : (memref<2x3xf32>, memref<2xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "reduces_apart"
// CHECK:       "kernel.kernel"(%x, %y) <{sym_name = "reduces_apart"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.kernel: kernel.reduce ops must stand together between prologue and epilogue

// -----

func.func @prologue_map_dims(%x: memref<2xf32>, %y: memref<2xf32>) {
  "kernel.kernel"(%x, %y) <{sym_name = "prologue_map_dims", kind = "reduction", domain = array<i64: 2, 3>, parallel = 1 : i64}> ({
  ^bb0(%i: index, %j: index, %bx: memref<2xf32>, %by: memref<2xf32>):
    %v = kernel.load %bx[affine_map<(d0) -> (d0)>] : memref<2xf32> -> f32
    %s = kernel.reduce "add" %v : f32
    kernel.store %s, %by[affine_map<(d0) -> (d0)>] : f32, memref<2xf32>
  }) : (memref<2xf32>, memref<2xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "prologue_map_dims"
// CHECK:       "kernel.kernel"(%x, %y) <{sym_name = "prologue_map_dims"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.load: access map (d0) -> (d0) must take 2 dims here

// -----

func.func @epilogue_map_dims(%x: memref<2x3xf32>, %y: memref<2x3xf32>) {
  "kernel.kernel"(%x, %y) <{sym_name = "epilogue_map_dims", kind = "reduction", domain = array<i64: 2, 3>, parallel = 1 : i64}> ({
  ^bb0(%i: index, %j: index, %bx: memref<2x3xf32>, %by: memref<2x3xf32>):
    %v = kernel.load %bx[affine_map<(d0, d1) -> (d0, d1)>] : memref<2x3xf32> -> f32
    %s = kernel.reduce "add" %v : f32
    kernel.store %s, %by[affine_map<(d0, d1) -> (d0, d1)>] : f32, memref<2x3xf32>
  }) : (memref<2x3xf32>, memref<2x3xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "epilogue_map_dims"
// CHECK:       "kernel.kernel"(%x, %y) <{sym_name = "epilogue_map_dims"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.store: access map (d0, d1) -> (d0, d1) must take 1 dims here

// -----

func.func @epilogue_uses_prologue(%x: memref<2x3xf32>, %y: memref<2xf32>) {
  "kernel.kernel"(%x, %y) <{sym_name = "epilogue_uses_prologue", kind = "reduction", domain = array<i64: 2, 3>, parallel = 1 : i64}> ({
  ^bb0(%i: index, %j: index, %bx: memref<2x3xf32>, %by: memref<2xf32>):
    %v = kernel.load %bx[affine_map<(d0, d1) -> (d0, d1)>] : memref<2x3xf32> -> f32
    %s = kernel.reduce "add" %v : f32
    %t = arith.addf %s, %v : f32
    kernel.store %t, %by[affine_map<(d0) -> (d0)>] : f32, memref<2xf32>
  }) : (memref<2x3xf32>, memref<2xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "epilogue_uses_prologue"
// CHECK:       "kernel.kernel"(%x, %y) <{sym_name = "epilogue_uses_prologue"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: arith.addf: an epilogue op may only use reductions, not prologue values

// -----

func.func @group_of_non_kernels() {
  "kernel.group"() <{sym_name = "group_of_non_kernels"}> ({
    %c = arith.constant 1.000000e+00 : f32
  }) : () -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "group_of_non_kernels"
// CHECK:       "kernel.group"() <{sym_name = "group_of_non_kernels"}>
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.group: may only hold kernel.kernel ops, found arith.constant

// -----

func.func @load_rank(%x: memref<2xf32>, %y: memref<2xf32>) {
  "kernel.kernel"(%x, %y) <{sym_name = "load_rank", kind = "elementwise", domain = array<i64: 2>, parallel = 1 : i64}> ({
  ^bb0(%i: index, %bx: memref<2xf32>, %by: memref<2xf32>):
    %v = kernel.load %bx[affine_map<(d0) -> (d0, d0)>] : memref<2xf32> -> f32
    kernel.store %v, %by[affine_map<(d0) -> (d0)>] : f32, memref<2xf32>
  }) : (memref<2xf32>, memref<2xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "load_rank"
// CHECK:       "kernel.load"(%bx) <{map = affine_map<(d0) -> (d0, d0)>}>
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.load: access map (d0) -> (d0, d0) gives 2 indices for a rank-1 buffer

// -----

func.func @store_rank(%x: memref<2xf32>, %y: memref<2x2xf32>) {
  "kernel.kernel"(%x, %y) <{sym_name = "store_rank", kind = "elementwise", domain = array<i64: 2>, parallel = 1 : i64}> ({
  ^bb0(%i: index, %bx: memref<2xf32>, %by: memref<2x2xf32>):
    %v = kernel.load %bx[affine_map<(d0) -> (d0)>] : memref<2xf32> -> f32
    kernel.store %v, %by[affine_map<(d0) -> (d0)>] : f32, memref<2x2xf32>
  }) : (memref<2xf32>, memref<2x2xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "store_rank"
// CHECK:       "kernel.store"(%v, %by) <{map = affine_map<(d0) -> (d0)>}>
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.store: access map (d0) -> (d0) gives 1 indices for a rank-2 buffer

// -----

func.func @gather_without_symbol(%x: memref<5x3xf32>, %i: memref<4x3xf32>, %y: memref<4x3xf32>) {
  "kernel.kernel"(%x, %i, %y) <{sym_name = "gather_without_symbol", kind = "elementwise", domain = array<i64: 4, 3>, parallel = 2 : i64}> ({
  ^bb0(%d0: index, %d1: index, %bx: memref<5x3xf32>, %bi: memref<4x3xf32>, %by: memref<4x3xf32>):
    %n = kernel.load %bi[affine_map<(d0, d1) -> (d0, d1)>] : memref<4x3xf32> -> f32
    %v = kernel.gather %bx[affine_map<(d0, d1) -> (d0, d1)>], %n : memref<5x3xf32>, f32 -> f32
    kernel.store %v, %by[affine_map<(d0, d1) -> (d0, d1)>] : f32, memref<4x3xf32>
  }) : (memref<5x3xf32>, memref<4x3xf32>, memref<4x3xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "gather_without_symbol"
// CHECK:       "kernel.gather"(%bx, %n) <{map = affine_map<(d0, d1) -> (d0, d1)>}>
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.gather: the access map needs one symbol (s0) for the index

// -----

func.func @scatter_add_without_symbol(%i: memref<4x3xf32>, %y: memref<5x3xf32>) {
  "kernel.kernel"(%i, %y) <{sym_name = "scatter_add_without_symbol", kind = "elementwise", domain = array<i64: 4, 3>, parallel = 2 : i64}> ({
  ^bb0(%d0: index, %d1: index, %bi: memref<4x3xf32>, %by: memref<5x3xf32>):
    %n = kernel.load %bi[affine_map<(d0, d1) -> (d0, d1)>] : memref<4x3xf32> -> f32
    kernel.scatter_add %n, %by[affine_map<(d0, d1) -> (d0, d1)>], %n : f32, memref<5x3xf32>, f32
  }) : (memref<4x3xf32>, memref<5x3xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "scatter_add_without_symbol"
// CHECK:       "kernel.scatter_add"(%n, %by, %n) <{map = affine_map<(d0, d1) -> (d0, d1)>}>
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.scatter_add: the access map needs one symbol (s0) for the index

// -----

func.func @random_two_indices(%c: memref<f32>, %y: memref<2x3xf32>) {
  "kernel.kernel"(%c, %y) <{sym_name = "random_two_indices", kind = "elementwise", domain = array<i64: 2, 3>, parallel = 2 : i64}> ({
  ^bb0(%d0: index, %d1: index, %bc: memref<f32>, %by: memref<2x3xf32>):
    %n = kernel.load %bc[affine_map<(d0, d1) -> ()>] : memref<f32> -> f32
    %u = kernel.random %n[affine_map<(d0, d1) -> (d0, d1)>] seed 7 : i64 : f32 -> f32
    kernel.store %u, %by[affine_map<(d0, d1) -> (d0, d1)>] : f32, memref<2x3xf32>
  }) : (memref<f32>, memref<2x3xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "random_two_indices"
// CHECK:       "kernel.random"(%n) <{map = affine_map<(d0, d1) -> (d0, d1)>, seed = 7 : i64}>
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.random: the map gives the one linear element index

// -----

func.func @reduce_kind(%x: memref<2x3xf32>, %y: memref<2xf32>) {
  "kernel.kernel"(%x, %y) <{sym_name = "reduce_kind", kind = "reduction", domain = array<i64: 2, 3>, parallel = 1 : i64}> ({
  ^bb0(%i: index, %j: index, %bx: memref<2x3xf32>, %by: memref<2xf32>):
    %v = kernel.load %bx[affine_map<(d0, d1) -> (d0, d1)>] : memref<2x3xf32> -> f32
    %s = kernel.reduce "min" %v : f32
    kernel.store %s, %by[affine_map<(d0) -> (d0)>] : f32, memref<2xf32>
  }) : (memref<2x3xf32>, memref<2xf32>) -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "reduce_kind"
// CHECK:       "kernel.reduce"(%v) <{kind = "min"}>
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.reduce: kind must be add or max, got min

// -----

// kernel.rows: the second kernel reads, at row d0, what the first wrote at row d1.
func.func @rows_cross(%x: memref<4x4xf32>, %s: memref<4xf32>, %y: memref<4x4xf32>) {
  "kernel.rows"() <{sym_name = "rows_cross", rows = array<i64: 4>}> ({
    "kernel.kernel"(%x, %s) <{sym_name = "k0", kind = "reduction", domain = array<i64: 4, 4>, parallel = 1 : i64}> ({
    ^bb0(%i: index, %j: index, %bx: memref<4x4xf32>, %bs: memref<4xf32>):
      %a = kernel.load %bx[affine_map<(d0, d1) -> (d0, d1)>] : memref<4x4xf32> -> f32
      %r = kernel.reduce "add" %a : f32
      kernel.store %r, %bs[affine_map<(d0) -> (d0)>] : f32, memref<4xf32>
    }) : (memref<4x4xf32>, memref<4xf32>) -> ()
    "kernel.kernel"(%s, %y) <{sym_name = "k1", kind = "elementwise", domain = array<i64: 4, 4>, parallel = 2 : i64}> ({
    ^bb0(%i: index, %j: index, %bs: memref<4xf32>, %by: memref<4x4xf32>):
      %a = kernel.load %bs[affine_map<(d0, d1) -> (d1)>] : memref<4xf32> -> f32
      kernel.store %a, %by[affine_map<(d0, d1) -> (d0, d1)>] : f32, memref<4x4xf32>
    }) : (memref<4xf32>, memref<4x4xf32>) -> ()
  }) : () -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "rows_cross"
// CHECK:       "kernel.rows"() <{sym_name = "rows_cross"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.rows: kernel k1 reads or writes a buffer that the kernels write at (d0, d1) -> (d1), outside its own row

// -----

// kernel.rows: every kernel inside runs over the rows.
func.func @rows_domain(%x: memref<4x4xf32>, %y: memref<2xf32>) {
  "kernel.rows"() <{sym_name = "rows_domain", rows = array<i64: 4>}> ({
    "kernel.kernel"(%y) <{sym_name = "k0", kind = "elementwise", domain = array<i64: 2>, parallel = 1 : i64}> ({
    ^bb0(%i: index, %by: memref<2xf32>):
    }) : (memref<2xf32>) -> ()
  }) : () -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "rows_domain"
// CHECK:       "kernel.rows"() <{sym_name = "rows_domain"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.rows: kernel k0 with domain [2] and 1 parallel dims does not run over rows [4]

// -----

func.func @rows_empty(%x: memref<4xf32>) {
  "kernel.rows"() <{sym_name = "rows_empty", rows = array<i64>}> ({
  ^bb0:
  }) : () -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "rows_empty"
// CHECK:       "kernel.rows"() <{sym_name = "rows_empty"
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.rows: bad rows []

// -----

func.func @loop_step(%x: memref<2xf32>) {
  "kernel.for"() <{lower = 0 : i64, upper = 6 : i64, step = 0 : i64}> ({
  ^bb0(%it: index):
    "kernel.yield"() : () -> ()
  }) : () -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "loop_step"
// CHECK:       "kernel.for"() <{lower = 0 : i64, upper = 6 : i64, step = 0 : i64}>
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.for: step must be positive, got 0

// -----

func.func @loop_args(%x: memref<2xf32>) {
  "kernel.for"() <{lower = 0 : i64, upper = 6 : i64, step = 1 : i64}> ({
  ^bb0(%it: index, %y: f32):
    "kernel.yield"() : () -> ()
  }) : () -> ()
  func.return
}
// CHECK-LABEL: "func.func"() <{sym_name = "loop_args"
// CHECK:       "kernel.for"() <{lower = 0 : i64, upper = 6 : i64, step = 1 : i64}>
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: kernel.for: the body's one argument must be the induction variable (index), got 2 arguments
