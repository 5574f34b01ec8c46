//===- CPUExecutable.cpp - Compile and run fa3 functions on the CPU ---------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/JIT/CPUExecutable.h"

#include "fa3/Runtime/KernelCache.h"

#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/InitAllDialects.h"
#include "fa3/Pipelines/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"

#include <cstdlib>
#include <cstring>
#include <set>

using namespace fa3;
using namespace fa3::runtime;
using llvm::createStringError;

CPUExecutable::~CPUExecutable() = default;

namespace {
/// A ranked memref descriptor seen through its rank-erased C layout:
/// {allocated, aligned, offset, sizes[rank], strides[rank]}.
struct UnrankedDescriptor {
  int64_t rank;
  int64_t *ranked;
};
} // namespace

/// Strided copy between two memrefs of the same shape; the target of
/// `memref.copy` between non-contiguous memrefs, which upstream keeps in
/// libmlir_c_runner_utils. fa3 carries its own so that the JIT needs no
/// shared library at run time.
static void stridedCopy(const char *src, char *dst, int64_t elemSize,
                        const int64_t *sizes, const int64_t *srcStrides,
                        const int64_t *dstStrides, int64_t rank) {
  if (rank == 0) {
    std::memcpy(dst, src, elemSize);
    return;
  }
  if (rank == 1 && srcStrides[0] == 1 && dstStrides[0] == 1) {
    std::memcpy(dst, src, sizes[0] * elemSize);
    return;
  }
  for (int64_t i = 0; i < sizes[0]; ++i)
    stridedCopy(src + i * srcStrides[0] * elemSize,
                dst + i * dstStrides[0] * elemSize, elemSize, sizes + 1,
                srcStrides + 1, dstStrides + 1, rank - 1);
}

extern "C" void fa3MemrefCopy(int64_t elemSize, UnrankedDescriptor *src,
                              UnrankedDescriptor *dst) {
  int64_t rank = src->rank;
  const int64_t *s = src->ranked, *d = dst->ranked;
  const char *srcBase =
      reinterpret_cast<const char *>(s[1]) + s[2] * elemSize;
  char *dstBase = reinterpret_cast<char *>(d[1]) + d[2] * elemSize;
  for (int64_t i = 0; i < rank; ++i)
    if (s[3 + i] == 0)
      return;
  stridedCopy(srcBase, dstBase, elemSize, s + 3, s + 3 + rank, d + 3 + rank,
              rank);
}

std::string TensorSignature::describe() const {
  std::string s = "tensor<";
  for (const auto &d : shape)
    s += (d ? std::to_string(*d) : std::string("?")) + "x";
  return s + elementTypeName(elementType).str() + ">";
}

static llvm::Error error(const llvm::Twine &message) {
  return createStringError(std::errc::invalid_argument, message.str().c_str());
}

/// The signature of a tensor type, or an error naming what is unsupported.
static llvm::Expected<TensorSignature> signatureOf(mlir::Type type,
                                                   const llvm::Twine &what) {
  auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(type);
  std::string typeStr;
  llvm::raw_string_ostream os(typeStr);
  type.print(os);
  if (!tensor)
    return error(what + " has type " + typeStr +
                 "; only ranked tensors of f32, f16 or bf16 are supported");
  TensorSignature sig;
  mlir::Type elt = tensor.getElementType();
  if (elt.isF32())
    sig.elementType = ElementType::F32;
  else if (elt.isF16())
    sig.elementType = ElementType::F16;
  else if (elt.isBF16())
    sig.elementType = ElementType::BF16;
  else if (llvm::isa<mlir::Float8E4M3FNType>(elt))
    sig.elementType = ElementType::F8E4M3;
  else if (elt.isInteger(32))
    sig.elementType = ElementType::I32;
  else if (elt.isInteger(64))
    sig.elementType = ElementType::I64;
  else
    return error(what + " has type " + typeStr +
                 "; only ranked tensors of f32, f16, bf16, f8E4M3FN, i32 or "
                 "i64 are supported");
  for (int64_t d : tensor.getShape())
    sig.shape.push_back(mlir::ShapedType::isDynamic(d)
                            ? std::nullopt
                            : std::optional<int64_t>(d));
  return sig;
}

