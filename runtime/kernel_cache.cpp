// runtime/kernel_cache.cpp — memory map and on-disk binaries (see kernel_cache.h).
//
// File layout (all integers little-endian):
//   magic[8] "FDKCACHE" | u32 format version | u32 n + backend | u32 n + toolchain |
//   u32 n + device | u32 n + features | u32 n + build | u64 n + key_text | u64 object length |
//   u64 hash(object) | object bytes
// The file must end exactly after the object; anything else is a rejection.
#include "runtime/kernel_cache.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>


namespace fastdyn::runtime {
namespace {

constexpr uint64_t kMaxFileBytes = uint64_t(1) << 30;  // a kernel object is KBs; refuse nonsense

// FNV-1a over the bytes, then a splitmix64 finish: names files and checksums objects. Collisions
// cost nothing but a miss (every file repeats its whole key), so 64 bits of a fast hash do.
// NB: not c10::sha1: its str() formats through an ostringstream, and iostreams crash where the
// process's libstdc++ is older than the one fastdyn was built against (runtime/format.h).
uint64_t hash_bytes(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  h += 0x9e3779b97f4a7c15ull;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

// Bounds-checked reader over a file image: every get fails (returns false) past the end.
struct Reader {
  const std::string& data;
  size_t pos = 0;
  bool get_u32(uint32_t& v) {
    if (data.size() - pos < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(data[pos + i])) << (8 * i);
    pos += 4;
    return true;
  }
  bool get_u64(uint64_t& v) {
    if (data.size() - pos < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(data[pos + i])) << (8 * i);
    pos += 8;
    return true;
  }
  bool get_bytes(uint64_t n, std::string& out) {
    if (data.size() - pos < n) return false;
    out.assign(data, pos, n);
    pos += n;
    return true;
  }
  // Reads a string prefixed by its length (a u32 or a u64) and compares it with `expected`.
  bool expect_string(int length_bytes, const std::string& expected) {
    uint64_t n = 0;
    uint32_t n32 = 0;
    bool ok = length_bytes == 4 ? (get_u32(n32) && ((n = n32), true)) : get_u64(n);
    if (!ok || n != expected.size() || data.size() - pos < n) return false;
    bool same = data.compare(pos, n, expected) == 0;
    pos += n;
    return same;
  }
};

bool make_dirs(const std::string& path) {
  if (path.empty()) return false;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0 && !make_dirs(path.substr(0, slash))) return false;
  return ::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST;
}

bool read_whole_file(const std::string& path, std::string& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && uint64_t(st.st_size) <= kMaxFileBytes;
  if (ok) {
    out.resize(size_t(st.st_size));
    size_t done = 0;
    while (done < out.size()) {
      ssize_t r = ::read(fd, &out[done], out.size() - done);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      done += size_t(r);
    }
    out.resize(done);  // a file that shrank under us is then rejected by the length checks
  }
  ::close(fd);
  return ok;
}

bool write_whole_fd(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += size_t(w);
  }
  return true;
}

}  // namespace

KernelCache::KernelCache(TargetIdentity target) : target_(std::move(target)) {}

KernelCache::Entry* KernelCache::find_memory(const std::string& key_text) {
  auto it = memory_.find(key_text);
  if (it == memory_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.pos);
  return &it->second.entry;
}

KernelCache::Entry& KernelCache::insert_memory(const std::string& key_text, Entry entry, std::vector<Entry>* evicted) {
  auto it = memory_.find(key_text);
  if (it != memory_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.pos);
    it->second.entry = std::move(entry);
  } else {
    lru_.push_front(key_text);
    it = memory_.emplace(key_text, Slot{std::move(entry), lru_.begin()}).first;
  }
  while (memory_.size() > memory_bound_) {
    auto victim = memory_.find(lru_.back());
    lru_.pop_back();
    if (evicted) evicted->push_back(std::move(victim->second.entry));
    memory_.erase(victim);
    ++stats_.memory_evictions;
  }
  return it->second.entry;
}

std::vector<KernelCache::Entry> KernelCache::clear_memory() {
  std::vector<Entry> entries;
  for (auto& kv : memory_) entries.push_back(std::move(kv.second.entry));
  memory_.clear();
  lru_.clear();
  records_.clear();
  return entries;
}

