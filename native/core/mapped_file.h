#pragma once
// Read-only memory mapping of a whole file (RAII). Weights whose dtype already fits are used in place.
#include <cstddef>
#include <string>

namespace lumen {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws std::runtime_error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return static_cast<const unsigned char*>(addr_); }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the whole pages of [p, p + n) from this process's resident set when that range lies in
  // this mapping (a later read faults them back in from the file; the mapping is read-only, so
  // nothing is lost). Returns whether the range was in the mapping. Best effort.
  bool release(const void* p, size_t n) const;

 private:
  std::string path_;
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace lumen
