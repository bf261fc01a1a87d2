// model — architectures over the kernels: a transformer loaded from a GGUF
// file (transformer.h; llama and qwen2, one entry each in the architecture
// table, internal/architecture.h), its batched forward pass as that
// architecture's stage list (forward.h), the layout of the KV memory it reads
// and writes (kv_layout.h), and random-weight models of realistic shape
// (synthetic.h).
//
// Promise: the model module computes what the reference engine computes for
// the same file (tests compare against ../shared/golden/), never crashes on a
// bad file, and knows nothing of caches, scheduling or HTTP. File format,
// tokenizers and kernels are the modules below it (format/, text/, kernels/).
#pragma once

#include "model/forward.h"
#include "model/kv_layout.h"
#include "model/synthetic.h"
#include "model/transformer.h"