std::string KernelCache::dir() {
  const char* env = std::getenv("FASTDYN_CACHE_DIR");
  std::string seen = env ? std::string(env) : std::string("\x01unset");
  if (dir_resolved_ && seen == env_seen_) return dir_;
  env_seen_ = seen;
  dir_resolved_ = true;
  std::string wanted;
  if (env && *env) {
    wanted = std::string(env) == "off" ? "" : std::string(env);
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    wanted = std::string(home) + "/.cache/fastdyn";
  }
  while (wanted.size() > 1 && wanted.back() == '/') wanted.pop_back();
  // NB: a directory we cannot create means no disk cache; one we cannot write to still serves
  // reads (a shared read-only cache), and writes then fail quietly.
  dir_ = (!wanted.empty() && make_dirs(wanted)) ? wanted : "";
  return dir_;
}

std::string KernelCache::file_path(const std::string& key_text, const char* suffix) {
  std::string d = dir();
  if (d.empty()) return "";
  std::string ident;
  put_u32(ident, kFormatVersion);
  const TargetIdentity& t = target_;
  for (const std::string* s : {&t.backend, &t.toolchain, &t.device, &t.features, &t.build, &key_text}) {
    put_u64(ident, s->size());
    ident += *s;
  }
  char name[40];
  std::snprintf(name, sizeof name, "/%016llx%s", static_cast<unsigned long long>(hash_bytes(ident)), suffix);
  return d + name;
}

std::string KernelCache::encode_file(const std::string& key_text, const std::string& object) const {
  std::string out(kMagic, sizeof kMagic);
  put_u32(out, kFormatVersion);
  for (const std::string* s : {&target_.backend, &target_.toolchain, &target_.device, &target_.features, &target_.build}) {
    put_u32(out, uint32_t(s->size()));
    out += *s;
  }
  put_u64(out, key_text.size());
  out += key_text;
  put_u64(out, object.size());
  put_u64(out, hash_bytes(object));
  out += object;
  return out;
}

std::optional<std::string> KernelCache::decode_file(const std::string& file, const std::string& key_text) const {
  Reader r{file};
  std::string magic, object;
  uint32_t version = 0;
  uint64_t object_size = 0, checksum = 0;
  bool ok = r.get_bytes(sizeof kMagic, magic) && magic == std::string(kMagic, sizeof kMagic) &&
            r.get_u32(version) && version == kFormatVersion &&
            r.expect_string(4, target_.backend) && r.expect_string(4, target_.toolchain) &&
            r.expect_string(4, target_.device) && r.expect_string(4, target_.features) &&
            r.expect_string(4, target_.build) &&
            r.expect_string(8, key_text) &&
            r.get_u64(object_size) && r.get_u64(checksum) && object_size == file.size() - r.pos &&
            r.get_bytes(object_size, object) && hash_bytes(object) == checksum;
  if (!ok) return std::nullopt;
  return object;
}

std::optional<std::string> KernelCache::read_object(const std::string& key_text) {
  std::string path = file_path(key_text);
  std::string file;
  if (path.empty() || !read_whole_file(path, file)) return std::nullopt;
  std::optional<std::string> object = decode_file(file, key_text);
  if (!object) ++stats_.rejected_files;
  return object;
}

bool KernelCache::write_object(const std::string& key_text, const std::string& object) {
  return write_file(file_path(key_text), key_text, object);
}

bool KernelCache::has_record(const std::string& key_text) {
  const std::string path = file_path(key_text, ".prog");
  if (path.empty()) return false;
  auto known = records_.find(path);
  if (known != records_.end()) return known->second;
  std::string file;
  const bool present = read_whole_file(path, file) && decode_file(file, key_text).has_value();
  records_.emplace(path, present);
  return present;
}

bool KernelCache::write_record(const std::string& key_text) {
  const std::string path = file_path(key_text, ".prog");
  if (path.empty()) return false;
  bool& present = records_[path];
  if (!present) present = write_file(path, key_text, "");
  return present;
}

bool KernelCache::write_file(const std::string& path, const std::string& key_text, const std::string& object) {
  if (path.empty()) return false;
  std::string temp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++temp_counter_);
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = write_whole_fd(fd, encode_file(key_text, object));
  ok = (::close(fd) == 0) && ok;
  // NB: no fsync: after a crash a file may be empty or short, which read_object rejects anyway.
  if (ok && ::rename(temp.c_str(), path.c_str()) == 0) return true;
  ::unlink(temp.c_str());
  return false;
}

// Size and modification time of the file that holds this code (a shared library, or the
// executable it is linked into).
std::string binary_identity() {
  Dl_info info{};
  struct stat st {};
  const char* path = ::dladdr(reinterpret_cast<void*>(&binary_identity), &info) && info.dli_fname
                         ? info.dli_fname : "/proc/self/exe";
  if (::stat(path, &st) != 0 && ::stat("/proc/self/exe", &st) != 0) return "";
  return std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}


}  // namespace fastdyn::runtime
