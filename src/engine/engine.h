// engine/engine.h — sequences, their KV blocks, and one forward pass per step.
//
// Promise: an Engine holds a model's running sequences. Step() appends tokens
// to any number of sequences and evaluates them in one batched forward pass
// (prefill chunks and single decode tokens side by side), returning logits
// where asked. With the prefix cache (L2), every full KV block a sequence
// computes is published under the hash of its token chain within the
// sequence's cache namespace (the tenant and the model: nothing crosses
// tenants), and a new sequence adopts the longest cached prefix of its prompt
// (AttachCachedPrefix) instead of recomputing it. Because the forward pass is
// batch-invariant, a cached block holds exactly the bytes a recomputation
// would write, so outputs are identical with the cache on or off. A step either fully happens or
// changes nothing: when the KV pool cannot hold it, Step returns ResourceExhausted and every
// sequence is as it was, so the scheduler can queue or preempt. A sequence never grows past n_ctx
// (OutOfRange, "context length exceeded").
//
// Threading: owned by one thread (the scheduler thread); not thread-safe.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto engine, Engine::Create(model, {.n_threads = 2}, log));
//   SeqId s = engine->NewSequence();
//   Engine::Work w[] = {{.seq = s, .tokens = prompt, .logits = true}};
//   STRATA_ASSIGN_OR_RETURN(auto logits, engine->Step(w));  // [1][n_vocab]
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/kv_pool.h"
#include "model/forward.h"
#include "model/transformer.h"
#include "util/log.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace strata::engine {

using SeqId = int64_t;

struct EngineOptions {
  int32_t n_threads = 2;    // [1, 256] threads of the forward pass (caller included)
  int32_t n_ctx = 0;        // max tokens per sequence; 0 = the model's training context
  int32_t block_size = 16;  // [1, 1024] token positions per KV block
  int32_t n_kv_blocks = 0;  // 0 = enough for n_seq_max full sequences
  int32_t n_seq_max = 1;    // [1, 4096] used only to size the default pool
  // The KV cache's element type: F32, F16 (half the bytes of F32, the
  // default) or Q8_0 (about a quarter; models whose head dimension is a
  // multiple of 32). ParseKvType reads the flag's spelling.
  kernels::TensorType kv_type = kernels::TensorType::kF16;
  const kernels::KernelTable* kernels = nullptr;  // nullptr = the best for this CPU
  // Which unreferenced cached block to reclaim; nullptr = LRU.
  std::function<std::unique_ptr<BlockEvictionPolicy>(int32_t n_blocks)> block_eviction;
  // The CPUs the forward pass's workers run on (a NUMA placement: the node
  // that holds the weights); empty = wherever the OS puts them. The caller,
  // thread 0, binds itself (the scheduler: SchedulerOptions::cpus).
  std::vector<int32_t> cpus;
};

// "f32", "f16" or "q8_0" (any case): the KV types an engine can hold;
// InvalidArgument naming them otherwise.
util::StatusOr<kernels::TensorType> ParseKvType(std::string_view name);

class Engine {
 public:
  static util::StatusOr<std::unique_ptr<Engine>> Create(const model::Model& model,
                                                        const EngineOptions& options,
                                                        util::Logger& log);

  struct Work {
    SeqId seq = 0;
    std::span<const int32_t> tokens;  // appended at the sequence's current length
    bool logits = false;              // logits after the last of these tokens
    bool hidden = false;              // final hidden states of all these tokens (embeddings)
  };

