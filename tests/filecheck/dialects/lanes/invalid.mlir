// Every verifier message of the lanes ops, each checking the message and the op it
// underlines.
// RUN: ir-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @mixed_widths(%x: vector<8xf32>, %y: vector<4xf32>) {
  %m = "lanes.cmpf"(%x, %y) <{predicate = 2 : i64, fastmath = #arith.fastmath<none>}> : (vector<8xf32>, vector<4xf32>) -> vector<8xi1>
  func.return
}
// CHECK:       %m = "lanes.cmpf"(%x, %y)
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: lanes.cmpf: compares vector<8xf32> with vector<4xf32>

// -----

func.func @short_mask(%x: vector<8xf32>, %y: vector<8xf32>) {
  %m = "lanes.cmpf"(%x, %y) <{predicate = 2 : i64, fastmath = #arith.fastmath<none>}> : (vector<8xf32>, vector<8xf32>) -> vector<4xi1>
  func.return
}
// CHECK:       %m = "lanes.cmpf"(%x, %y)
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: lanes.cmpf: a comparison of vector<8xf32> gives a vector<8xi1>

// -----

func.func @select_width(%m: vector<4xi1>, %x: vector<8xf32>) {
  %g = lanes.select %m, %x, %x : vector<4xi1>, vector<8xf32>
  func.return
}
// CHECK:       %g = "lanes.select"(%m, %x, %x)
// CHECK-NEXT:  ^^^
// CHECK-NEXT:  | Operation does not verify: lanes.select: a choice of vector<8xf32> needs a mask of as many lanes
