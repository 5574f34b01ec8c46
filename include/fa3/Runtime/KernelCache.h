//===- KernelCache.h - In-memory and on-disk cache of kernels ---*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// Compiled kernels keyed by a SHA-256 of everything that determines them (the
// spec, the schedule, the fa3 version, the SM architecture, the ptxas
// version). A thread-safe in-memory map sits in front of a directory:
//
//   $FA3_CACHE_DIR | $XDG_CACHE_HOME/fa3 | $HOME/.cache/fa3
//     <key>/kernel.bin      the cubin or PTX
//     <key>/manifest.txt    key=value lines, the blob's size and SHA-256 last
//     <key>/<extra files>   e.g. each stage's IR under FA3_DUMP_IR=1
//
// Every file is written to a unique temporary file in the entry's directory,
// fsync'ed and renamed into place, so readers never see a partial file. The
// manifest is written last and records the blob's length and hash, so an
// entry whose blob is missing, truncated or altered reads as a miss and is
// rewritten by the next put.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_RUNTIME_KERNELCACHE_H
#define FA3_RUNTIME_KERNELCACHE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace fa3::runtime {

/// A cached kernel: its binary and the manifest the launcher needs (kernel
/// name, block size, dynamic shared memory, grid rule, ...).
struct CacheEntry {
  std::string blob;
  std::map<std::string, std::string> manifest;
};

/// Lookup and store counts, for tests and FA3 debug output.
struct KernelCacheStats {
  uint64_t memoryHits = 0;
  uint64_t diskHits = 0;
  uint64_t misses = 0;
  /// Misses on an entry that exists on disk but failed verification.
  uint64_t corruptEntries = 0;
  uint64_t stores = 0;
};

class KernelCache {
public:
  /// A cache in `directory`; an empty `directory` keeps entries in memory
  /// only. The directory is created on the first store.
  explicit KernelCache(std::string directory);

  /// $FA3_CACHE_DIR, else $XDG_CACHE_HOME/fa3, else $HOME/.cache/fa3; empty
  /// when none of them is set.
  static std::string getDefaultDirectory();

  /// The process-wide cache in getDefaultDirectory().
  static KernelCache &getGlobal();

  /// Identifies the fa3 build that compiles kernels, so that a rebuilt
  /// compiler with the same FA3_VERSION does not reuse its predecessor's
  /// entries: the path, size and modification time of the binary this code
  /// was linked into (the shared library or the executable).
  static const std::string &getBuildId();

  /// Lower-case hex SHA-256 of `parts`, each length-prefixed so that
  /// {"ab", "c"} and {"a", "bc"} differ.
  static std::string computeKey(llvm::ArrayRef<std::string> parts);

  llvm::StringRef getDirectory() const { return directory; }
  /// The directory holding `key`'s files ("" for a memory-only cache).
  std::string getEntryDirectory(llvm::StringRef key) const;

  /// The entry for `key`, from memory or else from disk; null on a miss.
  /// When `missReason` is given, a miss sets it to why (no entry, or what
  /// was wrong with the one on disk).
  std::shared_ptr<const CacheEntry> lookup(llvm::StringRef key,
                                           std::string *missReason = nullptr);

  /// Stores `entry` under `key`, in memory and then on disk. The memory
  /// level keeps it even when the disk write fails and the error says why.
  /// Manifest keys may not hold '=', a newline or start with "fa3.cache.",
  /// and values may not hold a newline.
  llvm::Error put(llvm::StringRef key, CacheEntry entry);

  /// Writes `text` to the file `fileName` (a plain name, no directories) in
  /// `key`'s entry directory, e.g. the IR of one pipeline stage.
  llvm::Error putExtra(llvm::StringRef key, llvm::StringRef fileName,
                       llvm::StringRef text);

  /// Forgets the in-memory level (the disk is left alone).
  void clearMemory();

  KernelCacheStats getStats() const;

private:
  std::string directory;
  mutable std::mutex mutex;
  llvm::StringMap<std::shared_ptr<const CacheEntry>> entries;
  KernelCacheStats stats;
};

} // namespace fa3::runtime

#endif // FA3_RUNTIME_KERNELCACHE_H
