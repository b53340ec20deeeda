// runtime/kernel_cache.h — the kernel cache of a backend that compiles kernels: compiled kernels
// in memory, their binaries on disk.
//
// Layer: runtime/ (no compiler, ATen or Python types here), so that every backend that builds
// binaries uses the one cache and the file format is tested on its own. A backend's engine (the
// llvm_cpu JIT, codegen/llvm/jit_engine.cpp) owns loading and linking; this class owns bytes and
// bookkeeping, keyed by the backend's own key text and a target identity that says whom a binary
// is valid for:
// - memory: key_text -> an opaque handle of the loaded binary (llvm_cpu: its JITDylib) and the
//   addresses looked up in it so far; bounded (memory_bound entries, least recently used evicted first).
//   An entry's `hold` keeps its module linked: the cache holds one, and so does every executable
//   that calls the kernel, so an evicted kernel stays callable until its last user lets go;
// - disk: one file per key, `<dir>/<16 hex digits>.o`, whose name hashes the key together with
//   the target identity (format version, backend, toolchain version, device and its features,
//   fastdyn build).
//   The file repeats
//   all of that in its header, plus the object's length and checksum; read_object() checks every
//   field and hands out the object only if all match, so a hash collision, a truncated or
//   corrupted file, or a file written for another device or toolchain is rejected (counted in
//   rejected_files), never trusted.
// - records: `<dir>/<16 hex digits>.prog`, the same layout with an empty object, saying that a
//   process built every kernel of a program (record_program in jit_engine.h); a rejected record
//   is just absent, and is not counted in the kernel statistics.
// - Writes go to a temporary file in the same directory and are renamed over the final name, so
//   concurrent processes never see half a file. No disk problem (missing HOME, read-only or full
//   directory, foreign files) ever throws: the cache just stops writing or reading.
// Not thread-safe: the engine calls it under its mutex.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace fastdyn::runtime {

// Who this cache's binaries are valid for; every field is part of the file name's hash and is
// checked in each file's header. Nothing here is one compiler's: llvm_cpu says
// {"llvm_cpu", "19.1.7", "znver4", "+avx2,+fma,..."}, a GPU backend its compiler's version and
// the device's architecture.
struct TargetIdentity {
  std::string backend;    // "llvm_cpu"
  std::string toolchain;  // the compiler's version and options ("19.1.7" + FASTDYN_LLVM_ARGS)
  std::string device;     // the architecture the code is for ("znver4")
  std::string features;   // its optional features ("+avx2,+fma,...", sorted so the text is stable)
  // The fastdyn binary that emits the kernels (size and mtime of the file holding the engine):
  // a rebuilt emitter may compute something else under the same key_text, so its kernels must
  // not be served to it. "" where the binary cannot be identified.
  std::string build;
};

// Statistics for tests and FASTDYN_LOG: how each lookup or compile was answered.
struct CacheStats {
  int64_t memory_hits = 0, disk_hits = 0, compiles = 0, rejected_files = 0;
  int64_t memory_evictions = 0;  // kernels the bounded memory cache let go (FASTDYN_KERNEL_CACHE_SIZE)
};

class KernelCache {
 public:
  static constexpr char kMagic[8] = {'F', 'D', 'K', 'C', 'A', 'C', 'H', 'E'};
  static constexpr uint32_t kFormatVersion = 4;  // 4: FNV-1a/splitmix64 names and checksums

  struct Entry {
    void* handle = nullptr;                           // the engine's loaded binary (llvm_cpu: a JITDylib)
    std::unordered_map<std::string, void*> symbols;   // addresses looked up so far
    std::shared_ptr<void> hold;                       // the module stays linked while one exists
  };
  static constexpr size_t kDefaultMemoryBound = 4096;  // kernels (FASTDYN_KERNEL_CACHE_SIZE)

  explicit KernelCache(TargetIdentity target);

  // Memory. The returned pointer stays valid until the next insert/clear; a hit is the most
  // recently used entry from then on.
  Entry* find_memory(const std::string& key_text);
  // Inserts, then evicts the least recently used entries beyond the bound into *evicted.
  Entry& insert_memory(const std::string& key_text, Entry entry, std::vector<Entry>* evicted);
  // Forgets every entry and returns them (the engine lets their holds go).
  std::vector<Entry> clear_memory();
  void set_memory_bound(size_t entries) { memory_bound_ = entries < 1 ? 1 : entries; }
  size_t memory_bound() const { return memory_bound_; }
  size_t memory_size() const { return memory_.size(); }

  // Disk. The directory is resolved from FASTDYN_CACHE_DIR (else $HOME/.cache/fastdyn; "off"
  // disables it) on each call, so a changed environment takes effect at the next miss.
  std::string dir();
  // "" when the disk cache is off; `suffix` is ".o" for objects, ".prog" for records.
  std::string file_path(const std::string& key_text, const char* suffix = ".o");
  // The verified object bytes for key_text; nullopt if there is no file or it was rejected.
  std::optional<std::string> read_object(const std::string& key_text);
  // Writes atomically; returns false (and leaves nothing behind) if it could not.
  bool write_object(const std::string& key_text, const std::string& object);
  // Records: remembered in memory once written or read, so a process asks the disk once per key.
  bool has_record(const std::string& key_text);
  bool write_record(const std::string& key_text);

  // The bytes write_object() puts on disk, and the check read_object() applies; public for tests.
  std::string encode_file(const std::string& key_text, const std::string& object) const;
  std::optional<std::string> decode_file(const std::string& file, const std::string& key_text) const;

  CacheStats& stats() { return stats_; }
  const TargetIdentity& target() const { return target_; }

 private:
  TargetIdentity target_;
  bool write_file(const std::string& path, const std::string& key_text, const std::string& object);

  struct Slot {
    Entry entry;
    std::list<std::string>::iterator pos;  // in lru_
  };
  std::unordered_map<std::string, Slot> memory_;
  std::list<std::string> lru_;  // most recently used first
  size_t memory_bound_ = kDefaultMemoryBound;
  std::unordered_map<std::string, bool> records_;  // record file path -> present
  CacheStats stats_;
  std::string env_seen_;     // FASTDYN_CACHE_DIR (or "\x01unset") when dir_ was resolved
  std::string dir_;          // "" = off
  bool dir_resolved_ = false;
  uint64_t temp_counter_ = 0;
};

// Size and modification time of the file that holds fastdyn's code (the extension module, or
// the executable it is linked into): TargetIdentity::build for backends whose kernels it emits.
std::string binary_identity();

}  // namespace fastdyn::runtime
