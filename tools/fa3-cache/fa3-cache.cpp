//===- fa3-cache.cpp - Inspect and exercise the kernel cache --------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//   fa3-cache put KEYPART... --blob=FILE [--set=NAME=VALUE] [--extra=FILE]
//   fa3-cache get KEYPART... --out=FILE   (prints the manifest)
//   fa3-cache key KEYPART...              (prints the key)
//   fa3-cache path                        (prints the cache directory)
//
// The key is the SHA-256 of the KEYPARTs, as KernelCache::computeKey makes
// it from the spec, schedule, fa3 version, arch and ptxas version. The cache
// directory is $FA3_CACHE_DIR, $XDG_CACHE_HOME/fa3 or $HOME/.cache/fa3. A
// miss exits with 1.
//
//===----------------------------------------------------------------------===//

#include "fa3/Runtime/KernelCache.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace fa3::runtime;
namespace cl = llvm::cl;
using llvm::StringRef;

static cl::SubCommand putCommand("put", "Store --blob under the key");
static cl::SubCommand getCommand("get", "Write the key's blob to --out");
static cl::SubCommand keyCommand("key", "Print the key of the key parts");
static cl::SubCommand pathCommand("path", "Print the cache directory");

static cl::list<std::string> keyParts(cl::Positional, cl::OneOrMore,
                                      cl::desc("<key part>..."),
                                      cl::sub(putCommand), cl::sub(getCommand),
                                      cl::sub(keyCommand));
static cl::opt<std::string> blobFile("blob", cl::Required,
                                     cl::desc("The file to store"),
                                     cl::value_desc("file"),
                                     cl::sub(putCommand));
static cl::list<std::string>
    manifestEntries("set", cl::desc("A manifest entry NAME=VALUE"),
                    cl::value_desc("name=value"), cl::sub(putCommand));
static cl::list<std::string>
    extraFiles("extra", cl::desc("A file to keep next to the entry"),
               cl::value_desc("file"), cl::sub(putCommand));
static cl::opt<std::string> outFile("out", cl::Required,
                                    cl::desc("Where to write the blob"),
                                    cl::value_desc("file"),
                                    cl::sub(getCommand));
static cl::opt<bool> printStats("stats",
                                cl::desc("Print the cache's hit counts"),
                                cl::sub(putCommand), cl::sub(getCommand));

static int fail(const llvm::Twine &message) {
  llvm::errs() << "fa3-cache: error: " << message << "\n";
  return 1;
}

static int fail(llvm::Error err) {
  return fail(llvm::toString(std::move(err)));
}

static std::string readFile(StringRef path, std::string &error) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    error = "cannot read '" + path.str() + "': " + buffer.getError().message();
    return "";
  }
  return (*buffer)->getBuffer().str();
}

static void reportStats(const KernelCache &cache) {
  if (!printStats)
    return;
  KernelCacheStats stats = cache.getStats();
  llvm::outs() << "stats: memory-hits=" << stats.memoryHits
               << " disk-hits=" << stats.diskHits << " misses=" << stats.misses
               << " corrupt=" << stats.corruptEntries
               << " stores=" << stats.stores << "\n";
  // Before any error message, which goes to the unbuffered stderr.
  llvm::outs().flush();
}

static int put(KernelCache &cache, StringRef key) {
  std::string error;
  CacheEntry entry;
  entry.blob = readFile(blobFile, error);
  if (!error.empty())
    return fail(error);
  for (StringRef setting : manifestEntries) {
    auto [name, value] = setting.split('=');
    if (name.size() == setting.size())
      return fail("--set=" + setting + ": expected NAME=VALUE");
    entry.manifest[name.str()] = value.str();
  }
  if (llvm::Error err = cache.put(key, std::move(entry)))
    return fail(std::move(err));
  for (StringRef extra : extraFiles) {
    std::string text = readFile(extra, error);
    if (!error.empty())
      return fail(error);
    if (llvm::Error err =
            cache.putExtra(key, llvm::sys::path::filename(extra), text))
      return fail(std::move(err));
  }
  llvm::outs() << "stored " << key << " in " << cache.getEntryDirectory(key)
               << "\n";
  reportStats(cache);
  return 0;
}

static int get(KernelCache &cache, StringRef key) {
  std::string missReason;
  std::shared_ptr<const CacheEntry> entry = cache.lookup(key, &missReason);
  if (!entry) {
    reportStats(cache);
    return fail("cache miss: " + missReason);
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(outFile, ec);
  if (ec)
    return fail("cannot write '" + outFile + "': " + ec.message());
  os << entry->blob;
  os.close();
  if (os.has_error()) {
    ec = os.error();
    os.clear_error();
    return fail("cannot write '" + outFile + "': " + ec.message());
  }
  for (const auto &[name, value] : entry->manifest)
    llvm::outs() << name << "=" << value << "\n";
  reportStats(cache);
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  cl::ParseCommandLineOptions(argc, argv,
                              "fa3-cache: the fa3 kernel cache, by hand\n");

  KernelCache cache(KernelCache::getDefaultDirectory());
  if (pathCommand) {
    if (cache.getDirectory().empty())
      return fail("no cache directory: set FA3_CACHE_DIR, XDG_CACHE_HOME or "
                  "HOME");
    llvm::outs() << cache.getDirectory() << "\n";
    return 0;
  }
  if (!putCommand && !getCommand && !keyCommand)
    return fail("expected a subcommand: put, get, key or path (see --help)");

  std::string key = KernelCache::computeKey(keyParts);
  if (keyCommand) {
    llvm::outs() << key << "\n";
    return 0;
  }
  if (cache.getDirectory().empty())
    return fail("no cache directory: set FA3_CACHE_DIR, XDG_CACHE_HOME or "
                "HOME");
  return putCommand ? put(cache, key) : get(cache, key);
}