/// Records the dim equalities the fa3 ops rely on for the operands that are
/// function arguments: the compiled code indexes K and V with Q's batch, V
/// with K's sequence length, the sequence offsets and page tables with the
/// batch index, so a mismatch would read outside a buffer.
static void collectEqualities(mlir::func::FuncOp func,
                              std::vector<DimEquality> &out) {
  auto argIndex = [&](mlir::Value v) -> std::optional<unsigned> {
    auto arg = llvm::dyn_cast_if_present<mlir::BlockArgument>(v);
    if (!arg || arg.getOwner() != &func.getBody().front())
      return std::nullopt;
    return arg.getArgNumber();
  };
  // dim `dimA` of `a` == dim `dimB` of `b` + offset, when both are arguments.
  auto require = [&](mlir::Value a, unsigned dimA, mlir::Value b,
                     unsigned dimB, const char *why, int64_t offset = 0) {
    auto ia = argIndex(a), ib = argIndex(b);
    if (ia && ib)
      out.push_back({*ia, dimA, *ib, dimB, why, offset});
  };
  func.walk([&](mlir::Operation *op) {
    if (auto attention = llvm::dyn_cast<mlir::fa3::AttentionOp>(op)) {
      require(attention.getQuery(), 0, attention.getKey(), 0,
              "query and key must have the same batch");
      require(attention.getQuery(), 0, attention.getValue(), 0,
              "query and value must have the same batch");
      require(attention.getKey(), 1, attention.getValue(), 1,
              "key and value must have the same sequence length");
    } else if (auto varlen =
                   llvm::dyn_cast<mlir::fa3::AttentionVarlenOp>(op)) {
      require(varlen.getKey(), 0, varlen.getValue(), 0,
              "key and value must have the same number of tokens");
      require(varlen.getCuSeqlensQ(), 0, varlen.getCuSeqlensK(), 0,
              "cu_seqlens_q and cu_seqlens_k must both have B + 1 entries");
      require(varlen.getCuSeqlensQ(), 0, varlen.getSequsedK(), 0,
              "seqused_k must have B entries, one fewer than cu_seqlens_q",
              /*offset=*/1);
    } else if (auto grad =
                   llvm::dyn_cast<mlir::fa3::AttentionVarlenGradOp>(op)) {
      require(grad.getKey(), 0, grad.getValue(), 0,
              "key and value must have the same number of tokens");
      require(grad.getQuery(), 0, grad.getGradOutput(), 0,
              "query and grad_output must have the same number of tokens");
      require(grad.getQuery(), 0, grad.getOutput(), 0,
              "query and output must have the same number of tokens");
      require(grad.getQuery(), 0, grad.getLse(), 1,
              "the lse must have one column per query token");
      require(grad.getQuery(), 0, grad.getGradLse(), 1,
              "grad_lse must have one column per query token");
      require(grad.getCuSeqlensQ(), 0, grad.getCuSeqlensK(), 0,
              "cu_seqlens_q and cu_seqlens_k must both have B + 1 entries");
      require(grad.getCuSeqlensQ(), 0, grad.getSequsedK(), 0,
              "seqused_k must have B entries, one fewer than cu_seqlens_q",
              /*offset=*/1);
    } else if (auto cache = llvm::dyn_cast<mlir::fa3::AttentionKVCacheOp>(op)) {
      require(cache.getQuery(), 0, cache.getCacheSeqlens(), 0,
              "cache_seqlens must have one entry per batch of the query");
      require(cache.getKeyCache(), 0, cache.getValueCache(), 0,
              "key and value caches must have the same first dim");
      require(cache.getKeyCache(), 1, cache.getValueCache(), 1,
              "key and value caches must have the same second dim");
      if (cache.isPaged())
        require(cache.getQuery(), 0, cache.getPageTable(), 0,
                "page_table must have one row per batch of the query");
      else
        require(cache.getQuery(), 0, cache.getKeyCache(), 0,
                "query and the key cache must have the same batch");
    } else if (auto append = llvm::dyn_cast<mlir::fa3::KVCacheAppendOp>(op)) {
      require(append.getKey(), 0, append.getValue(), 0,
              "new keys and values must have the same batch");
      require(append.getKey(), 1, append.getValue(), 1,
              "new keys and values must have the same number of rows");
      require(append.getKey(), 0, append.getCacheSeqlens(), 0,
              "cache_seqlens must have one entry per batch of the new keys");
      require(append.getKeyCache(), 0, append.getValueCache(), 0,
              "key and value caches must have the same first dim");
      require(append.getKeyCache(), 1, append.getValueCache(), 1,
              "key and value caches must have the same second dim");
      if (append.getPageTable())
        require(append.getKey(), 0, append.getPageTable(), 0,
                "page_table must have one row per batch of the new keys");
      else
        require(append.getKey(), 0, append.getKeyCache(), 0,
                "new keys and the key cache must have the same batch");
    }
  });
}

