// obs — what strata tells operators: metrics in the Prometheus text format
// (metrics.h); OpenTelemetry traces: W3C trace context (trace_context.h),
// the span model (span.h), the tracer that samples requests and makes their
// spans (tracer.h), and OTLP/HTTP JSON export in batches (otlp.h); the
// hash-chained audit log (audit_log.h) and its verifier (audit_verify.h);
// response watermarks (watermark.h); encrypted request snapshots
// (snapshot_store.h over the file format of snapshot_envelope.h) and file
// digests (digest.h).
//
// Promise: recording is cheap and thread-safe; nothing leaves the process
// unless an exporter is configured (the OTLP exporter sends through a
// transport the composition root gives it), and exporting never blocks a
// request. The audit log and the snapshots are written by threads of their
// own; snapshots are only ever encrypted at rest.
#pragma once

#include "obs/audit_log.h"
#include "obs/audit_verify.h"
#include "obs/digest.h"
#include "obs/metrics.h"
#include "obs/otlp.h"
#include "obs/snapshot_envelope.h"
#include "obs/snapshot_store.h"
#include "obs/span.h"
#include "obs/trace_context.h"
#include "obs/tracer.h"
#include "obs/watermark.h"
