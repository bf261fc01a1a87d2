// obs — what strata tells operators: metrics in the Prometheus text format
// (metrics.h), encrypted request snapshots (snapshot_store.h over the file
// format of snapshot_envelope.h) and file digests (digest.h); later OTLP
// traces, the audit log and response watermarks.
//
// Promise: recording is cheap and thread-safe; nothing leaves the process
// unless an exporter is configured. Snapshots are written by their own
// thread and only ever encrypted at rest.
#pragma once

#include "obs/digest.h"
#include "obs/metrics.h"
#include "obs/snapshot_envelope.h"
#include "obs/snapshot_store.h"
