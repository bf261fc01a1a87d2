// netbench — what a crowd of clients does to an HTTP server, measured from
// outside: many idle kept-alive connections, many concurrent SSE streams,
// and a slow-header flood (slowloris), each with the latency a normal client
// sees meanwhile and the server's memory and CPU (from /proc, --pid).
//
//   netbench idle      --port P --connections 10000 [--pid PID]
//   netbench sse       --port P --streams 2000 --body FILE [--pid PID]
//   netbench slowloris --port P --sockets 300 --seconds 20 --probe-body FILE [--pid PID]
//   netbench latency   --port P --body FILE --seconds 10
//
// Every mode prints a table and, with --json FILE, the same as JSON. The
// client is one thread on epoll (plus one for the latency probe), so it is
// not what limits the numbers. `latency` is one client on one kept-alive
// connection sending `body` back to back: each request's time to the first
// byte of its body (for a stream: its first event; the head comes with it or
// before) and to its end. Raise the open-file limit first
// (ulimit -n 65536): each connection is a descriptor on both sides.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The server's resident memory (MiB) and CPU seconds so far, from /proc.
struct ProcSample {
  double rss_mib = 0;
  double cpu_s = 0;
};
std::optional<ProcSample> SampleProc(int pid) {
  if (pid <= 0) return std::nullopt;
  ProcSample s;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  bool found = false;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      s.rss_mib = std::stod(line.substr(6)) / 1024.0;
      found = true;
    }
  }
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = all.rfind(')');
  if (!found || close == std::string::npos) return std::nullopt;
  std::istringstream rest(all.substr(close + 2));
  std::vector<std::string> f;
  std::string w;
  while (rest >> w) f.push_back(w);
  if (f.size() < 15) return std::nullopt;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  s.cpu_s = (std::stod(f[11]) + std::stod(f[12])) / tick;  // utime + stime
  return s;
}

