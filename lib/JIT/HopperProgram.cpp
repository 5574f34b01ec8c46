//===- HopperProgram.cpp - Run fa3 functions on a Hopper GPU -----------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/JIT/HopperProgram.h"

#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/JIT/HopperKernelCache.h"
#include "fa3/Dialect/FA3/Transforms/Passes.h"
#include "fa3/Runtime/AttentionLauncher.h"
#include "fa3/Runtime/FP8PrepLauncher.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <tuple>

using namespace fa3;
using namespace fa3::runtime;

static llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument,
                                 message.str().c_str());
}

static llvm::Expected<ElementType> elementTypeOf(mlir::Type type,
                                                 const llvm::Twine &what) {
  auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(type);
  if (tensor) {
    mlir::Type elt = tensor.getElementType();
    if (elt.isBF16())
      return ElementType::BF16;
    if (elt.isF16())
      return ElementType::F16;
    if (elt.isF32())
      return ElementType::F32;
    if (llvm::isa<mlir::Float8E4M3FNType>(elt))
      return ElementType::F8E4M3;
    if (elt.isInteger(32))
      return ElementType::I32;
    if (elt.isInteger(64))
      return ElementType::I64;
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  type.print(os);
  return error(what + " has type " + s +
               "; CUDA runs take tensors of bf16, f16, f32, f8E4M3FN, i32 "
               "(cache lengths, page tables) or i64 (dropout's seed and "
               "offset)");
}

/// A module holding `@fa3_step`: `op` alone on block arguments, returning
/// its results. It is what the kernel cache keys on.
static mlir::OwningOpRef<mlir::ModuleOp> isolate(mlir::Operation *op) {
  mlir::OpBuilder b(op->getContext());
  mlir::Location loc = op->getLoc();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  auto type = b.getFunctionType(op->getOperandTypes(), op->getResultTypes());
  auto func = mlir::func::FuncOp::create(b, loc, "fa3_step", type);
  mlir::Block *entry = func.addEntryBlock();
  b.setInsertionPointToEnd(entry);
  mlir::IRMapping mapping;
  mapping.map(op->getOperands(), entry->getArguments());
  mlir::Operation *clone = b.clone(*op, mapping);
  mlir::func::ReturnOp::create(b, loc, clone->getResults());
  return module;
}

llvm::Expected<HopperProgram>
HopperProgram::compile(mlir::ModuleOp module, llvm::StringRef function,
                       const HopperCompileOptions &options) {
  if (!module.lookupSymbol<mlir::func::FuncOp>(function))
    return error("no function '" + function + "' with a body in the module");
  // Attentions marked #fa3.fp8 become their quantize + FP8 steps first.
  mlir::OwningOpRef<mlir::ModuleOp> cast(module.clone());
  {
    std::string diagnostics;
    mlir::ScopedDiagnosticHandler handler(
        module.getContext(), [&](mlir::Diagnostic &diag) {
          llvm::raw_string_ostream os(diagnostics);
          os << diag.getLocation() << ": " << diag << "\n";
          return mlir::success();
        });
    mlir::PassManager pm(module.getContext());
    pm.addPass(mlir::fa3::createFA3CastFP8());
    if (mlir::failed(pm.run(*cast)))
      return error("fa3-cast-fp8 failed on '" + function + "':\n" +
                   diagnostics);
  }
  auto func = cast->lookupSymbol<mlir::func::FuncOp>(function);
  if (!func || func.isExternal())
    return error("no function '" + function + "' with a body in the module");
  if (!func.getBody().hasOneBlock())
    return error("'" + function + "' must be a single block to run on CUDA");

  HopperProgram program;
  llvm::DenseMap<mlir::Value, unsigned> numbers;
  for (auto [i, arg] : llvm::enumerate(func.getArguments())) {
    auto type = elementTypeOf(arg.getType(), "argument #" + llvm::Twine(i));
    if (!type)
      return type.takeError();
    program.argumentTypes.push_back(*type);
    numbers[arg] = i;
  }
  unsigned next = func.getNumArguments();
  for (mlir::Operation &op : func.getBody().front()) {
    if (auto ret = llvm::dyn_cast<mlir::func::ReturnOp>(op)) {
      for (mlir::Value v : ret.getOperands())
        program.returns.push_back(numbers.lookup(v));
      continue;
    }
    if (!llvm::isa<mlir::fa3::AttentionOp, mlir::fa3::AttentionKVCacheOp,
                   mlir::fa3::AttentionVarlenOp, mlir::fa3::AttentionGradOp,
                   mlir::fa3::AttentionVarlenGradOp, mlir::fa3::HadamardOp,
                   mlir::fa3::QuantizeOp>(op)) {
      std::string s;
      llvm::raw_string_ostream os(s);
      op.getLoc().print(os);
      return error("'" + function + "' cannot run on CUDA: '" +
                   op.getName().getStringRef() + "' at " + s +
                   " is not fa3.attention, fa3.attention_kvcache, "
                   "fa3.attention_varlen, fa3.attention_grad, "
                   "fa3.attention_varlen_grad, fa3.hadamard or fa3.quantize "
                   "(the CUDA runtime runs sequences of those; the CPU runs "
                   "anything)");
    }
    Step step;
    for (mlir::Value v : op.getOperands())
      step.operands.push_back(numbers.lookup(v));
    for (mlir::Value v : op.getResults()) {
      numbers[v] = next;
      step.results.push_back(next++);
    }
    mlir::OwningOpRef<mlir::ModuleOp> isolated = isolate(&op);
    auto kernel = getOrCompileHopperAttention(*isolated, "fa3_step", options,
                                              step.cacheHit);
    if (!kernel)
      return kernel.takeError();
    step.kernel = std::move(*kernel);
    program.steps.push_back(std::move(step));
  }
  return program;
}

namespace {
/// A tensor on the device.
struct DeviceValue {
  DeviceBuffer buffer;
  ElementType type = ElementType::F32;
  std::vector<int64_t> shape;

  int64_t bytes() const {
    int64_t n = elementSize(type);
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};
} // namespace

static llvm::Expected<DeviceValue> allocate(const CudaDevice &device,
                                            ElementType type,
                                            std::vector<int64_t> shape) {
  DeviceValue value{DeviceBuffer(), type, std::move(shape)};
  auto buffer =
      DeviceBuffer::allocate(device, std::max<int64_t>(value.bytes(), 16));
  if (!buffer)
    return buffer.takeError();
  value.buffer = std::move(*buffer);
  // Poison: all-ones bytes are NaN in bf16, f16 and f32.
  if (llvm::Error err = value.buffer.memset(0xFF))
    return std::move(err);
  return value;
}

/// The i32 vector operand `i` of `step`, named `name`, of `length` entries
/// when given, from the host copy of the function argument it must be.
static llvm::Expected<std::vector<int32_t>>
hostIndexVector(const AttentionKernelInfo &info,
                const HopperProgram::Step &step, unsigned i, const char *name,
                std::optional<int64_t> length,
                const std::vector<HostTensor> &inputs) {
  unsigned id = step.operands[i];
  // The offsets are checked and the grid sized on the host: they must come
  // from the inputs, not from an earlier step.
  if (id >= inputs.size())
    return error(llvm::Twine(name) + " of " + info.name +
                 " must be an argument of the function (fa3-run checks the "
                 "sequence offsets on the host)");
  const HostTensor &t = inputs[id];
  if (t.elementType != ElementType::I32 || t.shape.size() != 1 ||
      (length && t.shape[0] != *length))
    return error(llvm::Twine(name) + " of " + info.name + " must be [" +
                 (length ? llvm::Twine(*length) : llvm::Twine("B + 1")) +
                 "] i32, got " + t.describe());
  std::vector<int32_t> values(size_t(t.shape[0]));
  if (!values.empty())
    std::memcpy(values.data(), t.data.data(), values.size() * 4);
  return values;
}

/// Sequence offsets `cu` of `rows` packed rows: from 0, non-decreasing,
/// ending within them (as the Python API checks them).
static llvm::Error checkOffsets(const AttentionKernelInfo &info,
                                const char *name,
                                const std::vector<int32_t> &cu, int64_t rows) {
  if (cu.empty() || cu[0] != 0)
    return error(llvm::Twine(name) + " of " + info.name +
                 " must start at 0 (batch + 1 >= 1 entries)");
  for (size_t b = 1; b < cu.size(); ++b)
    if (cu[b] < cu[b - 1])
      return error(llvm::Twine(name) + " of " + info.name +
                   " must be non-decreasing, but entry " + llvm::Twine(b) +
                   " = " + llvm::Twine(cu[b]) + " < " + llvm::Twine(cu[b - 1]));
  if (cu.back() > rows)
    return error(llvm::Twine(name) + "[-1] = " + llvm::Twine(cu.back()) +
                 " of " + info.name + " exceeds the " + llvm::Twine(rows) +
                 " packed rows");
  return llvm::Error::success();
}

namespace {
/// The sequences of a varlen step, from its offsets checked on the host.
struct VarlenSequences {
  int64_t batch = 0, maxSeqlenQ = 0, maxSeqlenK = 0;
  DevicePtr cuSeqlensQ = 0, cuSeqlensK = 0, sequsedK = 0;
};
} // namespace

/// The offsets of a varlen step (its operands `first` and `first + 1`, and
/// seqused_k at `first + 2` when the kernel takes it) from the host copies
/// of the function arguments they must be, checked against the `totalQ`
/// and `totalK` packed rows as the Python API checks them. The longest
/// sequences count every key of cu_seqlens_k, used or not.
static llvm::Expected<VarlenSequences>
readVarlenSequences(const AttentionKernelInfo &info,
                    const HopperProgram::Step &step, unsigned first,
                    int64_t totalQ, int64_t totalK,
                    const std::vector<HostTensor> &inputs,
                    const std::vector<std::optional<DeviceValue>> &values) {
  auto cuQ =
      hostIndexVector(info, step, first, "cu_seqlens_q", std::nullopt, inputs);
  if (!cuQ)
    return cuQ.takeError();
  auto cuK = hostIndexVector(info, step, first + 1, "cu_seqlens_k",
                             int64_t(cuQ->size()), inputs);
  if (!cuK)
    return cuK.takeError();
  if (llvm::Error err = checkOffsets(info, "cu_seqlens_q", *cuQ, totalQ))
    return std::move(err);
  if (llvm::Error err = checkOffsets(info, "cu_seqlens_k", *cuK, totalK))
    return std::move(err);
  VarlenSequences sequences;
  sequences.batch = int64_t(cuQ->size()) - 1;
  for (int64_t b = 0; b < sequences.batch; ++b) {
    sequences.maxSeqlenQ =
        std::max<int64_t>(sequences.maxSeqlenQ, (*cuQ)[b + 1] - (*cuQ)[b]);
    sequences.maxSeqlenK =
        std::max<int64_t>(sequences.maxSeqlenK, (*cuK)[b + 1] - (*cuK)[b]);
  }
  if (info.sequsedK) {
    auto used = hostIndexVector(info, step, first + 2, "seqused_k",
                                sequences.batch, inputs);
    if (!used)
      return used.takeError();
    for (int64_t b = 0; b < sequences.batch; ++b)
      if ((*used)[b] < 0 || (*used)[b] > (*cuK)[b + 1] - (*cuK)[b])
        return error("seqused_k[" + llvm::Twine(b) +
                     "] = " + llvm::Twine((*used)[b]) + " of " + info.name +
                     " must lie in [0, " +
                     llvm::Twine((*cuK)[b + 1] - (*cuK)[b]) + "] (sequence " +
                     llvm::Twine(b) + "'s keys)");
    sequences.sequsedK = values[step.operands[first + 2]]->buffer.ptr();
  }
  sequences.cuSeqlensQ = values[step.operands[first]]->buffer.ptr();
  sequences.cuSeqlensK = values[step.operands[first + 1]]->buffer.ptr();
  return sequences;
}

/// The packed operands of a varlen step, each (index, name, heads), are
/// [T, heads, D] of the kernel's 16-bit type.
static llvm::Error checkPacked(
    const AttentionKernelInfo &info, const HopperProgram::Step &step,
    const std::vector<std::optional<DeviceValue>> &values,
    llvm::ArrayRef<std::tuple<unsigned, const char *, int64_t>> operands) {
  ElementType elt = info.bf16 ? ElementType::BF16 : ElementType::F16;
  for (auto [i, name, heads] : operands) {
    const DeviceValue &v = *values[step.operands[i]];
    if (v.type != elt || v.shape.size() != 3 || v.shape[1] != heads ||
        v.shape[2] != info.headDim)
      return error(llvm::Twine(name) + " of " + info.name + " must be [T, " +
                   llvm::Twine(heads) + ", " + llvm::Twine(info.headDim) +
                   "] " + elementTypeName(elt));
  }
  return llvm::Error::success();
}

/// An fa3.attention_varlen step: checks its packed operands and, on the
/// host, its offsets (which give the grid's max_seqlen_q), allocates O and
/// LSE as its results, and returns its launch's arguments.
static llvm::Expected<AttentionDeviceArgs>
planVarlen(const AttentionKernelInfo &info, const HopperProgram::Step &step,
           const std::vector<HostTensor> &inputs,
           std::vector<std::optional<DeviceValue>> &values,
           const CudaDevice &device) {
  auto operand = [&](unsigned i) -> const DeviceValue & {
    return *values[step.operands[i]];
  };
  if (llvm::Error err = checkPacked(info, step, values,
                                    {{0, "q", info.numQHeads},
                                     {1, "k", info.numKVHeads},
                                     {2, "v", info.numKVHeads}}))
    return std::move(err);
  std::vector<int64_t> q = operand(0).shape;
  int64_t totalQ = q[0], totalK = operand(1).shape[0];
  if (operand(2).shape[0] != totalK)
    return error("k and v of " + info.name + " must have one token count");
  auto sequences =
      readVarlenSequences(info, step, 3, totalQ, totalK, inputs, values);
  if (!sequences)
    return sequences.takeError();
  ElementType elt = info.bf16 ? ElementType::BF16 : ElementType::F16;
  auto out = allocate(device, elt, q);
  if (!out)
    return out.takeError();
  auto lse = allocate(device, ElementType::F32, {info.numQHeads, totalQ});
  if (!lse)
    return lse.takeError();
  auto args = AttentionDeviceArgs::forward(
      operand(0).buffer.ptr(), operand(1).buffer.ptr(), operand(2).buffer.ptr(),
      out->buffer.ptr(), lse->buffer.ptr(), sequences->batch, totalQ, totalK);
  args.cuSeqlensQ = sequences->cuSeqlensQ;
  args.cuSeqlensK = sequences->cuSeqlensK;
  args.sequsedK = sequences->sequsedK;
  args.maxSeqlenQ = sequences->maxSeqlenQ;
  values.resize(std::max<size_t>(values.size(), step.results[1] + 1));
  values[step.results[0]] = std::move(*out);
  values[step.results[1]] = std::move(*lse);
  return args;
}

/// An fa3.attention_varlen_grad step: checks its packed operands and, on
/// the host, its offsets (which give the grids' longest sequences),
/// allocates dQ, dK and dV as its results (poisoned: the kernels write
/// every row), and returns its launch's arguments but the workspace.
static llvm::Expected<AttentionGradDeviceArgs>
planVarlenGrad(const AttentionKernelInfo &info, const HopperProgram::Step &step,
               const std::vector<HostTensor> &inputs,
               std::vector<std::optional<DeviceValue>> &values,
               const CudaDevice &device) {
  auto operand = [&](unsigned i) -> const DeviceValue & {
    return *values[step.operands[i]];
  };
  if (llvm::Error err = checkPacked(info, step, values,
                                    {{0, "grad_output", info.numQHeads},
                                     {1, "q", info.numQHeads},
                                     {2, "k", info.numKVHeads},
                                     {3, "v", info.numKVHeads},
                                     {4, "out", info.numQHeads}}))
    return std::move(err);
  int64_t totalQ = operand(1).shape[0], totalK = operand(2).shape[0];
  if (operand(3).shape[0] != totalK)
    return error("k and v of " + info.name + " must have one token count");
  if (operand(0).shape[0] != totalQ || operand(4).shape[0] != totalQ)
    return error("grad_output and out of " + info.name +
                 " must have q's token count");
  std::vector<int64_t> lseShape = {info.numQHeads, totalQ};
  if (operand(5).type != ElementType::F32 || operand(5).shape != lseShape)
    return error("lse of " + info.name + " must be [Hq, Tq] f32");
  // After the offsets and seqused_k: the optional grad_lse.
  unsigned gradLseIndex = info.sequsedK ? 9 : 8;
  if (step.operands.size() > gradLseIndex &&
      (operand(gradLseIndex).type != ElementType::F32 ||
       operand(gradLseIndex).shape != lseShape))
    return error("grad_lse of " + info.name + " must be [Hq, Tq] f32");
  auto sequences =
      readVarlenSequences(info, step, 6, totalQ, totalK, inputs, values);
  if (!sequences)
    return sequences.takeError();
  std::vector<std::optional<DeviceValue>> grads;
  for (unsigned i = 1; i <= 3; ++i) {
    auto g = allocate(device, operand(i).type, operand(i).shape);
    if (!g)
      return g.takeError();
    grads.push_back(std::move(*g));
  }
  AttentionGradDeviceArgs args;
  args.gradOut = operand(0).buffer.ptr();
  args.q = operand(1).buffer.ptr();
  args.k = operand(2).buffer.ptr();
  args.v = operand(3).buffer.ptr();
  args.out = operand(4).buffer.ptr();
  args.lse = operand(5).buffer.ptr();
  if (step.operands.size() > gradLseIndex)
    args.gradLse = operand(gradLseIndex).buffer.ptr();
  args.gradQ = grads[0]->buffer.ptr();
  args.gradK = grads[1]->buffer.ptr();
  args.gradV = grads[2]->buffer.ptr();
  args.batch = sequences->batch;
  args.seqQ = totalQ;
  args.seqK = totalK;
  args.cuSeqlensQ = sequences->cuSeqlensQ;
  args.cuSeqlensK = sequences->cuSeqlensK;
  args.sequsedK = sequences->sequsedK;
  args.maxSeqlenQ = sequences->maxSeqlenQ;
  args.maxSeqlenK = sequences->maxSeqlenK;
  values.resize(std::max<size_t>(values.size(), step.results[2] + 1));
  for (unsigned i = 0; i < 3; ++i)
    values[step.results[i]] = std::move(*grads[i]);
  return args;
}

llvm::Expected<std::vector<HostTensor>>
HopperProgram::run(const CudaDevice &device,
                   const std::vector<HostTensor> &inputs,
                   unsigned benchmarkRuns, float *medianMs) const {
  if (inputs.size() != argumentTypes.size())
    return error("expected " + llvm::Twine(argumentTypes.size()) +
                 " inputs, got " + llvm::Twine(inputs.size()));
  std::vector<std::optional<DeviceValue>> values;
  for (auto [i, t] : llvm::enumerate(inputs)) {
    if (t.elementType != argumentTypes[i])
      return error("input #" + llvm::Twine(i) + " must be " +
                   elementTypeName(argumentTypes[i]) + ", got " + t.describe());
    auto buffer =
        DeviceBuffer::allocate(device, std::max<size_t>(t.data.size(), 16));
    if (!buffer)
      return buffer.takeError();
    if (!t.data.empty())
      if (llvm::Error err = buffer->copyFromHost(t.data.data(), t.data.size()))
        return std::move(err);
    values.push_back(DeviceValue{std::move(*buffer), t.elementType, t.shape});
  }

  // Load every step's kernels and allocate its results and workspace.
  std::vector<CudaModule> modules;
  std::vector<std::function<llvm::Error()>> launches;
  std::vector<DeviceBuffer> workspaces;
  workspaces.reserve(steps.size());
  // A step's workspace of `bytes` (at least 256, so every step has one to
  // point at), kept alive until the program ends; its device address.
  auto newWorkspace = [&](int64_t bytes) -> llvm::Expected<DevicePtr> {
    auto workspace =
        DeviceBuffer::allocate(device, std::max<int64_t>(bytes, 256));
    if (!workspace)
      return workspace.takeError();
    workspaces.push_back(std::move(*workspace));
    return workspaces.back().ptr();
  };
  modules.reserve(steps.size());
  for (const Step &step : steps) {
    const AttentionKernelInfo &info = step.kernel.info;
    auto module = CudaModule::load(device, step.kernel.ptx, info.name);
    if (!module)
      return module.takeError();
    modules.push_back(std::move(*module));
    auto operand = [&](unsigned i) -> const DeviceValue & {
      return *values[step.operands[i]];
    };
    ElementType elt = info.bf16 ? ElementType::BF16 : ElementType::F16;
    auto checkBSHD = [&](unsigned i, const char *name, int64_t heads,
                         ElementType type) -> llvm::Error {
      const DeviceValue &v = operand(i);
      if (v.type != type || v.shape.size() != 4 || v.shape[2] != heads ||
          v.shape[3] != info.headDim)
        return error(llvm::Twine(name) + " of " + info.name + " must be [B, S, " +
                     llvm::Twine(heads) + ", " + llvm::Twine(info.headDim) +
                     "] " + elementTypeName(type));
      return llvm::Error::success();
    };
    // Dropout's Philox (seed, offset): i64 [2].
    auto checkRng = [&](const DeviceValue &v) -> llvm::Error {
      if (v.type != ElementType::I64 || v.shape != std::vector<int64_t>{2})
        return error("the rng of " + info.name +
                     " must be [2] i64 (dropout's Philox seed and offset)");
      return llvm::Error::success();
    };
    auto setResult = [&](unsigned i, DeviceValue value) {
      values.resize(std::max<size_t>(values.size(), step.results[i] + 1));
      values[step.results[i]] = std::move(value);
    };
    if (info.kind == AttentionKernelInfo::Kind::Hadamard) {
      const DeviceValue &in = operand(0);
      if (in.type != info.inputType || in.shape.empty() ||
          in.shape.back() != info.headDim)
        return error("the input of " + info.name + " must be [..., " +
                     llvm::Twine(info.headDim) + "] " +
                     elementTypeName(info.inputType));
      int64_t rows = 1;
      for (size_t i = 0; i + 1 < in.shape.size(); ++i)
        rows *= in.shape[i];
      // `in` does not outlive setResult, which may grow `values`.
      DevicePtr src = in.buffer.ptr();
      auto out = allocate(device, info.outputType, in.shape);
      if (!out)
        return out.takeError();
      setResult(0, std::move(*out));
      auto function = modules.back().getFunction(info.name);
      if (!function)
        return function.takeError();
      DevicePtr dst = values[step.results[0]]->buffer.ptr();
      launches.push_back([kernel = *function, &info, src, dst, rows]() {
        return launchHadamard(kernel, info, src, dst, rows, nullptr);
      });
      continue;
    }
    if (info.kind == AttentionKernelInfo::Kind::Quantize) {
      const DeviceValue &in = operand(0);
      if (in.type != info.inputType || in.shape.size() != 4 ||
          in.shape[2] != info.numQHeads || in.shape[3] != info.headDim)
        return error("the input of " + info.name + " must be [B, S, " +
                     llvm::Twine(info.numQHeads) + ", " +
                     llvm::Twine(info.headDim) + "] " +
                     elementTypeName(info.inputType));
      int64_t batch = in.shape[0], seq = in.shape[1];
      DevicePtr src = in.buffer.ptr();
      auto out = allocate(device, ElementType::F8E4M3, in.shape);
      if (!out)
        return out.takeError();
      auto descale =
          allocate(device, ElementType::F32, {batch, info.numKVHeads});
      if (!descale)
        return descale.takeError();
      setResult(0, std::move(*out));
      setResult(1, std::move(*descale));
      auto workspace = newWorkspace(quantizeWorkspaceBytes(info, batch));
      if (!workspace)
        return workspace.takeError();
      auto kernels = getQuantizeKernels(modules.back(), info);
      if (!kernels)
        return kernels.takeError();
      QuantizeDeviceArgs args{src,
                              values[step.results[0]]->buffer.ptr(),
                              values[step.results[1]]->buffer.ptr(),
                              *workspace,
                              batch,
                              seq};
      launches.push_back([kernels = *kernels, &info, args]() {
        return launchQuantize(kernels, info, args, nullptr);
      });
      continue;
    }
    if (info.fp8) {
      for (auto [i, name, heads] :
           {std::tuple<unsigned, const char *, int64_t>{0, "q", info.numQHeads},
            {1, "k", info.numKVHeads},
            {2, "v", info.numKVHeads}})
        if (llvm::Error err = checkBSHD(i, name, heads, ElementType::F8E4M3))
          return std::move(err);
      const auto &q = operand(0).shape;
      int64_t batch = q[0], seqQ = q[1], seqK = operand(1).shape[1];
      std::vector<int64_t> descaleShape = {batch, info.numKVHeads};
      for (unsigned i = 3; i < 6; ++i)
        if (operand(i).type != ElementType::F32 ||
            operand(i).shape != descaleShape)
          return error("the descales of " + info.name + " must be [B, " +
                       llvm::Twine(info.numKVHeads) + "] f32");
      auto out = allocate(device, ElementType::BF16, q);
      if (!out)
        return out.takeError();
      auto lse = allocate(device, ElementType::F32,
                          {batch, info.numQHeads, seqQ});
      if (!lse)
        return lse.takeError();
      setResult(0, std::move(*out));
      setResult(1, std::move(*lse));
      auto workspace =
          newWorkspace(attentionForwardWorkspaceBytes(info, batch, seqQ, seqK));
      if (!workspace)
        return workspace.takeError();
      auto transpose = modules.back().getFunction(info.name + "_vt");
      if (!transpose)
        return transpose.takeError();
      auto function = modules.back().getFunction(info.name);
      if (!function)
        return function.takeError();
      auto args = AttentionDeviceArgs::forward(
          operand(0).buffer.ptr(), operand(1).buffer.ptr(),
          operand(2).buffer.ptr(), values[step.results[0]]->buffer.ptr(),
          values[step.results[1]]->buffer.ptr(), batch, seqQ, seqK);
      args.qDescale = operand(3).buffer.ptr();
      args.kDescale = operand(4).buffer.ptr();
      args.vDescale = operand(5).buffer.ptr();
      args.workspace = *workspace;
      args.multiprocessors = device.getMultiprocessorCount();
      launches.push_back(
          [transpose = *transpose, kernel = *function, &info, args]() {
            return launchAttentionForwardFP8(transpose, kernel, info, args,
                                             nullptr);
          });
      continue;
    }
    if (info.varlen && info.backward) {
      auto launch = planVarlenGrad(info, step, inputs, values, device);
      if (!launch)
        return launch.takeError();
      auto workspace = newWorkspace(attentionGradWorkspaceBytes(
          info, launch->batch, launch->seqQ, launch->seqK));
      if (!workspace)
        return workspace.takeError();
      launch->workspace = *workspace;
      auto kernels = getAttentionGradKernels(modules.back(), info);
      if (!kernels)
        return kernels.takeError();
      launches.push_back([kernels = *kernels, &info, args = *launch]() {
        return launchAttentionVarlenBackward(kernels, info, args, nullptr);
      });
      continue;
    }
    if (info.varlen) {
      auto launch = planVarlen(info, step, inputs, values, device);
      if (!launch)
        return launch.takeError();
      auto function = modules.back().getFunction(info.name);
      if (!function)
        return function.takeError();
      launches.push_back([kernel = *function, &info, args = *launch]() {
        return launchAttentionVarlen(kernel, info, args, nullptr);
      });
      continue;
    }
    if (!info.backward) {
      for (auto [i, name, heads] :
           {std::tuple<unsigned, const char *, int64_t>{0, "q", info.numQHeads},
            {1, "k", info.numKVHeads},
            {2, "v", info.numKVHeads}})
        if (llvm::Error err = checkBSHD(i, name, heads, elt))
          return std::move(err);
      const auto &q = operand(0).shape;
      int64_t batch = q[0], seqQ = q[1], seqK = operand(1).shape[1];
      // A KV cache: [B, S_cache, Hkv, D] caches of q's batch and i32 [B]
      // lengths; paged: [num_pages, page_size, Hkv, D] caches and an i32
      // [B, max_pages] page table.
      DevicePtr lengths = 0, pageTable = 0;
      int64_t numPages = 0, pageSize = 0, tableWidth = 0;
      if (info.kvCache) {
        const DeviceValue &lens = operand(3);
        if (info.paged) {
          if (operand(2).shape != operand(1).shape)
            return error("the caches of " + info.name +
                         " must both be [num_pages, page_size, Hkv, D]");
          const DeviceValue &table = operand(4);
          if (table.type != ElementType::I32 || table.shape.size() != 2 ||
              table.shape[0] != batch)
            return error("page_table of " + info.name + " must be [" +
                         llvm::Twine(batch) + ", max_pages] i32");
          numPages = operand(1).shape[0];
          pageSize = seqK;
          tableWidth = table.shape[1];
          pageTable = table.buffer.ptr();
        } else if (operand(1).shape[0] != batch ||
                   operand(2).shape[0] != batch ||
                   operand(2).shape[1] != seqK) {
          return error("the caches of " + info.name +
                       " must be [B, S_cache, Hkv, D] with q's batch " +
                       llvm::Twine(batch));
        }
        if (lens.type != ElementType::I32 ||
            lens.shape != std::vector<int64_t>{batch})
          return error("cache_seqlens of " + info.name + " must be [" +
                       llvm::Twine(batch) + "] i32");
        lengths = lens.buffer.ptr();
      }
      auto out = allocate(device, elt, q);
      if (!out)
        return out.takeError();
      auto lse = allocate(device, ElementType::F32,
                          {batch, info.numQHeads, seqQ});
      if (!lse)
        return lse.takeError();
      values.resize(std::max<size_t>(values.size(), step.results[1] + 1));
      values[step.results[0]] = std::move(*out);
      values[step.results[1]] = std::move(*lse);
      auto function = modules.back().getFunction(info.name);
      if (!function)
        return function.takeError();
      auto args = AttentionDeviceArgs::forward(
          operand(0).buffer.ptr(), operand(1).buffer.ptr(),
          operand(2).buffer.ptr(), values[step.results[0]]->buffer.ptr(),
          values[step.results[1]]->buffer.ptr(), batch, seqQ, seqK);
      args.multiprocessors = device.getMultiprocessorCount();
      if (info.dropout) {
        // fa3.attention's fourth operand: the Philox (seed, offset).
        if (llvm::Error err = checkRng(operand(3)))
          return std::move(err);
        args.rng = operand(3).buffer.ptr();
      }
      args.cacheSeqlens = lengths;
      args.pageTable = pageTable;
      args.numPages = numPages;
      args.pageSize = pageSize;
      args.pageTableWidth = tableWidth;
      if (info.numSplits > 1) {
        // Split-KV: the partial attentions go to a workspace, and the
        // `_combine` kernel merges them into O and LSE.
        auto workspace = newWorkspace(
            attentionForwardWorkspaceBytes(info, batch, seqQ, seqK));
        if (!workspace)
          return workspace.takeError();
        args.workspace = *workspace;
        auto combine =
            modules.back().getFunction(attentionCombineKernelName(info));
        if (!combine)
          return combine.takeError();
        launches.push_back([kernel = *function, combine = *combine, &info,
                            args]() {
          return launchAttentionSplitKV(kernel, combine, info, args, nullptr);
        });
        continue;
      }
      launches.push_back([kernel = *function, &info, args]() {
        return launchAttentionForward(kernel, info, args, nullptr);
      });
      continue;
    }
    for (auto [i, name, heads] :
         {std::tuple<unsigned, const char *, int64_t>{0, "grad_output",
                                                      info.numQHeads},
          {1, "q", info.numQHeads},
          {2, "k", info.numKVHeads},
          {3, "v", info.numKVHeads},
          {4, "out", info.numQHeads}})
      if (llvm::Error err = checkBSHD(i, name, heads, elt))
        return std::move(err);
    const auto &q = operand(1).shape, &k = operand(2).shape;
    int64_t batch = q[0], seqQ = q[1], seqK = k[1];
    std::vector<int64_t> lseShape = {batch, info.numQHeads, seqQ};
    if (operand(5).type != ElementType::F32 || operand(5).shape != lseShape)
      return error("lse of " + info.name + " must be [B, Hq, Sq] f32");
    // fa3.attention_grad's optional grad_lse, then (dropout) the rng.
    bool hasGradLse = step.operands.size() > (info.dropout ? 7u : 6u);
    if (hasGradLse &&
        (operand(6).type != ElementType::F32 || operand(6).shape != lseShape))
      return error("grad_lse of " + info.name + " must be [B, Hq, Sq] f32");
    if (info.dropout)
      if (llvm::Error err = checkRng(operand(step.operands.size() - 1)))
        return std::move(err);
    std::vector<std::optional<DeviceValue>> grads;
    for (unsigned i = 1; i <= 3; ++i) {
      auto g = allocate(device, elt, operand(i).shape);
      if (!g)
        return g.takeError();
      grads.push_back(std::move(*g));
    }
    values.resize(std::max<size_t>(values.size(), step.results[2] + 1));
    for (unsigned i = 0; i < 3; ++i)
      values[step.results[i]] = std::move(*grads[i]);
    auto workspace =
        newWorkspace(attentionGradWorkspaceBytes(info, batch, seqQ, seqK));
    if (!workspace)
      return workspace.takeError();
    auto kernels = getAttentionGradKernels(modules.back(), info);
    if (!kernels)
      return kernels.takeError();
    AttentionGradDeviceArgs args;
    args.gradOut = operand(0).buffer.ptr();
    args.q = operand(1).buffer.ptr();
    args.k = operand(2).buffer.ptr();
    args.v = operand(3).buffer.ptr();
    args.out = operand(4).buffer.ptr();
    args.lse = operand(5).buffer.ptr();
    if (hasGradLse)
      args.gradLse = operand(6).buffer.ptr();
    if (info.dropout)
      args.rng = operand(step.operands.size() - 1).buffer.ptr();
    args.gradQ = values[step.results[0]]->buffer.ptr();
    args.gradK = values[step.results[1]]->buffer.ptr();
    args.gradV = values[step.results[2]]->buffer.ptr();
    args.workspace = *workspace;
    args.batch = batch;
    args.seqQ = seqQ;
    args.seqK = seqK;
    launches.push_back([kernels = *kernels, &info, args]() {
      return launchAttentionBackward(kernels, info, args, nullptr);
    });
  }

  auto launchAll = [&]() -> llvm::Error {
    for (auto &launch : launches)
      if (llvm::Error err = launch())
        return err;
    return llvm::Error::success();
  };
  if (llvm::Error err = launchAll())
    return std::move(err);
  if (llvm::Error err = device.synchronize())
    return std::move(err);

  std::vector<HostTensor> results;
  for (unsigned id : returns) {
    const DeviceValue &v = *values[id];
    HostTensor t(v.type, v.shape);
    if (!t.data.empty())
      if (llvm::Error err = v.buffer.copyToHost(t.data.data(), t.data.size()))
        return std::move(err);
    results.push_back(std::move(t));
  }

  if (benchmarkRuns > 0 && medianMs) {
    std::vector<float> times;
    for (unsigned i = 0; i <= benchmarkRuns; ++i) {
      auto start = CudaEvent::create(device);
      if (!start)
        return start.takeError();
      auto stop = CudaEvent::create(device);
      if (!stop)
        return stop.takeError();
      if (llvm::Error err = start->record(nullptr))
        return std::move(err);
      if (llvm::Error err = launchAll())
        return std::move(err);
      if (llvm::Error err = stop->record(nullptr))
        return std::move(err);
      if (llvm::Error err = stop->synchronize())
        return std::move(err);
      auto ms = stop->elapsedMillisecondsSince(*start);
      if (!ms)
        return ms.takeError();
      if (i > 0) // the first run is the warm-up
        times.push_back(*ms);
    }
    std::sort(times.begin(), times.end());
    *medianMs = times[times.size() / 2];
  }
  return results;
}
