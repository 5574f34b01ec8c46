//===- fa3-run.cpp - Run a function of an fa3 MLIR file ----------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// fa3-run FILE --function=NAME --device=cpu --input=@q.npy ... --output=@o.npy
// compiles FILE's function, feeds it .npy inputs and writes its results as
// .npy files, like IREE's iree-run-module.
//
//===----------------------------------------------------------------------===//

#include "fa3/InitAllDialects.h"
#include "fa3/JIT/CPUExecutable.h"
#include "fa3/JIT/HopperCompiler.h"
#include "fa3/JIT/HopperKernelCache.h"
#include "fa3/JIT/HopperProgram.h"
#include "fa3/Runtime/AttentionLauncher.h"
#include "fa3/Runtime/CudaDriver.h"
#include "fa3/Runtime/HostTensor.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>

using namespace fa3;
using namespace fa3::runtime;
namespace cl = llvm::cl;

/// fa3-run's own options: --help lists only these; LLVM's and MLIR's
/// options still parse and are listed by --help-hidden.
static cl::OptionCategory runCategory("fa3-run options");

static cl::opt<std::string> inputFile(cl::Positional, cl::Required,
                                      cl::cat(runCategory),
                                      cl::desc("<MLIR file>"));
static cl::opt<std::string> functionName("function", cl::Required,
                                         cl::cat(runCategory),
                                         cl::desc("Function to run"));
static cl::opt<std::string>
    device("device", cl::init("cpu"), cl::cat(runCategory),
           cl::desc("Where to run: cpu (MLIR's ExecutionEngine) or cuda (the "
                    "Hopper kernel on GPU 0)"));
static cl::opt<std::string> emit(
    "emit", cl::init(""), cl::cat(runCategory),
    cl::desc("Compile only and print: ptx (the sm_90a kernel) or nvvm (the "
             "kernel in the LLVM/NVVM dialect); needs no GPU"));
static cl::list<std::string>
    inputs("input", cl::cat(runCategory),
           cl::desc("@file.npy for each argument, in order"));
static cl::list<std::string>
    outputs("output", cl::cat(runCategory),
            cl::desc("@file.npy for each result, in order"));
static cl::opt<unsigned> benchmark(
    "benchmark", cl::init(0), cl::cat(runCategory),
    cl::desc("Run N more times after a warm-up run and print the median"));
static cl::opt<bool>
    cpuGrid("grid", cl::init(false), cl::cat(runCategory),
            cl::desc("CPU: tile as the Hopper pipeline does and run its grid "
                     "serially (fa3-cpu-pipeline{grid=true})"));
static cl::opt<int64_t> blockM("block-m", cl::init(0), cl::cat(runCategory),
                               cl::desc("Override the query tile rows"));
static cl::opt<int64_t> blockN("block-n", cl::init(0), cl::cat(runCategory),
                               cl::desc("Override the key tile rows"));

static int fail(const llvm::Twine &message) {
  llvm::errs() << "fa3-run: error: " << message << "\n";
  return 1;
}

static int fail(llvm::Error err) {
  std::string message = llvm::toString(std::move(err));
  return fail(message);
}

/// "@path" -> "path"; the '@' marks a file as iree-run-module does.
static llvm::Expected<std::string> filePath(llvm::StringRef flag,
                                            llvm::StringRef value) {
  if (!value.starts_with("@") || value.size() == 1)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "--%s=%s: expected @FILE.npy",
                                   flag.str().c_str(), value.str().c_str());
  return value.drop_front().str();
}

/// Reads the .npy for argument `index` and converts it to the argument's
/// element type: bf16 arguments take float32 files rounded to bf16.
static llvm::Expected<HostTensor> readInput(unsigned index,
                                            const TensorSignature &sig) {
  auto path = filePath("input", inputs[index]);
  if (!path)
    return path.takeError();
  auto tensor = readNpy(*path);
  if (!tensor)
    return tensor.takeError();
  // NumPy has no bf16 or e4m3: those arguments read float32 files, rounded.
  bool viaF32 = sig.elementType == ElementType::BF16 ||
                sig.elementType == ElementType::F8E4M3;
  ElementType want = viaF32 ? ElementType::F32 : sig.elementType;
  if (tensor->elementType != want)
    return llvm::createStringError(
        std::errc::invalid_argument,
        "input #%u (%s, from '%s') needs %s .npy file%s, got %s", index,
        sig.describe().c_str(), path->c_str(),
        want == ElementType::F32   ? "a float32"
        : want == ElementType::I32 ? "an int32"
        : want == ElementType::I64 ? "an int64"
                                   : "a float16",
        viaF32 ? (sig.elementType == ElementType::BF16
                      ? " (rounded to bf16)"
                      : " (rounded to e4m3, saturating at 448)")
               : "",
        elementTypeName(tensor->elementType).str().c_str());
  return convert(*tensor, sig.elementType);
}

/// --emit=ptx|nvvm: compile for sm_90a and print.
static int emitHopper(mlir::ModuleOp module) {
  HopperCompileOptions options;
  options.blockM = blockM;
  options.blockN = blockN;
  options.keepStages = emit == "nvvm";
  auto kernel = compileHopperAttention(module, functionName, options);
  if (!kernel)
    return fail(kernel.takeError());
  if (emit == "nvvm") {
    for (auto &[name, ir] : kernel->stages)
      if (name == "1-nvvm")
        llvm::outs() << ir << "\n";
    return 0;
  }
  llvm::outs() << llvm::StringRef(kernel->ptx).rtrim('\0');
  return 0;
}

