//===- KernelCache.cpp - In-memory and on-disk cache of kernels -----------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Runtime/KernelCache.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

using namespace fa3::runtime;
using llvm::Error;
using llvm::StringRef;
namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

static constexpr StringRef kBlobFile = "kernel.bin";
static constexpr StringRef kManifestFile = "manifest.txt";
static constexpr StringRef kManifestHeader = "# fa3 kernel cache entry v1";
/// Manifest keys the cache itself writes; callers may not use the prefix.
static constexpr StringRef kReservedPrefix = "fa3.cache.";
static constexpr StringRef kBlobSizeKey = "fa3.cache.blob-size";
static constexpr StringRef kBlobHashKey = "fa3.cache.blob-sha256";

static Error invalidArgument(const llvm::Twine &message) {
  return llvm::createStringError(
      std::make_error_code(std::errc::invalid_argument), message);
}

static std::string sha256Hex(StringRef data) {
  return llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(data)),
                     /*LowerCase=*/true);
}

/// Keys name directories: letters, digits, '.', '_' and '-', not starting
/// with '.' (which also rules out "." and "..").
static bool isValidKey(StringRef key) {
  return !key.empty() && !key.starts_with(".") && llvm::all_of(key, [](char c) {
    return llvm::isAlnum(c) || c == '.' || c == '_' || c == '-';
  });
}

KernelCache::KernelCache(std::string directory)
    : directory(std::move(directory)) {}

std::string KernelCache::getDefaultDirectory() {
  auto env = [](const char *name) -> StringRef {
    const char *value = std::getenv(name);
    return value ? StringRef(value) : StringRef();
  };
  if (StringRef dir = env("FA3_CACHE_DIR"); !dir.empty())
    return dir.str();
  llvm::SmallString<256> dir;
  if (StringRef xdg = env("XDG_CACHE_HOME"); !xdg.empty()) {
    path::append(dir, xdg, "fa3");
    return dir.str().str();
  }
  if (StringRef home = env("HOME"); !home.empty()) {
    path::append(dir, home, ".cache", "fa3");
    return dir.str().str();
  }
  return "";
}

KernelCache &KernelCache::getGlobal() {
  static KernelCache cache(getDefaultDirectory());
  return cache;
}

const std::string &KernelCache::getBuildId() {
  static const std::string id = [] {
    // The object file holding this function: libfa3.so, libFA3CAPI.so or an
    // executable that links fa3 statically.
    Dl_info info;
    if (!dladdr(reinterpret_cast<void *>(&KernelCache::getBuildId), &info) ||
        !info.dli_fname)
      return std::string("unknown-build");
    llvm::sys::fs::file_status status;
    if (llvm::sys::fs::status(info.dli_fname, status))
      return std::string(info.dli_fname);
    return std::string(info.dli_fname) + ":" +
           std::to_string(status.getSize()) + ":" +
           std::to_string(llvm::sys::toTimeT(status.getLastModificationTime()));
  }();
  return id;
}

