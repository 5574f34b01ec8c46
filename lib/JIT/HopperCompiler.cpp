//===- HopperCompiler.cpp - Compile fa3 attention for sm_90a
//-----------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/JIT/HopperCompiler.h"

#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/Pipelines/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"

using namespace fa3;

static llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument,
                                 message.str().c_str());
}

/// The function must be `return fa3.attention(arg0, arg1, arg2)`,
/// `return fa3.attention_grad(arg0, ..., arg5)` or one of the other ops
/// below: one op on the arguments in order, returning all its results.
static llvm::Expected<mlir::Operation *>
findLaunchableAttention(mlir::func::FuncOp func) {
  mlir::Operation *attention = nullptr;
  unsigned count = 0;
  func.walk([&](mlir::Operation *op) {
    if (llvm::isa<mlir::fa3::AttentionOp, mlir::fa3::AttentionKVCacheOp,
                  mlir::fa3::AttentionVarlenOp, mlir::fa3::AttentionGradOp,
                  mlir::fa3::AttentionVarlenGradOp, mlir::fa3::HadamardOp,
                  mlir::fa3::QuantizeOp>(op)) {
      attention = op;
      ++count;
    }
  });
  auto shapeError = [&] {
    return error("'" + func.getSymName() +
                 "' cannot be compiled as one kernel: it must be one "
                 "fa3.attention on its 3 arguments (4 with dropout's rng) "
                 "returning (O, LSE), one "
                 "fa3.attention_kvcache on its 4 arguments (5 with a page "
                 "table) returning (O, LSE), one fa3.attention_varlen on "
                 "its 5 arguments (6 with seqused_k) returning (O, LSE), "
                 "one fa3.attention_grad on its "
                 "6 arguments (7 with dropout's rng) returning (dQ, dK, dV), "
                 "one "
                 "fa3.attention_varlen_grad on its 8 arguments (9 with "
                 "seqused_k) returning (dQ, dK, dV), or one fa3.hadamard or "
                 "fa3.quantize on its argument");
  };
  if (count != 1 || func.getNumArguments() != attention->getNumOperands())
    return shapeError();
  // fa3-cast-fp8 replaces such an op with a chain of kernels (quantize Q, K
  // and V, then the FP8 attention): not one kernel.
  if (auto forward = llvm::dyn_cast<mlir::fa3::AttentionOp>(attention))
    if (forward.getFp8Attr())
      return error("'" + func.getSymName() +
                   "' cannot be compiled as one kernel: its fa3.attention "
                   "has an 'fp8' attribute, which fa3-cast-fp8 turns into a "
                   "chain of kernels (fa3.quantize of Q, K and V, then the "
                   "FP8 attention); run the chain with fa3-run --device=cuda "
                   "or fa3.attention(fp8=True), or compile the FP8 "
                   "fa3.attention itself");
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (attention->getOperand(i) != func.getArgument(i))
      return shapeError();
  auto ret = llvm::dyn_cast<mlir::func::ReturnOp>(
      func.getBody().front().getTerminator());
  if (!ret || !llvm::equal(ret.getOperands(), attention->getResults()))
    return shapeError();
  return attention;
}

static std::string print(mlir::Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}

