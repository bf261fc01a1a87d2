// util — the foundation every other module stands on; depends on nothing but std.
//
// Promise: error values (status.h), the injected environment (clock.h,
// file_system.h, random.h), logging (log.h), hashing (hash.h) and the engine's
// thread pool (thread_pool.h). No global mutable state: everything that touches
// the outside world is an object passed in by its owner.
#pragma once

#include "util/clock.h"
#include "util/file_system.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/random.h"
#include "util/status.h"
#include "util/thread_pool.h"
#include "util/utf8.h"
