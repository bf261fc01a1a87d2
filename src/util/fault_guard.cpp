#include "util/fault_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <mutex>

namespace strata::util {
namespace {

constexpr int kSlots = 64;

struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0: free
  std::atomic<uintptr_t> end{0};    // 0 while being set up or torn down
  std::atomic<bool> faulted{false};
};

// The handler's state (see the header: the process-wide exception).
struct GuardState {
  std::array<Slot, kSlots> slots;
  struct sigaction previous {};
  uintptr_t page_size = 4096;
  std::once_flag installed;
  bool ok = false;
};

GuardState& State() {
  static GuardState state;  // constructed before the handler is installed
  return state;
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  GuardState& st = State();
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : st.slots) {
    const uintptr_t begin = s.begin.load(std::memory_order_acquire);
    const uintptr_t end = s.end.load(std::memory_order_acquire);
    if (begin == 0 || end == 0 || addr < begin || addr >= end) continue;
    // Zero pages over the rest of the range: one signal per truncation
    // rather than one per page. mmap is a plain system call here (Linux),
    // safe in a handler.
    const uintptr_t page = addr & ~(st.page_size - 1);
    const uintptr_t last = (end + st.page_size - 1) & ~(st.page_size - 1);
    void* r = ::mmap(reinterpret_cast<void*>(page), last - page, PROT_READ,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (r != MAP_FAILED) {
      s.faulted.store(true, std::memory_order_release);
      return;  // the read is retried, and reads zeros
    }
    break;
  }
  // Not ours: whatever handled SIGBUS before.
  const struct sigaction& prev = st.previous;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
    return;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

bool Install() {
  GuardState& st = State();
  std::call_once(st.installed, [&st] {
    const long ps = ::sysconf(_SC_PAGESIZE);
    if (ps > 0) st.page_size = static_cast<uintptr_t>(ps);
    struct sigaction sa {};
    sa.sa_sigaction = &OnSigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    st.ok = ::sigaction(SIGBUS, &sa, &st.previous) == 0;
  });
  return st.ok;
}

}  // namespace

std::unique_ptr<MappedRangeGuard> MappedRangeGuard::Register(const void* data, size_t size) {
  if (data == nullptr || size == 0 || !Install()) return nullptr;
  GuardState& st = State();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  for (int i = 0; i < kSlots; ++i) {
    uintptr_t expected = 0;
    if (st.slots[static_cast<size_t>(i)].begin.compare_exchange_strong(expected, begin)) {
      Slot& s = st.slots[static_cast<size_t>(i)];
      s.faulted.store(false);
      s.end.store(begin + size, std::memory_order_release);
      return std::unique_ptr<MappedRangeGuard>(new MappedRangeGuard(i));
    }
  }
  return nullptr;
}

MappedRangeGuard::~MappedRangeGuard() {
  Slot& s = State().slots[static_cast<size_t>(slot_)];
  s.end.store(0, std::memory_order_release);
  s.begin.store(0, std::memory_order_release);
}

bool MappedRangeGuard::faulted() const {
  return State().slots[static_cast<size_t>(slot_)].faulted.load(std::memory_order_acquire);
}

}  // namespace strata::util
