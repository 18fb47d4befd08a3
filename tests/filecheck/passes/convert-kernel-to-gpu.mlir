// RUN: ir-opt %s -p kernel-plan-buffers,convert-kernel-to-gpu --split-input-file | filecheck %s
// RUN: ir-opt %s -p kernel-plan-buffers,convert-kernel-to-gpu --split-input-file --print-debuginfo | filecheck %s --check-prefix=LOC

// A contraction with a bias epilogue: one thread per output element, the
// reduction dim becomes an scf.for carrying the sum, access maps become index ops.

func.func @main() {
  %w = kernel.param "w" {init = 5.000000e-01 : f32} : memref<4x3xf32>
  %x = kernel.alloc : memref<2x3xf32>
  %h = kernel.alloc : memref<2x4xf32>
  kernel.feed "x", %x : memref<2x3xf32>
  "kernel.kernel"(%x, %w, %h) <{sym_name = "mm", kind = "contraction", domain = array<i64: 2, 4, 3>, parallel = 2 : i64}> ({
  ^bb0(%i: index, %j: index, %k: index, %bx: memref<2x3xf32>, %bw: memref<4x3xf32>, %bh: memref<2x4xf32>):
    %a = kernel.load %bx[affine_map<(d0, d1, d2) -> (d0, d2)>] : memref<2x3xf32> -> f32 loc("model.py":5:9)
    %b = kernel.load %bw[affine_map<(d0, d1, d2) -> (d1, d2)>] : memref<4x3xf32> -> f32
    %p = arith.mulf %a, %b : f32
    %s = kernel.reduce "add" %p : f32
    kernel.store %s, %bh[affine_map<(d0, d1) -> (d0 + d1 floordiv 4, d1 mod 4)>] : f32, memref<2x4xf32>
  }) : (memref<2x3xf32>, memref<4x3xf32>, memref<2x4xf32>) -> () loc("model.py":4:1)
  kernel.receive "h", %h : memref<2x4xf32>
  func.return
}

// CHECK-LABEL: builtin.module attributes {gpu.container_module, gradfuse.peak_bytes = 88 : i64}
// CHECK:       "memref.global"() <{sym_name = "param_w", type = memref<4x3xf32>, initial_value = dense<5.000000e-01> : tensor<4x3xf32>, sym_visibility = "private"}> {gradfuse.key = "w"}
// CHECK:       func.func private @gradfuse_feed_0(memref<2x3xf32>) -> () attributes {gradfuse.key = "x"}
// CHECK:       func.func private @gradfuse_receive_0(memref<2x4xf32>) -> () attributes {gradfuse.key = "h"}
// CHECK:       "gpu.func"() <{function_type = (memref<2x3xf32>, memref<4x3xf32>, memref<2x4xf32>) -> (), kernel}> ({
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: memref<2x3xf32>, %[[W:.*]]: memref<4x3xf32>, %[[H:.*]]: memref<2x4xf32>):
// CHECK-DAG:     %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG:     %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG:     %[[C3:.*]] = arith.constant 3 : index
// CHECK-DAG:     %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         %[[TID:.*]] = "gpu.thread_id"() <{dimension = #gpu<dim x>}>
// CHECK-NEXT:    %[[BID:.*]] = "gpu.block_id"() <{dimension = #gpu<dim x>}>
// CHECK-NEXT:    %[[BDIM:.*]] = "gpu.block_dim"() <{dimension = #gpu<dim x>}>
// CHECK-NEXT:    %[[OFF:.*]] = arith.muli %[[BID]], %[[BDIM]] : index
// CHECK-NEXT:    %[[ID:.*]] = arith.addi %[[OFF]], %[[TID]] : index
// CHECK-NEXT:    %[[IN:.*]] = arith.cmpi ult, %[[ID]], %[[C8]] : index
// CHECK-NEXT:    scf.if %[[IN]] {
// CHECK-NEXT:      %[[J:.*]] = arith.remui %[[ID]], %[[C4]] : index
// CHECK-NEXT:      %[[I:.*]] = arith.divui %[[ID]], %[[C4]] : index
// CHECK-NEXT:      %[[SUM:.*]] = scf.for %[[K:.*]] = %{{.*}} to %[[C3]] step %{{.*}} iter_args(%[[ACC:.*]] = %[[ZERO]]) -> (f32) {
// CHECK-NEXT:        %[[A:.*]] = memref.load %[[X]][%[[I]], %[[K]]] : memref<2x3xf32>
// CHECK-NEXT:        %[[B:.*]] = memref.load %[[W]][%[[J]], %[[K]]] : memref<4x3xf32>
// CHECK-NEXT:        %[[P:.*]] = arith.mulf %[[A]], %[[B]] : f32
// CHECK-NEXT:        %[[NEXT:.*]] = arith.addf %[[ACC]], %[[P]] : f32
// CHECK-NEXT:        scf.yield %[[NEXT]] : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[R1:.*]] = arith.divui %[[J]], %[[C4]] : index
// CHECK-NEXT:      %[[ROW:.*]] = arith.addi %[[I]], %[[R1]] : index
// CHECK-NEXT:      %[[COL:.*]] = arith.remui %[[J]], %[[C4]] : index
// CHECK-NEXT:      memref.store %[[SUM]], %[[H]][%[[ROW]], %[[COL]]] : memref<2x4xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    "gpu.return"() : () -> ()
// CHECK-NEXT:  }) {sym_name = "mm", gpu.kernel, workgroup_attributions = 0 : i64, gradfuse.kind = "contraction", gradfuse.threads = 8 : i64}
// CHECK:       func.func @main() attributes {gradfuse.peak_bytes = 88 : i64} {
// CHECK-NEXT:    %[[ARENA:.*]] = memref.alloc() {alignment = 64 : i64} : memref<128xi8>
// CHECK-NEXT:    %[[PW:.*]] = memref.get_global @param_w : memref<4x3xf32>
// CHECK-NEXT:    %[[O0:.*]] = arith.constant 64 : index
// CHECK-NEXT:    %[[VX:.*]] = memref.view %[[ARENA]][%[[O0]]][] : memref<128xi8> to memref<2x3xf32>
// CHECK-NEXT:    %[[O1:.*]] = arith.constant 0 : index
// CHECK-NEXT:    %[[VH:.*]] = memref.view %[[ARENA]][%[[O1]]][] : memref<128xi8> to memref<2x4xf32>
// CHECK-NEXT:    func.call @gradfuse_feed_0(%[[VX]]) {gradfuse.key = "x"} : (memref<2x3xf32>) -> ()
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:    %[[BX:.*]] = arith.constant 32 : index
// CHECK-NEXT:    "gpu.launch_func"(%[[ONE]], %[[ONE]], %[[ONE]], %[[BX]], %[[ONE]], %[[ONE]], %[[VX]], %[[PW]], %[[VH]]) <{kernel = @gradfuse_kernels::@mm, operandSegmentSizes = array<i32: 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3, 0>}>
// CHECK-NEXT:    func.call @gradfuse_receive_0(%[[VH]]) {gradfuse.key = "h"} : (memref<2x4xf32>) -> ()
// CHECK-NEXT:    func.return

