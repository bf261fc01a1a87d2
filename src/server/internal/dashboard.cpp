#include "server/internal/dashboard.h"

#include "gateway/rt_control.h"
#include "server/internal/wire.h"

namespace strata::server {
namespace {
#include "dashboard_html.inc"
}  // namespace

std::string_view DashboardPage() { return {kDashboardHtml, sizeof(kDashboardHtml) - 1}; }

std::string DashboardState(const gateway::Gateway* g, std::string_view canary) {
  wire::Json state = wire::Json::object();
  state["models"] = wire::Json::array();
  state["rt_switcher"] = nullptr;
  state["canary"] = nullptr;
  if (!canary.empty()) {
    wire::Json c = wire::Json::parse(canary, nullptr, /*allow_exceptions=*/false);
    if (!c.is_discarded()) state["canary"] = std::move(c);
  }
  if (g == nullptr) return wire::Dump(state);
  for (const std::string& name : g->model_names()) state["models"].push_back(name);
  if (const gateway::RtControl* rt = g->rt_control()) {
    wire::Json switches = wire::Json::array();
    for (const gateway::RtControl::Switch& s : rt->RecentSwitches()) {
      switches.push_back(
          {{"at",
            std::chrono::duration_cast<std::chrono::milliseconds>(s.at.time_since_epoch()).count()},
           {"from", s.from_level},
           {"to", s.to_level},
           {"reason", s.reason},
           {"policy", s.policy}});
    }
    state["rt_switcher"] = {
        {"level", rt->level()}, {"policy", rt->PolicyInForce()}, {"switches", switches}};
  }
  return wire::Dump(state);
}

}  // namespace strata::server
