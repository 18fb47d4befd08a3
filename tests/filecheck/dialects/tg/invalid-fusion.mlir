// Every verifier message of tg.fusion (tg-fuse's decisions), one case each, in MLIR's
// generic form (tg.fusion has no .tg form).
// RUN: ir-opt %s --split-input-file --verify-diagnostics | filecheck %s

"func.func"() <{sym_name = "bad_kind", function_type = (tensor<4xf32>) -> ()}> ({
^bb0(%x: tensor<4xf32>):
  %0 = "tg.fusion"() <{kind = "bogus", domain = array<i64: 4>, parallel = 1 : i64, launch = 0 : i64}> ({
    %y = "tg.exp2"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    "tg.fusion_yield"(%y) : (tensor<4xf32>) -> ()
  }) : () -> tensor<4xf32>
  "func.return"() : () -> ()
}) : () -> ()
// CHECK: Operation does not verify: tg.fusion: kind must be one of elementwise, reduction, contraction, got bogus

// -----

"func.func"() <{sym_name = "bad_parallel", function_type = (tensor<4xf32>) -> ()}> ({
^bb0(%x: tensor<4xf32>):
  %0 = "tg.fusion"() <{kind = "elementwise", domain = array<i64: 4>, parallel = 2 : i64, launch = 0 : i64}> ({
    %y = "tg.exp2"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    "tg.fusion_yield"(%y) : (tensor<4xf32>) -> ()
  }) : () -> tensor<4xf32>
  "func.return"() : () -> ()
}) : () -> ()
// CHECK: Operation does not verify: tg.fusion: parallel 2 is not within the domain's 1 dims

// -----

"func.func"() <{sym_name = "bad_result", function_type = (tensor<4xf32>) -> ()}> ({
^bb0(%x: tensor<4xf32>):
  %0 = "tg.fusion"() <{kind = "elementwise", domain = array<i64: 4>, parallel = 1 : i64, launch = 0 : i64}> ({
    %y = "tg.exp2"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    "tg.fusion_yield"(%y) : (tensor<4xf32>) -> ()
  }) : () -> tensor<4xf64>
  "func.return"() : () -> ()
}) : () -> ()
// CHECK: Operation does not verify: tg.fusion: result types must equal the types of the yielded values

// -----

"func.func"() <{sym_name = "bad_map", function_type = (tensor<4xf32>) -> ()}> ({
^bb0(%x: tensor<4xf32>):
  %0 = "tg.fusion"() <{kind = "elementwise", domain = array<i64: 4>, parallel = 1 : i64, launch = 0 : i64}> ({
    %y = "tg.exp2"(%x) {fuse.map = affine_map<(d0, d1) -> (d0)>} : (tensor<4xf32>) -> tensor<4xf32>
    "tg.fusion_yield"(%y) : (tensor<4xf32>) -> ()
  }) : () -> tensor<4xf32>
  "func.return"() : () -> ()
}) : () -> ()
// CHECK: Operation does not verify: tg.fusion: tg.exp2: fuse.map (d0, d1) -> (d0) must map the parallel dims (1 dims)