// Kernel body ops keep their locations; the gpu.func and its launch get the kernel's.
// LOC-LABEL: builtin.module
// LOC:         memref.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<2x3xf32> loc("model.py":5:9)
// LOC:       }) {sym_name = "mm", {{.*}}} : () -> () loc("model.py":4:1)
// LOC:       "gpu.launch_func"({{.*}}) loc("model.py":4:1)

// -----

// A loop around a group of two kernels with different domains: one launch of
// 2 + 3 threads per iteration, the id ranges chained by scf.if.

func.func @main() {
  %a = kernel.param "a" : memref<2xf32>
  %b = kernel.param "b" : memref<3xf32>
  "kernel.for"() <{lower = 0 : i64, upper = 10 : i64, step = 2 : i64}> ({
  ^bb0(%it: index):
    "kernel.group"() <{sym_name = "update"}> ({
      "kernel.kernel"(%a) <{sym_name = "ua", kind = "elementwise", domain = array<i64: 2>, parallel = 1 : i64}> ({
      ^bb0(%i: index, %ba: memref<2xf32>):
        %v = kernel.load %ba[affine_map<(d0) -> (d0)>] : memref<2xf32> -> f32
        %e = math.exp2 %v : f32
        kernel.store %e, %ba[affine_map<(d0) -> (d0)>] : f32, memref<2xf32>
      }) : (memref<2xf32>) -> ()
      "kernel.kernel"(%b) <{sym_name = "ub", kind = "elementwise", domain = array<i64: 3>, parallel = 1 : i64}> ({
      ^bb0(%i: index, %bb: memref<3xf32>):
        %v = kernel.load %bb[affine_map<(d0) -> ((d0 - 1) mod 3)>] : memref<3xf32> -> f32
        kernel.store %v, %bb[affine_map<(d0) -> (d0)>] : f32, memref<3xf32>
      }) : (memref<3xf32>) -> ()
    }) : () -> ()
    "kernel.yield"() : () -> ()
  }) : () -> ()
  func.return
}

// CHECK-LABEL: builtin.module attributes {gpu.container_module, gradfuse.peak_bytes = 0 : i64}
// CHECK:       "gpu.func"() <{function_type = (memref<2xf32>, memref<3xf32>) -> (), kernel}> ({
// CHECK:         %[[ID:.*]] = arith.addi
// CHECK:         %[[FIRST:.*]] = arith.cmpi ult, %[[ID]], %{{.*}} : index
// CHECK-NEXT:    scf.if %[[FIRST]] {
// CHECK:           math.exp2
// CHECK:         } else {
// CHECK-NEXT:      %[[SECOND:.*]] = arith.cmpi ult, %[[ID]], %{{.*}} : index
// CHECK-NEXT:      scf.if %[[SECOND]] {
// CHECK-NEXT:        %[[LID:.*]] = arith.subi %[[ID]], %{{.*}} : index
// CHECK-NEXT:        %[[M1:.*]] = arith.addi %[[LID]], %{{.*}} : index
// CHECK-NEXT:        %[[REM:.*]] = arith.remsi %[[M1]], %{{.*}} : index
// CHECK-NEXT:        %[[NEG:.*]] = arith.cmpi slt, %[[REM]], %{{.*}} : index
// CHECK-NEXT:        %[[UP:.*]] = arith.addi %[[REM]], %{{.*}} : index
// CHECK-NEXT:        %[[IDX:.*]] = arith.select %[[NEG]], %[[UP]], %[[REM]] : index
// CHECK-NEXT:        memref.load %{{.*}}[%[[IDX]]] : memref<3xf32>
// CHECK:       }) {sym_name = "update", gpu.kernel, workgroup_attributions = 0 : i64, gradfuse.kind = "group", gradfuse.threads = 5 : i64}
// CHECK:       func.func @main()
// CHECK:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      %{{.*}} = arith.constant 1 : index
// CHECK-NEXT:      %{{.*}} = arith.constant 32 : index
// CHECK-NEXT:      "gpu.launch_func"({{.*}}) <{kernel = @gradfuse_kernels::@update
// CHECK-NEXT:    }
