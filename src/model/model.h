// model — architectures over the kernels: a llama-family decoder loaded from
// a GGUF file and its batched forward pass (transformer.h), and random-weight
// models of realistic shape (synthetic.h).
//
// Promise: the model module computes what the reference engine computes for
// the same file (tests compare against ../shared/golden/), never crashes on a
// bad file, and knows nothing of caches, scheduling or HTTP. File format,
// tokenizers and kernels are the modules below it (format/, text/, kernels/).
#pragma once

#include "model/synthetic.h"
#include "model/transformer.h"
