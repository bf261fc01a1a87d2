#include "util/log.h"

#include <atomic>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace strata::util {
namespace {

spdlog::level::level_enum ToSpd(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

class StderrLogger final : public Logger {
 public:
  explicit StderrLogger(LogLevel min_level)
      : min_level_(min_level),
        // A private logger object, not registered in spdlog's global registry.
        logger_("strata", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()) {
    logger_.set_level(ToSpd(min_level));
    logger_.set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  }
  void Write(LogLevel level, std::string_view message) override {
    if (!Enabled(level)) return;
    logger_.log(ToSpd(level), "{}", message);
    if (level >= LogLevel::kWarn) logger_.flush();
  }
  bool Enabled(LogLevel level) const override {
    return level >= min_level_.load(std::memory_order_relaxed) && level != LogLevel::kOff;
  }
  bool SetMinLevel(LogLevel level) override {
    min_level_.store(level);
    logger_.set_level(ToSpd(level));  // atomic in spdlog
    return true;
  }

 private:
  std::atomic<LogLevel> min_level_;
  spdlog::logger logger_;  // spdlog loggers with _mt sinks are thread-safe
};

class NullLogger final : public Logger {
 public:
  void Write(LogLevel, std::string_view) override {}
  bool Enabled(LogLevel) const override { return false; }
};

std::string_view LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "?";
}

}  // namespace

std::unique_ptr<Logger> NewStderrLogger(LogLevel min_level) {
  return std::make_unique<StderrLogger>(min_level);
}

std::unique_ptr<Logger> NewNullLogger() { return std::make_unique<NullLogger>(); }

std::optional<LogLevel> ParseLogLevel(std::string_view text) {
  for (LogLevel l :
       {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError, LogLevel::kOff}) {
    if (text == LevelName(l)) return l;
  }
  return std::nullopt;
}

void PrefixLogger::Write(LogLevel level, std::string_view message) {
  std::string line;
  line.reserve(prefix_.size() + message.size() + 3);
  line += '[';
  line += prefix_;
  line += "] ";
  line += message;
  base_.Write(level, line);
}

void CapturingLogger::Write(LogLevel level, std::string_view message) {
  std::string line(LevelName(level));
  line += ": ";
  line += message;
  std::lock_guard<std::mutex> lock(mu_);
  lines_.push_back(std::move(line));
}

std::vector<std::string> CapturingLogger::Lines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_;
}

bool CapturingLogger::Contains(std::string_view needle) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& l : lines_) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace strata::util
