// obs — what strata tells operators: metrics in the Prometheus text format
// (metrics.h); later OTLP traces, the audit log and response watermarks.
//
// Promise: recording is cheap and thread-safe; nothing leaves the process
// unless an exporter is configured.
#pragma once

#include "obs/metrics.h"
