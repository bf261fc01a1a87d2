// model — GGUF models on the CPU: the file format (gguf.h, gguf_writer.h),
// tensor types and kernels (tensor_type.h, kernels.h), the tokenizer
// (tokenizer.h), the llama-family transformer and its batched forward pass
// (transformer.h), and random-weight models of realistic shape (synthetic.h).
//
// Promise: the model module computes what the reference engine computes for
// the same file (tests compare against ../shared/golden/), never crashes on a
// bad file, and knows nothing of caches, scheduling or HTTP. It depends only on
// util/.
#pragma once

#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/kernels.h"
#include "model/synthetic.h"
#include "model/tensor_type.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
