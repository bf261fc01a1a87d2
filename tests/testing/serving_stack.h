// tests/testing/serving_stack.h — the tiny model served as `strata serve`
// wires it: engine, scheduler and gateway, for the gateway and server tests
// (which add the HTTP server with their own keys and threads).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "gateway/gateway.h"
#include "obs/metrics.h"
#include "testing/tiny_model.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::testing {

struct ServingStack {
  TinyModel tiny;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<engine::Scheduler> sched;
  std::unique_ptr<gateway::Gateway> gw;

  ~ServingStack() { Stop(); }
  // The gateway first (it reads the scheduler), then the scheduler's thread,
  // then the engine.
  void Stop() {
    gw.reset();
    sched.reset();
    engine.reset();
  }
};

// What the tests' gateways start from: the model is called "tiny" and a
// request may ask for at most 64 tokens.
inline gateway::GatewayOptions TinyGatewayOptions() {
  gateway::GatewayOptions go;
  go.model_name = "tiny";
  go.max_tokens_cap = 64;
  return go;
}

// (Re)starts `s`: the tiny model (F32), an engine with a 128-token context
// and 8 sequences, a scheduler with `so` and a gateway with `go` reporting
// into `metrics`. A part that fails is a test failure and leaves the stack
// incomplete (s.gw null).
inline void StartServingStack(ServingStack& s, const gateway::GatewayOptions& go,
                              obs::MetricsRegistry& metrics, const util::Clock& clock,
                              util::Logger& log, const engine::SchedulerOptions& so = {}) {
  s.Stop();
  s.tiny = MakeTinyModel();
  ASSERT_NE(s.tiny.model, nullptr);
  engine::EngineOptions eo;
  eo.n_ctx = 128;
  eo.n_seq_max = 8;
  auto engine = engine::Engine::Create(*s.tiny.model, eo, log);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  s.engine = std::move(engine).value();
  auto sched = engine::Scheduler::Start(*s.engine, so, log);
  ASSERT_TRUE(sched.ok()) << sched.status().ToString();
  s.sched = std::move(sched).value();
  auto gw = gateway::Gateway::Create(*s.tiny.model, *s.sched, metrics, go, clock, log);
  ASSERT_TRUE(gw.ok()) << gw.status().ToString();
  s.gw = std::move(gw).value();
}

}  // namespace strata::testing
