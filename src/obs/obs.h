// obs — what strata tells operators: metrics in the Prometheus text format
// (metrics.h) and OpenTelemetry traces: W3C trace context (trace_context.h),
// the span model (span.h), the tracer that samples requests and makes their
// spans (tracer.h), and OTLP/HTTP JSON export in batches (otlp.h); later the
// audit log and response watermarks.
//
// Promise: recording is cheap and thread-safe; nothing leaves the process
// unless an exporter is configured (the OTLP exporter sends through a
// transport the composition root gives it), and exporting never blocks a
// request.
#pragma once

#include "obs/metrics.h"
#include "obs/otlp.h"
#include "obs/span.h"
#include "obs/trace_context.h"
#include "obs/tracer.h"