int Connect(int port, bool nonblocking) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  if (rc != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool SendAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// One blocking request on a fresh connection; its latency to the end of the
// response (a body of Content-Length, or a chunked body's last chunk), or
// nullopt on failure or after `timeout`.
std::optional<double> TimedRequest(int port, const std::string& request,
                                   std::chrono::milliseconds timeout) {
  const auto t0 = Clock::now();
  const int fd = Connect(port, false);
  if (fd < 0) return std::nullopt;
  std::optional<double> result;
  if (SendAll(fd, request)) {
    std::string in;
    char buf[65536];
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(t0 + timeout - Clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
      const size_t head = in.find("\r\n\r\n");
      if (head == std::string::npos) continue;
      const size_t cl = in.find("Content-Length: ");
      if (cl != std::string::npos && cl < head) {
        const size_t len = std::stoul(in.substr(cl + 16));
        if (in.size() >= head + 4 + len) {
          result = Ms(Clock::now() - t0);
          break;
        }
      } else if (in.find("\r\n0\r\n\r\n", head) != std::string::npos) {
        result = Ms(Clock::now() - t0);
        break;
      }
    }
  }
  ::close(fd);
  return result;
}

struct Percentiles {
  double p50 = 0, p99 = 0, max = 0;
  size_t n = 0, failed = 0;
};
Percentiles Summarize(std::vector<double> v, size_t failed) {
  Percentiles p;
  p.failed = failed;
  p.n = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  p.p50 = at(0.5);
  p.p99 = at(0.99);
  p.max = v.back();
  return p;
}
json ToJson(const Percentiles& p) {
  return {
      {"p50_ms", p.p50}, {"p99_ms", p.p99}, {"max_ms", p.max}, {"n", p.n}, {"failed", p.failed}};
}

// `count` timed requests, `gap` apart.
Percentiles Probe(int port, const std::string& request, int count, std::chrono::milliseconds gap,
                  std::chrono::milliseconds timeout) {
  std::vector<double> v;
  size_t failed = 0;
  for (int i = 0; i < count; ++i) {
    if (auto ms = TimedRequest(port, request, timeout)) {
      v.push_back(*ms);
    } else {
      ++failed;
    }
    std::this_thread::sleep_for(gap);
  }
  return Summarize(std::move(v), failed);
}

std::string HealthRequest() { return "GET /health HTTP/1.1\r\nHost: bench\r\n\r\n"; }
std::string PostRequest(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}
std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void RaiseFileLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

// Where a response in `in` stands: the body's first byte has arrived (a
// chunked body: one byte of its first non-empty chunk), the response is
// complete (then `*end` is its length), or it is malformed.
struct ResponseScan {
  bool head = false, first_body_byte = false, complete = false, bad = false;
  int status = 0;
  size_t end = 0;
};
ResponseScan ScanResponse(const std::string& in) {
  ResponseScan r;
  const size_t head_end = in.find("\r\n\r\n");
  if (head_end == std::string::npos) return r;
  r.head = true;
  if (in.rfind("HTTP/1.", 0) != 0 || in.size() < 12) {
    r.bad = true;
    return r;
  }
  r.status = std::atoi(in.c_str() + 9);
  std::string head = in.substr(0, head_end);
  std::transform(head.begin(), head.end(), head.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const size_t body = head_end + 4;
  const size_t cl = head.find("\r\ncontent-length:");
  if (cl != std::string::npos) {
    const size_t len = std::strtoul(head.c_str() + cl + 17, nullptr, 10);
    r.first_body_byte = len == 0 || in.size() > body;
    r.complete = in.size() >= body + len;
    r.end = body + len;
    return r;
  }
  if (head.find("\r\ntransfer-encoding: chunked") == std::string::npos) {
    r.bad = true;  // a body to the close: not what a kept-alive server sends
    return r;
  }
  size_t pos = body;
  while (true) {
    const size_t line = in.find("\r\n", pos);
    if (line == std::string::npos) return r;
    char* stop = nullptr;
    const size_t size = std::strtoul(in.c_str() + pos, &stop, 16);
    if (stop == in.c_str() + pos) {
      r.bad = true;
      return r;
    }
    if (size == 0) {
      const size_t trailer = in.find("\r\n\r\n", line);  // no trailers expected
      if (trailer != std::string::npos) {
        r.complete = true;
        r.end = trailer + 4;
      }
      return r;
    }
    if (in.size() > line + 2) r.first_body_byte = true;
    if (in.size() < line + 2 + size + 2) return r;
    pos = line + 2 + size + 2;
  }
}

struct Flags {
  int port = 8080;
  int pid = 0;
  int connections = 10000;
  int streams = 2000;
  int sockets = 300;
  int seconds = 20;
  std::string body, path = "/v1/chat/completions", probe_body, json_out;
};

void Emit(const Flags& f, const json& j) {
  std::printf("%s\n", j.dump(2).c_str());
  if (!f.json_out.empty()) std::ofstream(f.json_out) << j.dump(2) << "\n";
}

// Idle: `connections` kept-alive connections, each after one answered
// request; then a probe of /health latency while they are all held.
int RunIdle(const Flags& f) {
  const auto before = SampleProc(f.pid);
  const int ep = ::epoll_create1(0);
  std::vector<int> fds;
  std::vector<std::string> in(static_cast<size_t>(f.connections));
  int opened = 0, answered = 0, failed = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < f.connections; ++i) {
    const int fd = Connect(f.port, false);
    if (fd < 0) {
      ++failed;
      continue;
    }
    ++opened;
    if (!SendAll(fd, HealthRequest())) {
      ++failed;
      ::close(fd);
      continue;
    }
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u32 = static_cast<uint32_t>(fds.size());
    ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
    fds.push_back(fd);
  }
  // Collect the answers.
  std::vector<bool> done(fds.size(), false);
  std::vector<epoll_event> events(1024);
  while (answered + failed < static_cast<int>(fds.size()) + (f.connections - opened) &&
         Clock::now() - t0 < std::chrono::seconds(120)) {
    const int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 1000);
    for (int k = 0; k < n; ++k) {
      const uint32_t i = events[static_cast<size_t>(k)].data.u32;
      char buf[4096];
      const ssize_t r = ::recv(fds[i], buf, sizeof(buf), 0);
      if (r <= 0) {
        if (!done[i]) ++failed;
        done[i] = true;
        ::epoll_ctl(ep, EPOLL_CTL_DEL, fds[i], nullptr);
        continue;
      }
      in[i].append(buf, static_cast<size_t>(r));
      if (!done[i] && in[i].find("\r\n\r\n") != std::string::npos &&
          in[i].find("\"ok\"") != std::string::npos) {
        done[i] = true;
        ++answered;
      }
    }
  }
  const double setup_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const auto held = SampleProc(f.pid);
  const Percentiles health =
      Probe(f.port, HealthRequest(), 50, std::chrono::milliseconds(20), std::chrono::seconds(5));
  // Still open after the probe?
  int still_open = 0;
  for (int fd : fds) {
    char b;
    const ssize_t r = ::recv(fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) ++still_open;
  }
  for (int fd : fds) ::close(fd);
  ::close(ep);
  json j = {{"mode", "idle"},     {"connections_asked", f.connections},
            {"opened", opened},   {"answered", answered},
            {"failed", failed},   {"still_open_after", still_open},
            {"setup_s", setup_s}, {"health_while_held", ToJson(health)}};
  if (before && held) {
    j["server_rss_mib_before"] = before->rss_mib;
    j["server_rss_mib_held"] = held->rss_mib;
    j["server_kib_per_connection"] =
        (held->rss_mib - before->rss_mib) * 1024.0 / std::max(1, answered);
    j["server_cpu_s"] = held->cpu_s - before->cpu_s;
  }
  Emit(f, j);
  return 0;
}

