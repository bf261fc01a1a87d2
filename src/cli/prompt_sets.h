// cli/prompt_sets.h — the labelled prompt sets under ../shared/data/prompts
// (see PROVENANCE.md there), as `strata eval l3` reads them.
//
// Promise: each loader returns every record of its file or an error naming
// the file (NotFound when it is missing; InvalidArgument with the line or
// item when a record is malformed). Nothing is silently skipped.
//
// Threading: pure functions over the given FileSystem.
#pragma once

#include <string>
#include <vector>

#include "util/file_system.h"
#include "util/status.h"

namespace strata::cli {

struct Pair {
  std::string a, b;
  int label = 0;  // 1 = same meaning
};

struct ArenaPrompt {
  std::string cluster;  // v0.1 only
  std::string prompt;
};

// PAWS-Wiki Labeled Final TSV without a header: id, sentence1, sentence2, label.
util::StatusOr<std::vector<Pair>> LoadPaws(util::FileSystem& fs, const std::string& path);

// GPTCache's similiar_qqp_full.json: [{"text_a", "text_b", "label"}], either
// plain (a path ending in .json) or as the one .json member of a .tar.gz.
util::StatusOr<std::vector<Pair>> LoadQqp(util::FileSystem& fs, const std::string& path);

// GPTCache mock_data.json: [{"origin", "similar"}], every pair a paraphrase (label 1).
util::StatusOr<std::vector<Pair>> LoadMock(util::FileSystem& fs, const std::string& path);

// Arena-Hard question.jsonl: one {"prompt", "cluster"?} object per line.
util::StatusOr<std::vector<ArenaPrompt>> LoadArena(util::FileSystem& fs, const std::string& path);

// GPTCache's mock paraphrases as labelled pairs: each (origin, similar) a
// positive; negatives are each `similar` against the next pair's `origin`
// (same domain, another question) and the two prompts of each Arena-Hard
// v0.1 topic cluster.
std::vector<Pair> MockPairs(const std::vector<Pair>& mock, const std::vector<ArenaPrompt>& arena1);

}  // namespace strata::cli
