//===- fa3-opt.cpp - The fa3 optimizer driver --------------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// mlir-opt with the fa3 dialect, its passes, its named pipelines and the
// upstream dialects and passes those pipelines use.
//
//===----------------------------------------------------------------------===//

#include "fa3/InitAllDialects.h"
#include "fa3/InitAllPasses.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::fa3::registerAllPasses();
  mlir::DialectRegistry registry;
  mlir::fa3::registerAllDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "fa3 optimizer driver\n", registry));
}