/// Runs fa3-cpu-pipeline on `module` and returns the object code MLIR's
/// ExecutionEngine generates for it.
static llvm::Expected<std::string>
compileObject(mlir::ModuleOp module, llvm::StringRef function,
              const CPUCompileOptions &options, std::string &diagnostics) {
  mlir::MLIRContext *context = module.getContext();
  mlir::PassManager pm(context);
  mlir::fa3::CPUPipelineOptions pipelineOptions;
  pipelineOptions.blockM = options.blockM;
  pipelineOptions.blockN = options.blockN;
  pipelineOptions.grid = options.grid;
  mlir::fa3::buildFA3CPUPipeline(pm, pipelineOptions);
  if (mlir::failed(pm.run(module)))
    return error("fa3-cpu-pipeline failed on '" + function + "':\n" +
                 diagnostics);

  mlir::DialectRegistry registry;
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  context->appendDialectRegistry(registry);
  mlir::ExecutionEngineOptions engineOptions;
  engineOptions.transformer = mlir::makeOptimizingTransformer(
      options.optLevel, /*sizeLevel=*/0, /*targetMachine=*/nullptr);
  engineOptions.enableObjectDump = true;
  auto engine = mlir::ExecutionEngine::create(module, engineOptions);
  if (!engine)
    return llvm::joinErrors(
        error("cannot JIT-compile '" + function + "'" +
              (diagnostics.empty() ? "" : ":\n" + diagnostics)),
        engine.takeError());
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    symbols[interner("memrefCopy")] = {
        llvm::orc::ExecutorAddr::fromPtr(&fa3MemrefCopy),
        llvm::JITSymbolFlags::Exported};
    return symbols;
  });
  // The engine compiles on the first lookup, which fills its object cache.
  auto packed = (*engine)->lookupPacked("_mlir_ciface_" + function.str());
  if (!packed)
    return packed.takeError();
  llvm::SmallString<128> path;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("fa3-cpu", "o", path))
    return error("cannot create a temporary object file: " + ec.message());
  (*engine)->dumpToObjectFile(path);
  auto buffer = llvm::MemoryBuffer::getFile(path);
  llvm::sys::fs::remove(path);
  if (!buffer || (*buffer)->getBufferSize() == 0)
    return error("the ExecutionEngine wrote no object code for '" + function +
                 "'");
  return (*buffer)->getBuffer().str();
}

/// Loads `object` into an ORC JIT that resolves the C library, libm and
/// fa3's memrefCopy from this process, and finds `function`'s packed
/// C-interface wrapper in it.
static llvm::Expected<
    std::pair<std::unique_ptr<llvm::orc::LLJIT>, void (*)(void **)>>
loadObject(llvm::StringRef object, llvm::StringRef function) {
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit)
    return jit.takeError();
  llvm::orc::JITDylib &main = (*jit)->getMainJITDylib();
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      (*jit)->getDataLayout().getGlobalPrefix());
  if (!process)
    return process.takeError();
  main.addGenerator(std::move(*process));
  llvm::orc::MangleAndInterner mangle((*jit)->getExecutionSession(),
                                      (*jit)->getDataLayout());
  llvm::orc::SymbolMap symbols;
  symbols[mangle("memrefCopy")] = {
      llvm::orc::ExecutorAddr::fromPtr(&fa3MemrefCopy),
      llvm::JITSymbolFlags::Exported};
  if (llvm::Error err = main.define(llvm::orc::absoluteSymbols(symbols)))
    return std::move(err);
  if (llvm::Error err = (*jit)->addObjectFile(
          llvm::MemoryBuffer::getMemBufferCopy(object, "fa3-cpu-object")))
    return std::move(err);
  auto address = (*jit)->lookup("_mlir__mlir_ciface_" + function.str());
  if (!address)
    return address.takeError();
  return std::make_pair(std::move(*jit), address->toPtr<void (*)(void **)>());
}

