// format — GGUF files in and out: the reader (gguf.h) and the writer
// (gguf_writer.h). Byte layouts are in docs/formats/gguf.md.
//
// Promise: reading never crashes and never reads outside the file, whatever
// the bytes, and every error names the field and its offset; what the writer
// writes the reader reads back, and llama.cpp reads too. Tensor data stays a
// view into the memory-mapped file. Depends on kernels/ (tensor type sizes)
// and util/ only.
#pragma once

#include "format/gguf.h"
#include "format/gguf_writer.h"