  // `cache_namespace` != 0 enables the prefix cache for this sequence: its full
  // blocks are published, and it may adopt cached ones, only within that
  // namespace (derive it from the tenant and the model).
  SeqId NewSequence(uint64_t cache_namespace = 0);
  // For an empty sequence with a namespace: adopts the longest run of cached
  // full blocks matching the start of `prompt`, then copies the positions of
  // the next block that a cached block after the same prefix shares with it
  // (into a private block), leaving at least the prompt's last token to
  // compute (its logits are needed). Returns the tokens adopted; the caller
  // then feeds prompt[returned:].
  int32_t AttachCachedPrefix(SeqId seq, std::span<const int32_t> prompt);
  // Frees the sequence's blocks. Unknown ids are ignored.
  void FreeSequence(SeqId seq);
  // Forgets positions >= n_tokens (e.g. to recompute a preempted tail).
  util::Status TruncateSequence(SeqId seq, int32_t n_tokens);
  // Tokens held for `seq` (0 for unknown ids).
  int32_t SequenceLength(SeqId seq) const;
  int32_t n_sequences() const { return static_cast<int32_t>(seqs_.size()); }

  // One forward pass. Returns [n_works_with_logits][n_vocab] logits, valid
  // until the next Step.
  util::StatusOr<std::span<const float>> Step(std::span<const Work> work);
  // The hidden states the last Step produced ([tokens of `hidden` works][n_embd],
  // work order), valid until the next Step.
  std::span<const float> hidden() const { return hidden_; }

  const model::Model& model() const { return model_; }
  int32_t n_ctx() const { return n_ctx_; }
  int32_t n_vocab() const { return model_.config().n_vocab; }
  const KvBlockPool& kv_pool() const { return pool_; }
  // A warm-up: computes `tokens` in `cache_namespace` as a prompt would be,
  // so their full blocks are published (and stay cached once freed);
  // returns the blocks published. Nothing is sampled.
  util::StatusOr<int32_t> WarmPrefix(uint64_t cache_namespace, std::span<const int32_t> tokens);
  // Invalidation of the prefix cache (KvBlockPool::ForgetChains): blocks of
  // chains started in `cache_namespace` (nullopt = every chain) that `visit`
  // selects are never adopted again. Running sequences keep what they hold.
  int32_t ForgetCachedPrefixes(std::optional<uint64_t> cache_namespace,
                               const std::function<ChainVisit(std::span<const int32_t>)>& visit) {
    return pool_.ForgetChains(cache_namespace, visit);
  }
  const PrefixCacheStats& prefix_stats() const { return pool_.prefix_stats(); }
  const kernels::KernelTable& kernels() const { return forward_.kernels(); }
  // Profiling (model::Forward::set_profile_clock): with a clock, the time
  // the attention kernel takes adds up in attention_seconds().
  void SetProfileClock(const util::Clock* clock) { forward_.set_profile_clock(clock); }
  double attention_seconds() const { return forward_.attention_seconds(); }
  int32_t n_threads() const { return threads_->size(); }

 private:
  struct Sequence {
    BlockTable table;
    int32_t length = 0;
    uint64_t cache_namespace = 0;  // 0: not cached
    std::vector<int32_t> tokens;   // tokens held (cached sequences only)
    std::vector<uint64_t> chain;   // chain hash of each published block
  };
  Engine(const model::Model& model, int32_t n_ctx, std::unique_ptr<util::ThreadPool> threads,
         int32_t n_blocks, int32_t block_size, kernels::TensorType kv_type,
         const kernels::KernelTable& kernels, std::unique_ptr<BlockEvictionPolicy> eviction);
  // The chain hash of a block after `parent` (never 0).
  static uint64_t ChainHash(uint64_t parent, std::span<const int32_t> block_tokens);
  // Publishes the sequence's newly completed full blocks.
  void PublishFullBlocks(Sequence& s);

  const model::Model& model_;
  const int32_t n_ctx_;
  std::unique_ptr<util::ThreadPool> threads_;
  KvBlockPool pool_;
  model::Forward forward_;
  std::unordered_map<SeqId, Sequence> seqs_;
  SeqId next_id_ = 1;
  // Step scratch.
  std::vector<model::BatchEntry> entries_;
  std::vector<std::span<const int32_t>> tables_;
  std::vector<float> logits_;
  std::vector<float> hidden_;
};

}  // namespace strata::engine
