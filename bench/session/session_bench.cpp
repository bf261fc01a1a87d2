// session_bench: what a durable turn costs the embedded session store.
// Appends turns (a user message and an answer of --payload bytes) to
// --sessions sessions, one writer per --threads, every append synced, and
// prints the append latency P50/P99/max and the write amplification: bytes
// the process wrote to the block device (/proc/self/io write_bytes, WAL,
// flushes and compactions included, measured to after the store closed)
// per payload byte (the turns' messages).
//
//   session_bench --dir /var/tmp/sb --turns 5000 --payload 1000
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "session/rocks_store.h"

namespace {

// write_bytes of /proc/self/io: what this process caused to be written to storage.
long long WriteBytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  long long v = 0;
  while (io >> key >> v) {
    if (key == "write_bytes:") return v;
  }
  return -1;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"session_bench: append latency and write amplification of the session store"};
  std::string dir;
  int turns = 5000;
  int payload = 1000;
  int sessions = 64;
  int threads = 1;
  bool no_sync = false;
  app.add_option("--dir", dir, "scratch directory (removed first and after)")->required();
  app.add_option("--turns", turns, "turns to append in all")->check(CLI::Range(1, 10000000));
  app.add_option("--payload", payload, "bytes of each turn's answer")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--sessions", sessions, "sessions the turns go to, round robin")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--threads", threads, "concurrent writers")->check(CLI::Range(1, 256));
  app.add_flag("--no-sync", no_sync, "do not fsync each turn (what the sync costs)");
  CLI11_PARSE(app, argc, argv);

  std::filesystem::remove_all(dir);
  strata::session::RocksStoreOptions options{.dir = dir};
  options.sync = !no_sync;
  options.limits.max_turns = 1000000;
  options.limits.max_bytes = 1ull << 32;
  const long long written0 = WriteBytes();
  auto store = strata::session::OpenRocksStore(options);
  if (!store.ok()) {
    std::fprintf(stderr, "session_bench: %s\n", store.status().ToString().c_str());
    return 1;
  }
  const std::string user = R"({"role":"user","content":"what is the capital of France?"})";
  const std::string answer =
      R"({"role":"assistant","content":")" + std::string(static_cast<size_t>(payload), 'a') + "\"}";
  std::vector<std::vector<double>> latency(static_cast<size_t>(threads));
  std::vector<int> failures(static_cast<size_t>(threads));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      std::vector<uint64_t> clock(static_cast<size_t>(sessions));
      for (int i = w; i < turns; i += threads) {
        // Each writer owns the sessions congruent to it, so no writer waits
        // on another's dependency.
        const int s = (i / threads) % std::max(1, sessions / threads) * threads + w;
        const auto a = std::chrono::steady_clock::now();
        auto t = (*store)->Append({.tenant = "bench",
                                   .session_id = "s" + std::to_string(s % sessions),
                                   .depends_on = clock[static_cast<size_t>(s % sessions)],
                                   .expected_turns = std::nullopt,
                                   .writer = "w" + std::to_string(i),
                                   .op_id = "",
                                   .messages = {user, answer},
                                   .tokens = {}});
        latency[static_cast<size_t>(w)].push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a)
                .count());
        if (t.ok()) {
          clock[static_cast<size_t>(s % sessions)] = t->clock;
        } else {
          ++failures[static_cast<size_t>(w)];
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  store->reset();  // flushes what RocksDB flushes at close
  const long long written = WriteBytes() - written0;
  std::vector<double> all;
  int failed = 0;
  for (size_t w = 0; w < latency.size(); ++w) {
    all.insert(all.end(), latency[w].begin(), latency[w].end());
    failed += failures[w];
  }
  const double payload_bytes =
      static_cast<double>(turns) * static_cast<double>(user.size() + answer.size());
  std::printf(
      "turns %d  payload %d B  sessions %d  threads %d  sync %s\n"
      "append latency  P50 %.1f us  P99 %.1f us  max %.1f us  (%.0f turns/s)\n"
      "written to disk %lld B for %.0f B of messages: write amplification %.2fx\n"
      "failed appends %d\n",
      turns, payload, sessions, threads, no_sync ? "off" : "on", Quantile(all, 0.50),
      Quantile(all, 0.99), Quantile(all, 1.0), static_cast<double>(turns) / seconds, written,
      payload_bytes, static_cast<double>(written) / payload_bytes, failed);
  std::filesystem::remove_all(dir);
  return failed == 0 ? 0 : 1;
}