llvm::Expected<HopperKernel>
fa3::compileHopperAttention(mlir::ModuleOp module, llvm::StringRef function,
                            const HopperCompileOptions &options) {
  mlir::OwningOpRef<mlir::ModuleOp> clone(module.clone());
  auto func = clone->lookupSymbol<mlir::func::FuncOp>(function);
  if (!func || func.isExternal())
    return error("no function '" + function + "' with a body in the module");
  auto attention = findLaunchableAttention(func);
  if (!attention)
    return attention.takeError();
  // Only this function's kernel: drop every other function and kernel.
  for (mlir::Operation &op :
       llvm::make_early_inc_range(clone->getBody()->getOperations()))
    if (&op != func.getOperation() &&
        llvm::isa<mlir::func::FuncOp, mlir::gpu::GPUModuleOp,
                  mlir::gpu::BinaryOp>(op))
      op.erase();

  mlir::MLIRContext *context = clone->getContext();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(context, [&](mlir::Diagnostic &diag) {
    llvm::raw_string_ostream os(diagnostics);
    os << diag.getLocation() << ": " << diag << "\n";
    return mlir::success();
  });

  HopperKernel kernel;
  mlir::PassManager pm(context);
  mlir::fa3::HopperPipelineOptions pipeline;
  pipeline.blockM = options.blockM;
  pipeline.blockN = options.blockN;
  pipeline.format = "isa";
  if (options.keepStages) {
    kernel.stages.emplace_back("0-input", print(*clone));
    // The kernel in the LLVM/NVVM dialect, before serialization.
    mlir::OwningOpRef<mlir::ModuleOp> kernelIR(clone->clone());
    mlir::PassManager kernelPm(context);
    mlir::fa3::buildFA3HopperKernelPipeline(kernelPm, pipeline);
    if (mlir::succeeded(kernelPm.run(*kernelIR)))
      kernel.stages.emplace_back("1-nvvm", print(*kernelIR));
  }
  mlir::fa3::buildFA3HopperPipeline(pm, pipeline);
  if (mlir::failed(pm.run(*clone)))
    return error("fa3-hopper-pipeline failed on '" + function + "':\n" +
                 diagnostics);

  // The launch metadata left on the op by convert-fa3-to-hopper.
  auto launch = (*attention)->getAttrOfType<mlir::DictionaryAttr>("fa3.launch");
  auto symbol = (*attention)->getAttrOfType<mlir::SymbolRefAttr>("fa3.kernel");
  if (!launch || !symbol)
    return error("internal error: " + (*attention)->getName().getStringRef() +
                 " was not given a kernel");
  auto getInt = [&](llvm::StringRef key) -> int64_t {
    auto attr = launch.getAs<mlir::IntegerAttr>(key);
    return attr ? attr.getInt() : 0;
  };
  kernel.info.name = symbol.getLeafReference().str();
  kernel.info.threads = getInt("threads");
  kernel.info.blockM = getInt("block_m");
  auto elementTypeOf = [](mlir::Type type) {
    mlir::Type elt = llvm::cast<mlir::ShapedType>(type).getElementType();
    if (elt.isBF16())
      return runtime::ElementType::BF16;
    if (elt.isF16())
      return runtime::ElementType::F16;
    if (llvm::isa<mlir::Float8E4M3FNType>(elt))
      return runtime::ElementType::F8E4M3;
    return runtime::ElementType::F32;
  };
  if (llvm::isa<mlir::fa3::HadamardOp, mlir::fa3::QuantizeOp>(*attention)) {
    bool hadamard = llvm::isa<mlir::fa3::HadamardOp>(*attention);
    auto in = llvm::cast<mlir::RankedTensorType>(
        (*attention)->getOperand(0).getType());
    kernel.info.kind = hadamard ? runtime::AttentionKernelInfo::Kind::Hadamard
                                : runtime::AttentionKernelInfo::Kind::Quantize;
    kernel.info.inputType = elementTypeOf(in);
    kernel.info.outputType =
        elementTypeOf((*attention)->getResult(0).getType());
    kernel.info.headDim = in.getShape().back();
    if (!hadamard) {
      kernel.info.hadamard =
          llvm::cast<mlir::fa3::QuantizeOp>(*attention).getHadamardSeed()
              .has_value();
      kernel.info.numQHeads = in.getDimSize(2);
      kernel.info.numKVHeads = llvm::cast<mlir::RankedTensorType>(
                                   (*attention)->getResult(1).getType())
                                   .getDimSize(1);
    }
  } else {
    bool backward =
        llvm::isa<mlir::fa3::AttentionGradOp, mlir::fa3::AttentionVarlenGradOp>(
            *attention);
    // Q and K are operands 0 and 1 of the forward, 1 and 2 of the backward.
    auto q = llvm::cast<mlir::RankedTensorType>(
        (*attention)->getOperand(backward ? 1 : 0).getType());
    auto k = llvm::cast<mlir::RankedTensorType>(
        (*attention)->getOperand(backward ? 2 : 1).getType());
    kernel.info.backward = backward;
    kernel.info.fp8 = llvm::isa<mlir::Float8E4M3FNType>(q.getElementType());
    kernel.info.bf16 = q.getElementType().isBF16() || kernel.info.fp8;
    // [B, S, H, D], or packed [T, H, D] for fa3.attention_varlen.
    int64_t rank = q.getRank();
    kernel.info.headDim = q.getDimSize(rank - 1);
    kernel.info.numQHeads = q.getDimSize(rank - 2);
    kernel.info.numKVHeads = k.getDimSize(rank - 2);
    kernel.info.blockN = getInt("block_n");
    kernel.info.sharedMemory = getInt("shared_memory");
    kernel.info.persistent = getInt("persistent") != 0;
    kernel.info.packedHeads = std::max<int64_t>(1, getInt("packed_heads"));
    kernel.info.kvCache = getInt("kvcache") != 0;
    kernel.info.paged = getInt("paged") != 0;
    if (kernel.info.paged && !kernel.info.kvCache)
      return error("internal error: " + kernel.info.name +
                   " is marked paged but not kvcache in its fa3.launch");
    // Split-KV: the kernel writes partial attentions that its `_combine`
    // companion merges (AttentionLauncher.h). Absent: one split.
    if (launch.get("num_splits")) {
      kernel.info.numSplits = getInt("num_splits");
      if (kernel.info.numSplits < 1 ||
          (kernel.info.numSplits > 1 &&
           (!kernel.info.kvCache || kernel.info.persistent)))
        return error("internal error: " + kernel.info.name +
                     " has num_splits = " + llvm::Twine(kernel.info.numSplits) +
                     " in its fa3.launch; split-KV needs N >= 1 on a "
                     "non-persistent fa3.attention_kvcache kernel");
    }
    // A packed batch: the launch passes the sequence offsets
    // (launchAttentionVarlen, launchAttentionVarlenBackward), and seqused_k
    // when the op has it.
    kernel.info.varlen = getInt("varlen") != 0;
    kernel.info.sequsedK = getInt("seqused") != 0;
    bool varlenOp = llvm::isa<mlir::fa3::AttentionVarlenOp,
                              mlir::fa3::AttentionVarlenGradOp>(*attention);
    if (kernel.info.varlen != varlenOp)
      return error("internal error: " + kernel.info.name + " of " +
                   (*attention)->getName().getStringRef() + " is " +
                   (kernel.info.varlen ? "" : "not ") +
                   "marked varlen in its fa3.launch");
    if (kernel.info.varlen && (kernel.info.kvCache || kernel.info.persistent ||
                               kernel.info.numSplits != 1))
      return error("internal error: " + kernel.info.name +
                   " is marked varlen in its fa3.launch with a persistent "
                   "grid, split-KV or a KV cache, which no varlen launch "
                   "(forward or backward) has");
    if (kernel.info.sequsedK && !kernel.info.varlen)
      return error("internal error: " + kernel.info.name +
                   " is marked seqused but not varlen in its fa3.launch");
    kernel.info.deterministic = getInt("deterministic") != 0;
    // Dropout: the launch passes the Philox (seed, offset) pointer last.
    kernel.info.dropout = getInt("dropout") != 0;
    if (kernel.info.dropout &&
        (kernel.info.varlen || kernel.info.kvCache || kernel.info.fp8))
      return error("internal error: " + kernel.info.name +
                   " is marked dropout in its fa3.launch with varlen, a KV "
                   "cache or FP8, which have no dropout");
  }

  auto binary =
      clone->lookupSymbol<mlir::gpu::BinaryOp>(symbol.getRootReference());
  if (!binary || binary.getObjects().empty())
    return error("internal error: no gpu.binary for the kernels");
  auto object = llvm::cast<mlir::gpu::ObjectAttr>(binary.getObjects()[0]);
  kernel.ptx = object.getObject().getValue().str();
  // The PTX the driver's JIT compiles must be NUL-terminated.
  if (kernel.ptx.empty() || kernel.ptx.back() != '\0')
    kernel.ptx.push_back('\0');
  return kernel;
}
