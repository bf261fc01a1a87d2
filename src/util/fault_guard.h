// util/fault_guard.h — surviving the file under a read-only mapping being
// truncated.
//
// Promise: a read of a registered range whose file no longer has the page
// (the file was truncated, or rewritten shorter, under the mapping) does not
// kill the process with SIGBUS: the pages from the faulting one to the end of
// the range are replaced by zero pages, the read completes (with zeros), and
// faulted() turns true, so the owner can fail the work that read them and
// refuse more. A SIGBUS anywhere else goes to the handler that was there
// before (or the default: the process dies as it would have).
//
// Process-wide by nature: a signal handler is. This is strata's one piece of
// global state besides what main() owns — a fixed table of ranges with atomic
// slots, read lock-free by the handler, installed once on first use.
//
// Threading: Register and destruction from any thread; faulted() from any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace strata::util {

class MappedRangeGuard {
 public:
  // Watches [data, data + size) until the guard is destroyed (destroy it
  // before unmapping). nullptr when every slot is taken (64 ranges) or the
  // handler cannot be installed: the range is then unguarded.
  static std::unique_ptr<MappedRangeGuard> Register(const void* data, size_t size);
  ~MappedRangeGuard();
  MappedRangeGuard(const MappedRangeGuard&) = delete;
  MappedRangeGuard& operator=(const MappedRangeGuard&) = delete;

  // A read hit a page the file no longer has; what was read there is zeros.
  bool faulted() const;

 private:
  explicit MappedRangeGuard(int slot) : slot_(slot) {}
  const int slot_;
};

}  // namespace strata::util
