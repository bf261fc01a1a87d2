// tests/testing/shared_data.h — finding the read-only test material in ../shared.
//
// Tests run with the repository root as working directory (see
// strata_test in cmake/StrataHelpers.cmake), so shared files are at
// "../shared/<relative>". A fresh clone may not have them: tests that need a
// file skip with a message naming it.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace strata::testing {

inline std::string SharedPath(const std::string& relative) { return "../shared/" + relative; }

inline bool HaveShared(const std::string& relative) {
  return std::filesystem::exists(SharedPath(relative));
}

}  // namespace strata::testing

// Skips the current test unless ../shared/<relative> exists.
#define STRATA_REQUIRE_SHARED(relative)                                             \
  do {                                                                              \
    if (!::strata::testing::HaveShared(relative)) {                                 \
      GTEST_SKIP() << "needs ../shared/" << (relative) << ", which is not present"; \
    }                                                                               \
  } while (0)
