#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace lumen {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::runtime_error(path + ": cannot stat (" + std::strerror(e) + ")");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    addr_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr_ == MAP_FAILED) {
      const int e = errno;
      addr_ = nullptr;
      ::close(fd);
      throw std::runtime_error(path + ": cannot mmap (" + std::strerror(e) + ")");
    }
  }
  ::close(fd);
}

bool MappedFile::release(const void* p, size_t n) const {
  const auto* b = static_cast<const unsigned char*>(p);
  if (!addr_ || b < data() || n > size_ || b - data() > static_cast<ptrdiff_t>(size_ - n)) return false;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(b) + n) / page * page;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  return true;
}

MappedFile::~MappedFile() {
  if (addr_) ::munmap(addr_, size_);
}

}  // namespace lumen