llvm::Expected<std::unique_ptr<CPUExecutable>>
CPUExecutable::compile(mlir::OwningOpRef<mlir::ModuleOp> module,
                       llvm::StringRef function,
                       const CPUCompileOptions &options) {
  mlir::MLIRContext *context = module->getContext();
  auto func = module->lookupSymbol<mlir::func::FuncOp>(function);
  if (!func || func.isExternal()) {
    std::string names;
    module->walk([&](mlir::func::FuncOp f) {
      if (!f.isExternal())
        names += (names.empty() ? "" : ", ") + f.getSymName().str();
    });
    return error("no function '" + function + "' with a body in the module" +
                 (names.empty() ? std::string()
                                : "; it defines: " + names));
  }

  auto exe = std::unique_ptr<CPUExecutable>(new CPUExecutable());
  exe->name = function.str();
  for (auto [i, type] : llvm::enumerate(func.getArgumentTypes())) {
    auto sig = signatureOf(type, "argument #" + llvm::Twine(i));
    if (!sig)
      return sig.takeError();
    exe->args.push_back(*sig);
  }
  for (auto [i, type] : llvm::enumerate(func.getResultTypes())) {
    auto sig = signatureOf(type, "result #" + llvm::Twine(i));
    if (!sig)
      return sig.takeError();
    exe->results.push_back(*sig);
  }
  collectEqualities(func, exe->equalities);
  func->setAttr("llvm.emit_c_interface", mlir::UnitAttr::get(context));

  // Collect diagnostics so that a compile error reaches the caller whole.
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(context, [&](mlir::Diagnostic &diag) {
    llvm::raw_string_ostream os(diagnostics);
    os << diag.getLocation() << ": " << diag << "\n";
    for (auto &note : diag.getNotes())
      os << "  note: " << note << "\n";
    return mlir::success();
  });
  static bool targetInitialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)targetInitialized;

  // Everything the object code depends on: the module, the options, the
  // host CPU it is generated for and the fa3 build that generated it.
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  std::string features;
  for (const auto &feature : llvm::sys::getHostCPUFeatures())
    if (feature.getValue())
      features += feature.getKey().str() + ",";
  std::string key = KernelCache::computeKey(
      {"cpu-object", FA3_VERSION, KernelCache::getBuildId(),
       llvm::sys::getProcessTriple(), llvm::sys::getHostCPUName().str(),
       features, text, function.str(),
       "block-m=" + std::to_string(options.blockM),
       "block-n=" + std::to_string(options.blockN),
       std::string("grid=") + (options.grid ? "1" : "0"),
       "opt=" + std::to_string(options.optLevel)});
  KernelCache &cache = KernelCache::getGlobal();
  std::string object;
  if (options.useCache) {
    if (auto entry = cache.lookup(key);
        entry && entry->manifest.count("function") &&
        entry->manifest.at("function") == function) {
      object = entry->blob;
      exe->cacheHit = true;
    }
  }
  if (!exe->cacheHit) {
    auto compiled = compileObject(*module, function, options, diagnostics);
    if (!compiled)
      return compiled.takeError();
    object = std::move(*compiled);
    // A cache that cannot be written costs a recompile next time only.
    if (options.useCache)
      llvm::consumeError(cache.put(
          key, {object, {{"kind", "cpu-object"}, {"function", function.str()}}}));
  }
  auto loaded = loadObject(object, function);
  if (!loaded)
    return loaded.takeError();
  exe->jit = std::move(loaded->first);
  exe->entry = loaded->second;
  return exe;
}

