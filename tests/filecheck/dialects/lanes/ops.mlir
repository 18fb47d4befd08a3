// Round trip of the lanes ops (MLIR's arith.cmpf and arith.select on vectors): custom
// format -> custom format, and through the generic format.
// RUN: ir-opt %s | ir-opt -f mlir | filecheck %s
// RUN: ir-opt %s --print-op-generic | ir-opt -f mlir | filecheck %s

func.func @relu_grad(%x: vector<8xf32>, %dy: vector<8xf32>, %zeros: vector<8xf32>) -> vector<8xf32> {
  %m = lanes.cmpf ogt, %x, %zeros : vector<8xf32>
  %g = lanes.select %m, %dy, %zeros : vector<8xi1>, vector<8xf32>
  func.return %g : vector<8xf32>
}
// CHECK-LABEL: func.func @relu_grad
// CHECK-NEXT:    %m = lanes.cmpf ogt, %x, %zeros : vector<8xf32>
// CHECK-NEXT:    %g = lanes.select %m, %dy, %zeros : vector<8xi1>, vector<8xf32>
// CHECK-NEXT:    func.return %g : vector<8xf32>
