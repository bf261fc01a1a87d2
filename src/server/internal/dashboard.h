// server/internal/dashboard.h — GET /dashboard: the live page
// (internal/dashboard.html, compiled in) and GET /dashboard/state, the part
// of what it shows that is not a Prometheus series.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "gateway/gateway.h"

namespace strata::server {

// The dashboard page: one self-contained HTML document.
std::string_view DashboardPage();

// {"models": [...], "rt_switcher": null | {"level", "policy", "switches":
// [{"at" (unix ms), "from", "to", "reason", "policy"}]}, "canary": null |
// the canary's state (tune::CanaryController::StateJson)}; `g` null while
// the model loads (no models yet); `canary` "" without a canary.
std::string DashboardState(const gateway::Gateway* g, std::string_view canary);

}  // namespace strata::server
