// text — between text and token ids: the tokenizers a GGUF vocabulary names
// (tokenizer.h: SentencePiece and byte-level BPE, and the detokenizer that
// holds back unfinished UTF-8) and chat templates (chat_template.h).
//
// Promise: encoding reproduces the reference tokenizers exactly (tests compare
// against ../shared/golden/tokenizer/); message content never becomes a
// control token; rendered chats are what each template family renders.
// Depends on format/ (the vocabulary is read from the GGUF file) and util/.
#pragma once

#include "text/chat_template.h"
#include "text/tokenizer.h"