std::string KernelCache::computeKey(llvm::ArrayRef<std::string> parts) {
  llvm::SHA256 hasher;
  for (const std::string &part : parts) {
    uint8_t length[8];
    for (int i = 0; i < 8; ++i)
      length[i] = static_cast<uint8_t>(uint64_t(part.size()) >> (8 * i));
    hasher.update(llvm::ArrayRef<uint8_t>(length));
    hasher.update(StringRef(part));
  }
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

std::string KernelCache::getEntryDirectory(StringRef key) const {
  if (directory.empty())
    return "";
  llvm::SmallString<256> dir(directory);
  path::append(dir, key);
  return dir.str().str();
}

KernelCacheStats KernelCache::getStats() const {
  std::lock_guard<std::mutex> lock(mutex);
  return stats;
}

void KernelCache::clearMemory() {
  std::lock_guard<std::mutex> lock(mutex);
  entries.clear();
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {
struct DiskRead {
  std::shared_ptr<const CacheEntry> entry;
  std::string missReason;
  bool corrupt = false;
};
} // namespace

static DiskRead readEntry(StringRef entryDir, StringRef key) {
  DiskRead read;
  auto corrupt = [&](const llvm::Twine &why) {
    read.corrupt = true;
    read.missReason =
        ("cache entry " + key + " in " + entryDir + " is corrupt: " + why)
            .str();
    return std::move(read);
  };

  llvm::SmallString<256> manifestPath(entryDir), blobPath(entryDir);
  path::append(manifestPath, kManifestFile);
  path::append(blobPath, kBlobFile);
  auto manifestBuffer = llvm::MemoryBuffer::getFile(
      manifestPath, /*IsText=*/true, /*RequiresNullTerminator=*/false);
  if (!manifestBuffer) {
    // Without a manifest the entry was never completed: a plain miss.
    read.missReason =
        ("no cache entry for key " + key + " in " + path::parent_path(entryDir))
            .str();
    return read;
  }

  auto entry = std::make_shared<CacheEntry>();
  std::string blobSize, blobHash;
  llvm::SmallVector<StringRef> lines;
  (*manifestBuffer)->getBuffer().split(lines, '\n', -1, /*KeepEmpty=*/false);
  if (lines.empty() || lines.front().rtrim() != kManifestHeader)
    return corrupt(kManifestFile + " lacks the '" + kManifestHeader +
                   "' header");
  for (StringRef line : llvm::drop_begin(lines)) {
    line = line.rtrim("\r");
    if (line.empty() || line.starts_with("#"))
      continue;
    auto [name, value] = line.split('=');
    if (name.empty() || name.size() == line.size())
      return corrupt(kManifestFile + " has a malformed line '" + line + "'");
    if (name == kBlobSizeKey)
      blobSize = value.str();
    else if (name == kBlobHashKey)
      blobHash = value.str();
    else
      entry->manifest[name.str()] = value.str();
  }
  uint64_t expectedSize = 0;
  if (blobSize.empty() || blobHash.empty() ||
      StringRef(blobSize).getAsInteger(10, expectedSize))
    return corrupt(kManifestFile + " lacks a valid " + kBlobSizeKey + " or " +
                   kBlobHashKey);

  auto blobBuffer = llvm::MemoryBuffer::getFile(
      blobPath, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!blobBuffer)
    return corrupt("cannot read " + kBlobFile + ": " +
                   blobBuffer.getError().message());
  StringRef blob = (*blobBuffer)->getBuffer();
  if (blob.size() != expectedSize)
    return corrupt(kBlobFile + " has " + llvm::Twine(blob.size()) +
                   " bytes; the manifest records " + llvm::Twine(expectedSize));
  if (sha256Hex(blob) != blobHash)
    return corrupt(kBlobFile + "'s SHA-256 differs from the manifest's");
  entry->blob = blob.str();
  read.entry = std::move(entry);
  return read;
}

std::shared_ptr<const CacheEntry> KernelCache::lookup(StringRef key,
                                                      std::string *missReason) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = entries.find(key);
    if (it != entries.end()) {
      ++stats.memoryHits;
      return it->second;
    }
  }

  DiskRead read;
  if (!isValidKey(key))
    read.missReason = ("'" + key + "' is not a valid cache key").str();
  else if (directory.empty())
    read.missReason =
        ("no cache entry for key " + key + " (the cache has no directory)")
            .str();
  else
    read = readEntry(getEntryDirectory(key), key);

  std::lock_guard<std::mutex> lock(mutex);
  if (!read.entry) {
    ++stats.misses;
    if (read.corrupt)
      ++stats.corruptEntries;
    if (missReason)
      *missReason = std::move(read.missReason);
    return nullptr;
  }
  ++stats.diskHits;
  // Another thread may have stored or read the same key meanwhile; both
  // copies hold the same kernel, and the first one wins.
  return entries.try_emplace(key, std::move(read.entry)).first->second;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

/// Writes `dir`/`fileName` through a unique temporary file in `dir`, fsync
/// and rename, so that no reader ever sees part of it.
static Error writeFileAtomically(StringRef dir, StringRef fileName,
                                 StringRef contents) {
  llvm::SmallString<256> model(dir), tmpPath, finalPath(dir);
  path::append(model, "." + fileName + ".tmp-%%%%%%%%%%%%");
  path::append(finalPath, fileName);
  int fd = -1;
  if (std::error_code ec = fs::createUniqueFile(model, fd, tmpPath))
    return llvm::createStringError(ec,
                                   "cannot create a temporary file in '%s': %s",
                                   dir.str().c_str(), ec.message().c_str());

  auto failed = [&](const char *what, std::error_code ec) {
    fs::remove(tmpPath);
    return llvm::createStringError(ec, "cannot %s '%s': %s", what,
                                   tmpPath.c_str(), ec.message().c_str());
  };
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << contents;
    os.flush();
    // Without the fsync a crash after the rename could leave a renamed but
    // empty file behind.
    std::error_code syncError;
    if (!os.has_error() && ::fsync(fd) != 0)
      syncError = std::error_code(errno, std::generic_category());
    os.close();
    std::error_code ec = os.has_error() ? os.error() : syncError;
    os.clear_error();
    if (ec)
      return failed("write", ec);
  }
  if (std::error_code ec = fs::rename(tmpPath, finalPath))
    return failed("rename into place", ec);
  return Error::success();
}