llvm::Error
CPUExecutable::checkInputs(const std::vector<HostTensor> &inputs) const {
  if (inputs.size() != args.size())
    return error("'" + name + "' takes " + llvm::Twine(args.size()) +
                 " inputs, got " + llvm::Twine(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSignature &sig = args[i];
    const HostTensor &in = inputs[i];
    std::string where = "input #" + std::to_string(i) + " of '" + name + "' (" +
                        sig.describe() + ")";
    if (in.elementType != sig.elementType)
      return error(where + " got element type " +
                   elementTypeName(in.elementType));
    if (in.shape.size() != sig.shape.size())
      return error(where + " got rank " + llvm::Twine(in.shape.size()) +
                   ", shape " + in.describe());
    for (size_t d = 0; d < sig.shape.size(); ++d)
      if (sig.shape[d] && *sig.shape[d] != in.shape[d])
        return error(where + " got shape " + in.describe() + ": dim " +
                     llvm::Twine(d) + " must be " +
                     llvm::Twine(*sig.shape[d]));
  }
  for (const DimEquality &eq : equalities) {
    int64_t a = inputs[eq.argA].shape[eq.dimA],
            b = inputs[eq.argB].shape[eq.dimB];
    if (a != b + eq.offset)
      return error(eq.why + ": input #" + llvm::Twine(eq.argA) + " dim " +
                   llvm::Twine(eq.dimA) + " is " + llvm::Twine(a) +
                   " but input #" + llvm::Twine(eq.argB) + " dim " +
                   llvm::Twine(eq.dimB) + " is " + llvm::Twine(b));
  }
  return llvm::Error::success();
}

/// Copies a strided memref into a dense host tensor.
static void copyStrided(const uint8_t *base, int64_t elt,
                        llvm::ArrayRef<int64_t> sizes,
                        llvm::ArrayRef<int64_t> strides, uint8_t *&out) {
  if (sizes.empty()) {
    std::memcpy(out, base, elt);
    out += elt;
    return;
  }
  for (int64_t i = 0; i < sizes[0]; ++i)
    copyStrided(base + i * strides[0] * elt, elt, sizes.drop_front(),
                strides.drop_front(), out);
}

llvm::Expected<std::vector<HostTensor>>
CPUExecutable::run(const std::vector<HostTensor> &inputs) const {
  if (llvm::Error err = checkInputs(inputs))
    return std::move(err);

  // Compiled code may bufferize in place into its arguments: give it copies.
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<std::vector<int64_t>> descriptors;
  for (const HostTensor &in : inputs) {
    buffers.push_back(in.data);
    if (buffers.back().empty())
      buffers.back().resize(1); // Keep a valid pointer for empty tensors.
    int64_t rank = in.shape.size();
    std::vector<int64_t> desc(3 + 2 * rank);
    auto ptr = reinterpret_cast<int64_t>(buffers.back().data());
    desc[0] = desc[1] = ptr;
    desc[2] = 0;
    int64_t stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      desc[3 + d] = in.shape[d];
      desc[3 + rank + d] = stride;
      stride *= in.shape[d];
    }
    descriptors.push_back(std::move(desc));
  }
  size_t resultWords = 0;
  for (const TensorSignature &r : results)
    resultWords += 3 + 2 * r.shape.size();
  std::vector<int64_t> resultStruct(resultWords, 0);

  // The C interface takes the result struct first, then one descriptor
  // pointer per argument; invokePacked wants a pointer to each of those.
  void *resultPtr = resultStruct.data();
  std::vector<void *> descriptorPtrs;
  for (auto &d : descriptors)
    descriptorPtrs.push_back(d.data());
  llvm::SmallVector<void *> packed;
  if (!results.empty())
    packed.push_back(&resultPtr);
  for (void *&p : descriptorPtrs)
    packed.push_back(&p);
  entry(packed.data());

  std::vector<HostTensor> outputs;
  std::set<int64_t> freed;
  for (auto &b : buffers)
    freed.insert(reinterpret_cast<int64_t>(b.data()));
  size_t word = 0;
  for (const TensorSignature &r : results) {
    int64_t rank = r.shape.size();
    const int64_t *desc = resultStruct.data() + word;
    word += 3 + 2 * rank;
    std::vector<int64_t> shape(desc + 3, desc + 3 + rank);
    HostTensor out(r.elementType, shape);
    int64_t elt = elementSize(r.elementType);
    if (out.numElements() > 0) {
      const uint8_t *base =
          reinterpret_cast<const uint8_t *>(desc[1]) + desc[2] * elt;
      uint8_t *dst = out.data.data();
      copyStrided(base, elt, llvm::ArrayRef<int64_t>(desc + 3, rank),
                  llvm::ArrayRef<int64_t>(desc + 3 + rank, rank), dst);
    }
    // Results are allocated by the compiled code and owned by the caller.
    if (desc[0] && freed.insert(desc[0]).second)
      std::free(reinterpret_cast<void *>(desc[0]));
    outputs.push_back(std::move(out));
  }
  return outputs;
}