// SSE: `streams` concurrent streaming requests of `body`, read to the end.
int RunSse(const Flags& f) {
  const std::string body = ReadFile(f.body);
  if (body.empty()) {
    std::fprintf(stderr, "netbench: --body %s is empty or unreadable\n", f.body.c_str());
    return 2;
  }
  const std::string request = PostRequest(f.path, body);
  const auto before = SampleProc(f.pid);
  const int ep = ::epoll_create1(0);
  struct Stream {
    int fd = -1;
    size_t events = 0;
    bool done = false, ok = false;
    std::string tail;
    Clock::time_point first;
  };
  std::vector<Stream> s(static_cast<size_t>(f.streams));
  const auto t0 = Clock::now();
  int failed = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    s[i].fd = Connect(f.port, false);
    if (s[i].fd < 0 || !SendAll(s[i].fd, request)) {
      s[i].done = true;
      ++failed;
      continue;
    }
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u32 = static_cast<uint32_t>(i);
    ::epoll_ctl(ep, EPOLL_CTL_ADD, s[i].fd, &e);
  }
  const double connect_s = std::chrono::duration<double>(Clock::now() - t0).count();
  size_t open = s.size() - static_cast<size_t>(failed);
  size_t peak_concurrent = open;
  std::optional<ProcSample> mid;
  std::vector<epoll_event> events(1024);
  size_t total_events = 0;
  while (open > 0 && Clock::now() - t0 < std::chrono::seconds(600)) {
    const int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 1000);
    if (!mid && Clock::now() - t0 > std::chrono::seconds(2)) mid = SampleProc(f.pid);
    for (int k = 0; k < n; ++k) {
      Stream& st = s[events[static_cast<size_t>(k)].data.u32];
      char buf[16384];
      const ssize_t r = ::recv(st.fd, buf, sizeof(buf), 0);
      if (r <= 0) {
        st.done = true;
        --open;
        ::epoll_ctl(ep, EPOLL_CTL_DEL, st.fd, nullptr);
        continue;
      }
      std::string chunk = st.tail + std::string(buf, static_cast<size_t>(r));
      size_t pos = 0;
      while ((pos = chunk.find("data: ", pos)) != std::string::npos) {
        ++st.events;
        ++total_events;
        pos += 6;
      }
      if (chunk.find("[DONE]") != std::string::npos ||
          chunk.find("message_stop") != std::string::npos) {
        st.ok = true;
        st.done = true;
        --open;
        ::epoll_ctl(ep, EPOLL_CTL_DEL, st.fd, nullptr);
      }
      st.tail = chunk.size() > 16 ? chunk.substr(chunk.size() - 16) : chunk;
    }
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto after = SampleProc(f.pid);
  size_t ok = 0;
  for (auto& st : s) {
    ok += st.ok ? 1 : 0;
    if (st.fd >= 0) ::close(st.fd);
  }
  ::close(ep);
  json j = {{"mode", "sse"},
            {"streams", f.streams},
            {"connected", s.size() - static_cast<size_t>(failed)},
            {"completed", ok},
            {"peak_concurrent", peak_concurrent},
            {"events", total_events},
            {"connect_s", connect_s},
            {"total_s", total_s},
            {"events_per_s", static_cast<double>(total_events) / total_s}};
  if (before && after) {
    j["server_rss_mib_before"] = before->rss_mib;
    if (mid) j["server_rss_mib_streaming"] = mid->rss_mib;
    j["server_rss_mib_after"] = after->rss_mib;
    j["server_cpu_s"] = after->cpu_s - before->cpu_s;
  }
  Emit(f, j);
  return ok == s.size() ? 0 : 1;
}

