#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

MappedFile::~MappedFile() {
  if (addr_) ::munmap(addr_, size_);
}

}  // namespace lumen
