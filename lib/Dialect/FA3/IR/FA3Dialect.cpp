//===- FA3Dialect.cpp - fa3 dialect registration ----------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/IR/FA3Dialect.h"
#include "fa3/Dialect/FA3/IR/FA3Attrs.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::fa3;

#include "fa3/Dialect/FA3/IR/FA3Dialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "fa3/Dialect/FA3/IR/FA3Attrs.cpp.inc"

void FA3Dialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "fa3/Dialect/FA3/IR/FA3.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "fa3/Dialect/FA3/IR/FA3Attrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// ScheduleAttr
//===----------------------------------------------------------------------===//

LogicalResult ScheduleAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   int64_t blockM, int64_t blockN,
                                   int64_t stages, int64_t consumerWgs,
                                   int64_t producerRegs, int64_t consumerRegs,
                                   bool pingpong, bool intraWgOverlap,
                                   bool persistent, int64_t cluster,
                                   int64_t rescaleThreshold, int64_t polyExp2) {
  if (blockM <= 0 || blockN <= 0)
    return emitError() << "block_m and block_n must be positive, got "
                       << blockM << " and " << blockN;
  if (blockM % 8 != 0 || blockN % 8 != 0)
    return emitError() << "block_m and block_n must be multiples of 8, got "
                       << blockM << " and " << blockN;
  if (stages < 1)
    return emitError() << "stages must be at least 1, got " << stages;
  if (consumerWgs < 1)
    return emitError() << "consumer_wgs must be at least 1, got "
                       << consumerWgs;
  // setmaxnreg takes multiples of 8 in [24, 256]; 0 means "not set".
  auto badRegs = [](int64_t r) {
    return r != 0 && (r < 24 || r > 256 || r % 8 != 0);
  };
  if (badRegs(producerRegs) || badRegs(consumerRegs))
    return emitError() << "producer_regs and consumer_regs must be 0 or a "
                          "multiple of 8 in [24, 256], got "
                       << producerRegs << " and " << consumerRegs;
  if (pingpong && consumerWgs < 2)
    return emitError() << "pingpong needs at least 2 consumer warpgroups, got "
                       << consumerWgs;
  if (cluster != 1 && cluster != 2)
    return emitError() << "cluster must be 1 or 2, got " << cluster;
  // P grows up to 2^τ under a kept max: FP8's e4m3 P (at most 448) has
  // 2^8 of room above 1.
  if (rescaleThreshold < 0 || rescaleThreshold > 8)
    return emitError() << "rescale_threshold must be in [0, 8] (log2 of how "
                          "far a kept row max may lag), got "
                       << rescaleThreshold;
  if (polyExp2 < 0 || polyExp2 > 16)
    return emitError() << "poly_exp2 must be in [0, 16] (every N-th "
                          "exponential on the FMA pipe, 0 = none), got "
                       << polyExp2;
  return success();
}

//===----------------------------------------------------------------------===//
// PersistentBlockMappingAttr
//===----------------------------------------------------------------------===//

LogicalResult PersistentBlockMappingAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, gpu::MappingId block) {
  if (block > gpu::MappingId::DimZ)
    return emitError() << "#fa3.persistent_block maps a grid dimension x, y "
                          "or z, got "
                       << gpu::stringifyMappingId(block);
  return success();
}

// The dimension's id, as #gpu.block's (the forall verifier requires them
// distinct within one mapping).
int64_t PersistentBlockMappingAttr::getMappingId() const {
  return static_cast<int64_t>(getBlock());
}

bool PersistentBlockMappingAttr::isLinearMapping() const { return false; }

int64_t PersistentBlockMappingAttr::getRelativeIndex() const {
  return getMappingId();
}
