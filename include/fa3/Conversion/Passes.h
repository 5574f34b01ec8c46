//===- Passes.h - fa3 conversion passes --------------------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_CONVERSION_PASSES_H
#define FA3_CONVERSION_PASSES_H

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"
#include "fa3/Conversion/FA3ToLinalg/FA3ToLinalg.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

namespace mlir::fa3 {

#define GEN_PASS_DECL
#include "fa3/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "fa3/Conversion/Passes.h.inc"

} // namespace mlir::fa3

#endif // FA3_CONVERSION_PASSES_H
