// server/internal/snapshot_tap.h — the hook that records a request's
// snapshot (server/snapshots.h) as its response is read.
//
// Promise: TapForSnapshot returns a generation that behaves exactly as
// `gen` (every call passes through, every event unchanged) and keeps what
// the events say of each choice: text, tool calls, finish, usage, seed,
// token ids. When the last event has been read (Next answers OutOfRange)
// and every choice finished without error, it completes the record (each
// prompt's text from its tokens) and hands it to the recorder, once. A
// choice that failed or was cancelled, or a Cancel, means no snapshot.
// `gen` is returned untouched when the tenant is not recorded or the
// generation does not say what answered it.
//
// Threading: as any Generation (one reader thread); the record is handed
// over on that thread.
#pragma once

#include <memory>
#include <string>

#include "gateway/gateway.h"
#include "server/api.h"
#include "server/snapshots.h"

namespace strata::server {

// `endpoint` is the canonical path; `created_ms` when the request arrived
// (Unix milliseconds).
std::unique_ptr<gateway::Generation> TapForSnapshot(std::unique_ptr<gateway::Generation> gen,
                                                    const SnapshotRecorder& recorder, ApiKind kind,
                                                    const char* endpoint,
                                                    const ParsedRequest& parsed,
                                                    int64_t created_ms);

}  // namespace strata::server
