// RAII read-only memory map of a whole file (POSIX mmap, PROT_READ, MAP_PRIVATE). Host only.
// Pages are only read when touched. Another process truncating the file while it is mapped
// makes later reads fault (SIGBUS); nothing in user space can prevent that.
#pragma once
#include <dsv41/core/status.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <span>
#include <string>
#include <system_error>
#include <utility>

namespace dsv41::io {

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~MappedFile() { reset(); }

  // Maps `path` (a regular file). An empty file gives an empty mapping (data() == nullptr).
  static Result<MappedFile> open(const std::string& path) {
    // O_NONBLOCK: opening a FIFO must not hang; it is then refused as not a regular file.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return error(Code::io_error, "cannot open '" + path + "': " + errno_text(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int e = errno;
      ::close(fd);
      return error(Code::io_error, "cannot stat '" + path + "': " + errno_text(e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return error(Code::io_error, "'" + path + "' is not a regular file");
    }
    MappedFile m;
    if (st.st_size <= 0) {
      ::close(fd);
      return Result<MappedFile>(std::move(m));  // nvcc does not move into Result<T> implicitly
    }
    const auto size = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    ::close(fd);  // the mapping keeps its own reference to the file
    if (p == MAP_FAILED) return error(Code::io_error, "cannot mmap '" + path + "': " + errno_text(e));
    m.data_ = static_cast<const std::byte*>(p);
    m.size_ = size;
    return Result<MappedFile>(std::move(m));
  }

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  static std::string errno_text(int e) { return std::generic_category().message(e); }
  void reset() noexcept {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }

  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace dsv41::io