/// --device=cuda: compile (or fetch) the kernels of every fa3 op of the
/// function and run them in order on GPU 0.
static int runOnCuda(mlir::ModuleOp module) {
  // No driver: fail before compiling anything.
  if (auto driverVersion = runtime::cudaDriverVersion(); !driverVersion)
    return fail(driverVersion.takeError());
  auto start = std::chrono::steady_clock::now();
  HopperCompileOptions options;
  options.blockM = blockM;
  options.blockN = blockN;
  auto program =
      HopperProgram::compile(module, functionName, options);
  if (!program)
    return fail(program.takeError());
  double compileMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count();
  const auto &argTypes = program->getArgumentTypes();
  if (inputs.size() != argTypes.size())
    return fail("'" + functionName + "' takes " + llvm::Twine(argTypes.size()) +
                " inputs, got " + llvm::Twine(inputs.size()) + " --input flags");
  if (outputs.size() != program->getNumResults())
    return fail("'" + functionName + "' returns " +
                llvm::Twine(program->getNumResults()) + " results, got " +
                llvm::Twine(outputs.size()) + " --output flags");
  auto gpu = runtime::CudaDevice::get(0);
  if (!gpu)
    return fail(gpu.takeError());
  if (gpu->getComputeCapabilityMajor() != 9)
    return fail("--device=cuda needs a Hopper GPU (sm_90a); device 0 is " +
                gpu->getName() + " (" + gpu->getSmArch() + ")");

  std::vector<HostTensor> hostInputs;
  for (unsigned i = 0; i < argTypes.size(); ++i) {
    auto tensor = readInput(i, TensorSignature{argTypes[i], {}});
    if (!tensor)
      return fail(tensor.takeError());
    hostInputs.push_back(std::move(*tensor));
  }
  float medianMs = 0;
  auto result = program->run(*gpu, hostInputs, benchmark, &medianMs);
  if (!result)
    return fail(result.takeError());
  if (benchmark > 0) {
    for (const auto &step : program->getSteps())
      llvm::outs() << "kernel: " << step.kernel.info.name << " ("
                   << (step.cacheHit ? "cache hit" : "compiled") << ")\n";
    llvm::outs() << "compile: " << llvm::format("%.1f", compileMs)
                 << " ms\nmedian of " << benchmark
                 << " runs: " << llvm::format("%.4f", medianMs)
                 << " ms (device events)\n";
  }
  for (unsigned i = 0; i < result->size(); ++i) {
    auto path = filePath("output", outputs[i]);
    if (!path)
      return fail(path.takeError());
    if (llvm::Error err = writeNpy(*path, (*result)[i]))
      return fail(std::move(err));
  }
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  cl::HideUnrelatedOptions(runCategory);
  cl::ParseCommandLineOptions(argc, argv, "fa3 function runner\n");

  if (device != "cpu" && device != "cuda")
    return fail("--device=" + device + ": expected cpu or cuda");
  if (!emit.empty() && emit != "ptx" && emit != "nvvm")
    return fail("--emit=" + emit + ": expected ptx or nvvm");

  mlir::DialectRegistry registry;
  mlir::fa3::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(inputFile, sourceMgr,
                                            mlir::ParserConfig(&context));
  if (!module)
    return fail("cannot parse '" + inputFile + "'");

  if (!emit.empty())
    return emitHopper(*module);
  if (device == "cuda")
    return runOnCuda(*module);

  CPUCompileOptions options;
  options.blockM = blockM;
  options.blockN = blockN;
  options.grid = cpuGrid;
  auto start = std::chrono::steady_clock::now();
  auto exe = CPUExecutable::compile(std::move(module), functionName, options);
  if (!exe)
    return fail(exe.takeError());
  double compileMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count();

  const auto &args = (*exe)->getArguments();
  const auto &results = (*exe)->getResults();
  if (inputs.size() != args.size())
    return fail("'" + functionName + "' takes " + llvm::Twine(args.size()) +
                " inputs, got " + llvm::Twine(inputs.size()) + " --input flags");
  if (outputs.size() != results.size())
    return fail("'" + functionName + "' returns " +
                llvm::Twine(results.size()) + " results, got " +
                llvm::Twine(outputs.size()) + " --output flags");
  std::vector<std::string> outputPaths;
  for (const std::string &o : outputs) {
    auto path = filePath("output", o);
    if (!path)
      return fail(path.takeError());
    outputPaths.push_back(*path);
  }

  std::vector<HostTensor> hostInputs;
  for (unsigned i = 0; i < args.size(); ++i) {
    auto tensor = readInput(i, args[i]);
    if (!tensor)
      return fail(tensor.takeError());
    hostInputs.push_back(std::move(*tensor));
  }

  auto result = (*exe)->run(hostInputs);
  if (!result)
    return fail(result.takeError());

  if (benchmark > 0) {
    std::vector<double> times;
    for (unsigned i = 0; i < benchmark; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto again = (*exe)->run(hostInputs);
      auto t1 = std::chrono::steady_clock::now();
      if (!again)
        return fail(again.takeError());
      times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(times.begin(), times.end());
    llvm::outs() << "compile: " << llvm::format("%.1f", compileMs)
                 << " ms\nmedian of " << benchmark << " runs: "
                 << llvm::format("%.3f", times[times.size() / 2])
                 << " ms (min " << llvm::format("%.3f", times.front())
                 << ", max " << llvm::format("%.3f", times.back()) << ")\n";
  }

  for (size_t i = 0; i < result->size(); ++i)
    if (llvm::Error err = writeNpy(outputPaths[i], (*result)[i]))
      return fail(std::move(err));
  return 0;
}
