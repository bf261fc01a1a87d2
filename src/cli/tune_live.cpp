#include "cli/tune_live.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/tune_report.h"
#include "util/clock.h"

namespace strata::cli {
namespace {

// The port of "listening on http://HOST:PORT " in a serve log, or -1.
int ListeningPort(const std::string& log) {
  const std::string mark = "listening on http://";
  const size_t at = log.find(mark);
  if (at == std::string::npos) return -1;
  const size_t space = log.find(' ', at + mark.size());
  if (space == std::string::npos) return -1;
  const size_t colon = log.rfind(':', space);
  if (colon == std::string::npos || colon < at + mark.size()) return -1;
  return std::atoi(log.substr(colon + 1, space - colon - 1).c_str());
}

// The last `lines` lines of `text`.
std::string Tail(const std::string& text, int lines) {
  size_t at = text.size();
  if (at > 0 && text[at - 1] == '\n') --at;
  while (lines-- > 0) {
    const size_t nl = at == 0 ? std::string::npos : text.rfind('\n', at - 1);
    if (nl == std::string::npos) return text;
    at = nl;
  }
  return text.substr(at + 1);
}

// Waits up to `timeout` for `pid`: true once it has exited (and is reaped).
bool Reaped(pid_t pid, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || r < 0) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

util::StatusOr<std::unique_ptr<LiveTrials>> LiveTrials::Create(const Env& env,
                                                               LiveTrialOptions options,
                                                               util::Logger& log) {
  auto t = std::unique_ptr<LiveTrials>(new LiveTrials(env, std::move(options), log));
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return util::FailedPreconditionError("cannot find this program's own binary");
  t->exe_.assign(buf, static_cast<size_t>(n));
  STRATA_RETURN_IF_ERROR(env.fs->CreateDirs(t->o_.dir + "/trials"));
  // The trial servers' one API key, random, in a file only this user reads:
  // nobody else on the machine uses a trial server while it is measured.
  std::random_device entropy;
  for (int i = 0; i < 4; ++i) t->api_key_ += fmt::format("{:08x}", entropy());
  t->keys_path_ = t->o_.dir + "/trials/api-keys";
  ::unlink(t->keys_path_.c_str());
  const int fd = ::open(t->keys_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return util::FailedPreconditionError(
        fmt::format("cannot write the trial servers' key file {}", t->keys_path_));
  }
  const std::string line = t->api_key_ + " tuner\n";
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  if (!written) {
    return util::FailedPreconditionError(
        fmt::format("cannot write the trial servers' key file {}", t->keys_path_));
  }
  net::HttpClientOptions co;
  co.io_threads = 2;
  STRATA_ASSIGN_OR_RETURN(t->client_, net::HttpClient::Create(co, log));
  return t;
}

LiveTrials::~LiveTrials() {
  Stop();
  if (client_) client_->Stop();
}

void LiveTrials::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  if (!Reaped(pid_, std::chrono::seconds(20))) {
    log_.Warn("the trial server (pid {}) did not stop in 20 s: killed", pid_);
    ::kill(pid_, SIGKILL);
    Reaped(pid_, std::chrono::seconds(10));
  }
  pid_ = -1;
}

util::StatusOr<tune::LiveSummary> LiveTrials::Run(
    const tune::Scenario& s, const std::vector<tune::WorkloadRequest>& requests,
    const tune::ScenarioText& text, const ServeFlags& flags, tune::References& references,
    const std::function<void(size_t, size_t)>& progress) {
  Stop();
  ServeFlags trial = flags;
  // The trial server is the tuner's own: its key only, nothing shared or kept.
  trial.api_keys = keys_path_;
  trial.admin_key_file.clear();
  trial.canary = {};
  trial.cache.redis.clear();
  trial.snapshots = {};
  const std::string base = fmt::format("{}/trials/{}", o_.dir, ++trials_);
  STRATA_RETURN_IF_ERROR(env_.fs->WriteFileAtomic(
      base + ".toml",
      RenderConfig(trial, fmt::format("strata tune: trial {} ({})", trials_, s.name))));
  const std::string log_path = base + ".log";
  std::vector<std::string> args = {
      exe_,          "serve",     "--config", base + ".toml",
      "-m",          o_.model,    "-t",       fmt::format("{}", o_.threads),
      "--host",      "127.0.0.1", "--port",   "0",
      "--log-level", "info"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return util::InternalError("fork failed: cannot start a trial server");
  if (pid == 0) {
    // The child: it goes when the tuner goes (Ctrl-C, a kill), its output
    // to the trial's log, nothing else of ours open.
    if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != parent) ::_exit(125);
    FILE* out = std::freopen(log_path.c_str(), "w", stdout);
    if (out == nullptr) ::_exit(126);
    ::dup2(STDOUT_FILENO, STDERR_FILENO);
    ::close_range(STDERR_FILENO + 1, ~0U, 0);
    ::execv(exe_.c_str(), argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  // Ready: the log says so and names its port.
  const util::Clock& clock = util::RealClock();
  const auto deadline =
      clock.Now() + std::chrono::milliseconds(static_cast<int64_t>(o_.start_timeout_s * 1000));
  int port = -1;
  while (true) {
    auto read = env_.fs->ReadFile(log_path);
    const std::string log = read.ok() ? *read : std::string();
    if (log.find("ready in") != std::string::npos) port = ListeningPort(log);
    if (port > 0) break;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return util::FailedPreconditionError(
          fmt::format("the trial server for scenario {} did not start ({}):\n{}", s.name, log_path,
                      Tail(log, 5)));
    }
    if (clock.Now() >= deadline) {
      Stop();
      return util::DeadlineExceededError(
          fmt::format("the trial server for scenario {} was not ready within {:.0f} s ({})", s.name,
                      o_.start_timeout_s, log_path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  tune::LiveOptions lo;
  lo.url = fmt::format("http://127.0.0.1:{}", port);
  lo.api_key = api_key_;
  // The served model's name: the first of /v1/models.
  {
    net::ClientRequest get;
    get.url = lo.url + "/v1/models";
    get.headers.Add("Authorization", "Bearer " + api_key_);
    auto models = client_->Fetch(get);
    const nlohmann::json j =
        models.ok() ? nlohmann::json::parse(models->body, nullptr, false) : nlohmann::json();
    if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
        !j["data"][0].is_object() || !j["data"][0].contains("id") ||
        !j["data"][0]["id"].is_string()) {
      Stop();
      return util::FailedPreconditionError(
          fmt::format("the trial server for scenario {} lists no model ({})", s.name, log_path));
    }
    lo.model = j["data"][0]["id"].get<std::string>();
  }
  lo.drain_s = o_.drain_s;
  lo.progress = progress;
  auto records = tune::RunLive(s, requests, text, lo, *client_, clock);
  if (!records.ok()) {
    Stop();
    return records.status();
  }
  // References for approximate answers, from the same server, tiers off.
  auto fetch = [&](const tune::LiveRecord& r) -> std::optional<std::string> {
    auto ref = tune::FetchReference(lo, *client_, r.messages, r.max_tokens);
    if (!ref.ok() || !ref->ok || ref->completion_tokens < r.max_tokens) return std::nullopt;
    return ref->text;
  };
  tune::LiveSummary summary = tune::Summarise(s, requests, *records, references, fetch);
  // Every request's record, for a person checking a trial.
  std::string lines;
  for (size_t i = 0; i < records->size(); ++i) {
    const tune::LiveRecord& r = (*records)[i];
    if (r.sent_s < 0) continue;
    auto ref = references.find(r.prompt_key);
    lines +=
        nlohmann::json{{"request", i},
                       {"sent_s", r.sent_s},
                       {"ttft_s", r.ttft_s},
                       {"done_s", r.done_s},
                       {"ok", r.ok},
                       {"status", r.http_status},
                       {"cache", r.cache},
                       {"completion_tokens", r.completion_tokens},
                       {"max_tokens", r.max_tokens},
                       {"prompt", fmt::format("{:016x}", r.prompt_key)},
                       {"agrees", ref == references.end() ? nlohmann::json(nullptr)
                                                          : nlohmann::json(ref->second == r.text)},
                       {"error", r.error},
                       {"text", r.text.substr(0, 400)}}
            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
        "\n";
  }
  STRATA_RETURN_IF_ERROR(env_.fs->WriteFileAtomic(base + ".jsonl", lines));
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    summary.first_errors.insert(
        summary.first_errors.begin(),
        fmt::format("the trial server exited during the trial ({})", log_path));
  }
  Stop();
  return summary;
}

}  // namespace strata::cli
