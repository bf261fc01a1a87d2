// session_bench: what a durable turn costs a session store.
// Appends turns (a user message and an answer of --payload bytes) to
// --sessions sessions, one writer per --threads, every append synced, and
// prints the append latency P50/P99/max and the write amplification per
// payload byte (the turns' messages). The embedded store (--dir): the bytes
// the process wrote to the block device (/proc/self/io write_bytes, WAL,
// flushes and compactions included, measured to after the store closed).
// The Redis store (--redis, whose primary must run with appendfsync
// always): the growth of the primary's append-only file (INFO persistence,
// aof_current_size), each turn also WAITed for on a majority of the nodes.
//
//   session_bench --dir /var/tmp/sb --turns 5000 --payload 1000
//   session_bench --redis redis://127.0.0.1:6379,127.0.0.1:6380 --turns 5000
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "net/redis.h"
#include "session/redis_store.h"
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

// The primary's AOF size (aof_current_size), or -1.
long long AofBytes(const std::vector<std::pair<std::string, int>>& nodes) {
  for (const auto& [host, port] : nodes) {
    auto conn = strata::net::RedisConn::Connect(host, port, std::chrono::seconds(5));
    if (!conn.ok()) continue;
    auto role = (*conn)->Command({"ROLE"});
    if (!role.ok() || role->elements.empty() || role->elements[0].str != "master") continue;
    auto info = (*conn)->Command({"INFO", "persistence"});
    if (!info.ok()) return -1;
    const size_t at = info->str.find("aof_current_size:");
    return at == std::string::npos ? -1 : std::atoll(info->str.c_str() + at + 17);
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
  std::string redis;
  int turns = 5000;
  int payload = 1000;
  int sessions = 64;
  int threads = 1;
  bool no_sync = false;
  auto* dir_opt = app.add_option(
      "--dir", dir, "the embedded store: a scratch directory (removed first and after)");
  app.add_option("--redis", redis,
                 "the Redis store: redis://HOST:PORT[,HOST:PORT...] (its keys of tenant "
                 "'bench' are deleted first)")
      ->excludes(dir_opt);
  app.add_option("--turns", turns, "turns to append in all")->check(CLI::Range(1, 10000000));
  app.add_option("--payload", payload, "bytes of each turn's answer")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--sessions", sessions, "sessions the turns go to, round robin")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--threads", threads, "concurrent writers")->check(CLI::Range(1, 256));
  app.add_flag("--no-sync", no_sync, "do not fsync each turn (what the sync costs)");
  CLI11_PARSE(app, argc, argv);

  if (dir.empty() == redis.empty()) {
    std::fprintf(stderr, "session_bench: give --dir or --redis\n");
    return 2;
  }
  if (no_sync && !redis.empty()) {
    std::fprintf(stderr,
                 "session_bench: --no-sync is the embedded store's; Redis syncs as its "
                 "appendfsync says\n");
    return 2;
  }
  strata::session::Limits limits;
  limits.max_turns = 1000000;
  limits.max_bytes = 1ull << 32;
  std::vector<std::pair<std::string, int>> nodes;
  long long written0 = 0;
  strata::util::StatusOr<std::unique_ptr<strata::session::SessionStore>> store =
      strata::util::UnavailableError("not opened");
  if (!redis.empty()) {
    auto parsed = strata::session::ParseRedisNodes(redis);
    if (!parsed.ok()) {
      std::fprintf(stderr, "session_bench: %s\n", parsed.status().ToString().c_str());
      return 2;
    }
    nodes = *parsed;
    store = strata::session::OpenRedisStore({.nodes = nodes, .limits = limits});
    if (store.ok()) {
      for (int s = 0; s < sessions; ++s) (void)(*store)->Delete("bench", "s" + std::to_string(s));
    }
    written0 = AofBytes(nodes);
  } else {
    std::filesystem::remove_all(dir);
    strata::session::RocksStoreOptions options{.dir = dir, .limits = limits};
    options.sync = !no_sync;
    written0 = WriteBytes();
    store = strata::session::OpenRocksStore(options);
  }
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
  const long long written = (redis.empty() ? WriteBytes() : AofBytes(nodes)) - written0;
  std::vector<double> all;
  int failed = 0;
  for (size_t w = 0; w < latency.size(); ++w) {
    all.insert(all.end(), latency[w].begin(), latency[w].end());
    failed += failures[w];
  }
  const double payload_bytes =
      static_cast<double>(turns) * static_cast<double>(user.size() + answer.size());
  std::printf(
      "store %s  turns %d  payload %d B  sessions %d  threads %d  sync %s\n"
      "append latency  P50 %.1f us  P99 %.1f us  max %.1f us  (%.0f turns/s)\n"
      "written to disk %lld B for %.0f B of messages: write amplification %.2fx\n"
      "failed appends %d\n",
      redis.empty() ? "rocksdb" : "redis", turns, payload, sessions, threads,
      no_sync && redis.empty() ? "off" : "on", Quantile(all, 0.50), Quantile(all, 0.99),
      Quantile(all, 1.0), static_cast<double>(turns) / seconds, written, payload_bytes,
      static_cast<double>(written) / payload_bytes, failed);
  if (!dir.empty()) std::filesystem::remove_all(dir);
  return failed == 0 ? 0 : 1;
}