Error KernelCache::put(StringRef key, CacheEntry entry) {
  if (!isValidKey(key))
    return invalidArgument("'" + key + "' is not a valid cache key");
  std::string manifest = kManifestHeader.str() + "\n";
  for (const auto &[name, value] : entry.manifest) {
    StringRef n(name), v(value);
    if (n.empty() || n.contains('=') || n.contains('\n') ||
        n.starts_with("#") || n.starts_with(kReservedPrefix))
      return invalidArgument("cannot cache manifest key '" + n +
                             "': keys may not be empty, contain '=' or a "
                             "newline, or start with '#' or '" +
                             kReservedPrefix + "'");
    if (v.contains('\n') || v.contains('\r'))
      return invalidArgument("cannot cache the value of manifest key '" + n +
                             "': it holds a line break");
    manifest += name + "=" + value + "\n";
  }
  manifest += (kBlobSizeKey + "=" + llvm::Twine(entry.blob.size()) + "\n" +
               kBlobHashKey + "=" + sha256Hex(entry.blob) + "\n")
                  .str();

  auto shared = std::make_shared<const CacheEntry>(std::move(entry));
  {
    std::lock_guard<std::mutex> lock(mutex);
    entries[key] = shared;
    ++stats.stores;
  }
  if (directory.empty())
    return Error::success();

  std::string entryDir = getEntryDirectory(key);
  if (std::error_code ec = fs::create_directories(entryDir))
    return llvm::createStringError(
        ec, "cannot create the kernel cache directory '%s': %s",
        entryDir.c_str(), ec.message().c_str());
  // The manifest goes last: it is what makes the entry visible.
  if (Error err = writeFileAtomically(entryDir, kBlobFile, shared->blob))
    return err;
  return writeFileAtomically(entryDir, kManifestFile, manifest);
}

Error KernelCache::putExtra(StringRef key, StringRef fileName, StringRef text) {
  if (!isValidKey(key))
    return invalidArgument("'" + key + "' is not a valid cache key");
  if (fileName.empty() || fileName.starts_with(".") ||
      fileName.find_first_of("/\\") != StringRef::npos ||
      fileName == kBlobFile || fileName == kManifestFile)
    return invalidArgument("cannot store '" + fileName +
                           "' in a cache entry: extra files need a plain "
                           "name, not starting with '.', other than " +
                           kBlobFile + " and " + kManifestFile);
  if (directory.empty())
    return invalidArgument("cannot store '" + fileName +
                           "': the kernel cache has no directory");
  std::string entryDir = getEntryDirectory(key);
  if (std::error_code ec = fs::create_directories(entryDir))
    return llvm::createStringError(
        ec, "cannot create the kernel cache directory '%s': %s",
        entryDir.c_str(), ec.message().c_str());
  return writeFileAtomically(entryDir, fileName, text);
}
