//===- OutlineAttention.cpp - One function per fa3.attention --------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3OUTLINEATTENTION
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

namespace {
struct FA3OutlineAttention
    : public fa3::impl::FA3OutlineAttentionBase<FA3OutlineAttention> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    // Collected first: outlining inserts functions into the module.
    SmallVector<std::pair<func::FuncOp, SmallVector<AttentionOp>>> work;
    for (auto func : module.getOps<func::FuncOp>()) {
      SmallVector<AttentionOp> ops;
      func.walk([&](AttentionOp op) { ops.push_back(op); });
      if (!ops.empty())
        work.emplace_back(func, std::move(ops));
    }
    for (auto &[func, ops] : work) {
      // The outlined functions follow their caller, in the ops' order.
      Operation *insertAfter = func;
      for (auto [index, op] : llvm::enumerate(ops)) {
        Location loc = op.getLoc();
        auto type = FunctionType::get(&getContext(), op->getOperandTypes(),
                                      op->getResultTypes());
        OpBuilder b(module.getBodyRegion());
        b.setInsertionPointAfter(insertAfter);
        auto callee = func::FuncOp::create(
            b, loc,
            (func.getSymName() + "_attention_" + llvm::Twine(index)).str(),
            type);
        symbols.insert(callee); // renames on a clash
        insertAfter = callee;
        Block *body = callee.addEntryBlock();
        b.setInsertionPointToStart(body);
        IRMapping mapping;
        mapping.map(op->getOperands(), body->getArguments());
        Operation *clone = b.clone(*op, mapping);
        func::ReturnOp::create(b, loc, clone->getResults());

        b.setInsertionPoint(op);
        auto call = func::CallOp::create(b, loc, callee, op->getOperands());
        op->replaceAllUsesWith(call.getResults());
        op->erase();
      }
    }
  }
};
} // namespace
