// util/log.h — the one logging interface; spdlog/fmt stay behind it.
//
// Promise: components receive a Logger& (never a global). Each line carries a
// level and, for derived loggers, a context prefix such as the request id, so
// every line of one request can be found together.
//
// Threading: every Logger implementation is thread-safe.
//
// Usage:
//   auto log = util::NewStderrLogger(util::LogLevel::kInfo);
//   log->Info("loaded {} tensors in {:.1f} ms", n, ms);
//   util::PrefixLogger req_log(*log, "req=abc123");
#pragma once

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::util {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

class Logger {
 public:
  virtual ~Logger() = default;

  // Writes one line. Thread-safe.
  virtual void Write(LogLevel level, std::string_view message) = 0;
  virtual bool Enabled(LogLevel level) const = 0;
  // Lines below `level` are dropped from now on (a reload of the log
  // level); false for a logger without a threshold of its own (it ignores
  // the call). Thread-safe.
  virtual bool SetMinLevel(LogLevel /*level*/) { return false; }

  template <typename... A>
  void Debug(fmt::format_string<A...> f, A&&... a) {
    if (Enabled(LogLevel::kDebug)) Write(LogLevel::kDebug, fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  void Info(fmt::format_string<A...> f, A&&... a) {
    if (Enabled(LogLevel::kInfo)) Write(LogLevel::kInfo, fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  void Warn(fmt::format_string<A...> f, A&&... a) {
    if (Enabled(LogLevel::kWarn)) Write(LogLevel::kWarn, fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  void Error(fmt::format_string<A...> f, A&&... a) {
    if (Enabled(LogLevel::kError)) Write(LogLevel::kError, fmt::format(f, std::forward<A>(a)...));
  }
};

// Timestamped lines on stderr ("[2026-11-30 12:00:00.123] [info] ...").
std::unique_ptr<Logger> NewStderrLogger(LogLevel min_level);

// Discards everything.
std::unique_ptr<Logger> NewNullLogger();

// Parses "debug", "info", "warn", "error", "off".
std::optional<LogLevel> ParseLogLevel(std::string_view text);

// Prepends "[prefix] " to every line and forwards to `base` (borrowed; must
// outlive this object).
class PrefixLogger final : public Logger {
 public:
  PrefixLogger(Logger& base, std::string prefix) : base_(base), prefix_(std::move(prefix)) {}
  void Write(LogLevel level, std::string_view message) override;
  bool Enabled(LogLevel level) const override { return base_.Enabled(level); }

 private:
  Logger& base_;
  const std::string prefix_;
};

// Keeps every line in memory; for tests.
class CapturingLogger final : public Logger {
 public:
  void Write(LogLevel level, std::string_view message) override;
  bool Enabled(LogLevel) const override { return true; }
  std::vector<std::string> Lines() const;
  bool Contains(std::string_view needle) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;  // guarded by mu_
};

}  // namespace strata::util