// Slowloris: a quiet probe, then `sockets` connections each sending one
// byte of headers a second for `seconds`, probed again meanwhile.
int RunSlowloris(const Flags& f) {
  const std::string probe_body = f.probe_body.empty() ? "" : ReadFile(f.probe_body);
  const std::string probe = probe_body.empty() ? HealthRequest() : PostRequest(f.path, probe_body);
  const auto timeout = std::chrono::seconds(30);
  const Percentiles quiet = Probe(f.port, probe, 30, std::chrono::milliseconds(50), timeout);
  const Percentiles quiet_health =
      Probe(f.port, HealthRequest(), 30, std::chrono::milliseconds(20), timeout);
  std::atomic<bool> stop{false};
  std::atomic<int> attackers{0}, reconnects{0};
  std::thread attack([&] {
    std::vector<int> fds(static_cast<size_t>(f.sockets), -1);
    const std::string prefix = "GET /health HTTP/1.1\r\nHost: bench\r\nX-Slow: ";
    for (auto& fd : fds) {
      fd = Connect(f.port, false);
      if (fd >= 0) SendAll(fd, prefix);
    }
    attackers.store(f.sockets);
    while (!stop.load()) {
      for (auto& fd : fds) {
        if (fd < 0 || !SendAll(fd, "a")) {
          // Closed by the server: come back, as an attacker would.
          if (fd >= 0) ::close(fd);
          fd = Connect(f.port, false);
          if (fd >= 0) SendAll(fd, prefix);
          reconnects.fetch_add(1);
        }
      }
      for (int i = 0; i < 10 && !stop.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  });
  while (attackers.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto attack_start = Clock::now();
  const int probes = std::max(10, f.seconds * 2);
  const Percentiles under =
      Probe(f.port, probe, probes / 2, std::chrono::milliseconds(500), timeout);
  const Percentiles under_health =
      Probe(f.port, HealthRequest(), probes / 2, std::chrono::milliseconds(200), timeout);
  while (Clock::now() - attack_start < std::chrono::seconds(f.seconds)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto proc = SampleProc(f.pid);
  stop.store(true);
  attack.join();
  json j = {{"mode", "slowloris"},
            {"sockets", f.sockets},
            {"seconds", f.seconds},
            {"attacker_reconnects", reconnects.load()},
            {"probe", probe_body.empty() ? "GET /health" : "POST " + f.path},
            {"quiet", ToJson(quiet)},
            {"under_attack", ToJson(under)},
            {"health_quiet", ToJson(quiet_health)},
            {"health_under_attack", ToJson(under_health)},
            {"p50_ratio", quiet.p50 > 0 ? under.p50 / quiet.p50 : 0.0}};
  if (proc) j["server_rss_mib"] = proc->rss_mib;
  Emit(f, j);
  return 0;
}

// Latency: one client, one kept-alive connection (opened again if the
// server closes it), `body` back to back for `seconds`.
int RunLatency(const Flags& f) {
  const std::string body = ReadFile(f.body);
  if (body.empty()) {
    std::fprintf(stderr, "netbench: --body %s is empty or unreadable\n", f.body.c_str());
    return 2;
  }
  const std::string request = PostRequest(f.path, body);
  std::vector<double> first_byte, total;
  size_t failed = 0, reconnects = 0;
  int fd = -1;
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::seconds(f.seconds);
  while (Clock::now() < until) {
    if (fd < 0) {
      fd = Connect(f.port, false);
      if (fd < 0) {
        ++failed;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      ++reconnects;
    }
    const auto start = Clock::now();
    bool ok = SendAll(fd, request);
    std::string in;
    std::optional<double> first;
    ResponseScan scan;
    char buf[65536];
    while (ok) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 30'000) <= 0) {
        ok = false;
        break;
      }
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        ok = false;
        break;
      }
      in.append(buf, static_cast<size_t>(n));
      scan = ScanResponse(in);
      if (scan.bad) {
        ok = false;
        break;
      }
      if (!first && scan.first_body_byte) first = Ms(Clock::now() - start);
      if (scan.complete) break;
    }
    if (ok && scan.status == 200 && first) {
      first_byte.push_back(*first);
      total.push_back(Ms(Clock::now() - start));
    } else {
      ++failed;
    }
    std::string head = in.substr(0, in.find("\r\n\r\n"));
    std::transform(head.begin(), head.end(), head.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (!ok || scan.end != in.size() || head.find("connection: close") != std::string::npos) {
      ::close(fd);
      fd = -1;
    }
  }
  if (fd >= 0) ::close(fd);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const size_t n = total.size();
  json j = {{"mode", "latency"},
            {"seconds", secs},
            {"requests", n},
            {"connections", reconnects},
            {"requests_per_s", static_cast<double>(n) / secs},
            {"first_byte", ToJson(Summarize(std::move(first_byte), failed))},
            {"total", ToJson(Summarize(std::move(total), failed))}};
  Emit(f, j);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"netbench: a crowd of clients against an HTTP server, measured from outside"};
  app.require_subcommand(1);
  Flags f;
  auto common = [&f](CLI::App* c) {
    c->add_option("--port", f.port, "Server port on 127.0.0.1")->capture_default_str();
    c->add_option("--pid", f.pid, "Server process id, to report its RSS and CPU from /proc");
    c->add_option("--json", f.json_out, "Also write the results to this file");
    c->add_option("--path", f.path, "Endpoint for POST requests")->capture_default_str();
  };
  auto* idle = app.add_subcommand("idle", "Many idle kept-alive connections");
  common(idle);
  idle->add_option("--connections", f.connections, "Connections to hold")->capture_default_str();
  auto* sse = app.add_subcommand("sse", "Many concurrent SSE streams");
  common(sse);
  sse->add_option("--streams", f.streams, "Concurrent streams")->capture_default_str();
  sse->add_option("--body", f.body, "JSON request body (with \"stream\": true)")->required();
  auto* slow = app.add_subcommand("slowloris", "A slow-header flood, and a client meanwhile");
  common(slow);
  slow->add_option("--sockets", f.sockets, "Attacking sockets")->capture_default_str();
  slow->add_option("--seconds", f.seconds, "Attack duration")->capture_default_str();
  slow->add_option("--probe-body", f.probe_body,
                   "JSON body of the normal client's POST (default: GET /health)");
  auto* latency =
      app.add_subcommand("latency", "One client back to back: time to first body byte and to end");
  common(latency);
  latency->add_option("--body", f.body, "JSON request body")->required();
  latency->add_option("--seconds", f.seconds, "How long to send for")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  RaiseFileLimit();
  if (idle->parsed()) return RunIdle(f);
  if (sse->parsed()) return RunSse(f);
  if (latency->parsed()) return RunLatency(f);
  return RunSlowloris(f);
}
