#include "engine/engine.h"

#include <algorithm>

#include <fmt/format.h>

#include "util/hash.h"

namespace strata::engine {

util::StatusOr<kernels::TensorType> ParseKvType(std::string_view name) {
  const std::optional<kernels::TensorType> t = kernels::ParseTensorType(name);
  if (!t || !kernels::IsKvType(*t)) {
    return util::InvalidArgumentError(
        fmt::format("KV type '{}' is not one of f32, f16, q8_0", name));
  }
  return *t;
}

util::StatusOr<std::unique_ptr<Engine>> Engine::Create(const model::Model& model,
                                                       const EngineOptions& o, util::Logger& log) {
  const model::ModelConfig& c = model.config();
  if (o.n_threads < 1 || o.n_threads > 256) {
    return util::InvalidArgumentError(fmt::format("threads {} is outside [1, 256]", o.n_threads));
  }
  if (o.block_size < 1 || o.block_size > 1024) {
    return util::InvalidArgumentError(
        fmt::format("KV block size {} is outside [1, 1024]", o.block_size));
  }
  if (o.n_seq_max < 1 || o.n_seq_max > 4096) {
    return util::InvalidArgumentError(
        fmt::format("max sequences {} is outside [1, 4096]", o.n_seq_max));
  }
  if (o.n_ctx < 0 || o.n_kv_blocks < 0) {
    return util::InvalidArgumentError("context size and KV block count must not be negative");
  }
  if (!kernels::IsKvType(o.kv_type)) {
    return util::InvalidArgumentError(
        fmt::format("KV type {} is not one of F32, F16, Q8_0", kernels::TypeName(o.kv_type)));
  }
  if (o.kv_type == kernels::TensorType::kQ8_0 && c.head_dim % 32 != 0) {
    return util::InvalidArgumentError(fmt::format(
        "a Q8_0 KV cache needs a head dimension that is a multiple of 32; this model's is {} "
        "(use f16)",
        c.head_dim));
  }
  const int32_t n_ctx = o.n_ctx == 0 ? c.n_ctx_train : o.n_ctx;
  if (n_ctx > c.n_ctx_train) {
    log.Warn("context {} exceeds the model's training context {}; quality may suffer", n_ctx,
             c.n_ctx_train);
  }
  const int64_t per_seq = (n_ctx + o.block_size - 1) / o.block_size;
  const int64_t n_blocks = o.n_kv_blocks > 0 ? o.n_kv_blocks : per_seq * o.n_seq_max;
  const model::KvLayout layout = c.kv_layout(o.block_size, o.kv_type);
  const double bytes = static_cast<double>(layout.block_bytes()) * static_cast<double>(n_blocks);
  if (n_blocks > INT32_MAX || bytes > 1024.0 * 1024 * 1024 * 1024) {
    return util::InvalidArgumentError(fmt::format("KV cache of {} blocks ({:.1f} GiB) is too large",
                                                  n_blocks, bytes / (1024.0 * 1024 * 1024)));
  }
  const kernels::KernelTable& kernels = o.kernels ? *o.kernels : kernels::BestKernels();
  std::unique_ptr<BlockEvictionPolicy> eviction =
      o.block_eviction ? o.block_eviction(static_cast<int32_t>(n_blocks)) : nullptr;
  log.Info(
      "engine: {} threads, {} kernels, context {}, KV cache {} blocks x {} tokens of {} ({:.1f} "
      "MiB, {:.1f} KiB per token)",
      o.n_threads, kernels::IsaName(kernels.isa), n_ctx, n_blocks, o.block_size,
      kernels::TypeName(o.kv_type), bytes / (1024.0 * 1024.0),
      static_cast<double>(layout.block_bytes()) / o.block_size / 1024.0);
  auto threads = std::make_unique<util::ThreadPool>(o.n_threads);
  if (!o.cpus.empty()) STRATA_RETURN_IF_ERROR(threads->PinWorkers(o.cpus));
  return std::unique_ptr<Engine>(new Engine(model, n_ctx, std::move(threads),
                                            static_cast<int32_t>(n_blocks), o.block_size, o.kv_type,
                                            kernels, std::move(eviction)));
}

Engine::Engine(const model::Model& model, int32_t n_ctx, std::unique_ptr<util::ThreadPool> threads,
               int32_t n_blocks, int32_t block_size, kernels::TensorType kv_type,
               const kernels::KernelTable& kernels, std::unique_ptr<BlockEvictionPolicy> eviction)
    : model_(model),
      n_ctx_(n_ctx),
      threads_(std::move(threads)),
      pool_(model.config(), n_blocks, block_size, std::move(eviction), kv_type),
      forward_(model, *threads_, kernels) {}

SeqId Engine::NewSequence(uint64_t cache_namespace) {
  const SeqId id = next_id_++;
  Sequence s;
  s.cache_namespace = cache_namespace;
  seqs_.emplace(id, std::move(s));
  return id;
}

uint64_t Engine::ChainHash(uint64_t parent, std::span<const int32_t> block_tokens) {
  util::Hasher h(0x4b56424c4f434b31ULL);  // "KVBLOCK1"
  h.UpdatePod(parent);
  h.Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(block_tokens.data()),
                                    block_tokens.size() * sizeof(int32_t)));
  const uint64_t v = h.Digest();
  return v == 0 ? 1 : v;
}

util::StatusOr<int32_t> Engine::WarmPrefix(uint64_t cache_namespace,
                                           std::span<const int32_t> tokens) {
  if (cache_namespace == 0 || tokens.empty()) return 0;
  if (static_cast<int64_t>(tokens.size()) > n_ctx_) tokens = tokens.subspan(0, n_ctx_);
  const int32_t before = static_cast<int32_t>(pool_.prefix_stats().published);
  const SeqId seq = NewSequence(cache_namespace);
  size_t at = static_cast<size_t>(AttachCachedPrefix(seq, tokens));
  util::Status failed;
  constexpr size_t kChunk = 512;  // tokens per forward pass
  while (at < tokens.size() && failed.ok()) {
    const size_t n = std::min(kChunk, tokens.size() - at);
    const Work w{seq, tokens.subspan(at, n), /*logits=*/false, /*hidden=*/false};
    auto stepped = Step(std::span(&w, 1));
    if (!stepped.ok()) failed = stepped.status();
    at += n;
  }
  FreeSequence(seq);
  STRATA_RETURN_IF_ERROR(failed);
  return static_cast<int32_t>(pool_.prefix_stats().published) - before;
}

int32_t Engine::AttachCachedPrefix(SeqId seq, std::span<const int32_t> prompt) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return 0;
  Sequence& s = it->second;
  if (s.cache_namespace == 0 || s.length != 0 || prompt.empty()) return 0;
  const int32_t bs = pool_.block_size();
  const size_t max_blocks = (prompt.size() - 1) / static_cast<size_t>(bs);
  uint64_t parent = s.cache_namespace;
  for (size_t b = 0; b < max_blocks; ++b) {
    const auto block_tokens = prompt.subspan(b * static_cast<size_t>(bs), static_cast<size_t>(bs));
    const uint64_t h = ChainHash(parent, block_tokens);
    const std::optional<int32_t> found = pool_.Lookup(h);
    if (!found) break;
    pool_.Ref(*found);
    s.table.Append(*found);
    s.chain.push_back(h);
    s.tokens.insert(s.tokens.end(), block_tokens.begin(), block_tokens.end());
    s.length += bs;
    parent = h;
  }
  // The first block that missed: a cached block after the same parent may
  // still start with the same tokens (a shared system prompt ends inside a
  // block, each user's question follows it). Its matching positions are
  // copied into a block of this sequence's own instead of recomputed; they
  // hold what a recomputation would write, as the full blocks do.
  const size_t at = static_cast<size_t>(s.length);
  const size_t left = prompt.size() - 1 - at;  // the last prompt token is always computed
  if (left == 0) return s.length;
  const auto want = prompt.subspan(at, std::min(left, static_cast<size_t>(bs)));
  const std::optional<KvBlockPool::PartialMatch> match = pool_.LongestPartialMatch(parent, want);
  if (!match) return s.length;
  pool_.Ref(match->block);  // not evictable while the copy is allocated
  const std::optional<int32_t> own = pool_.Allocate();
  if (own) {
    pool_.CopyPositions(match->block, *own, match->n_tokens);
    pool_.CountPartialReuse(match->n_tokens);
    s.table.Append(*own);
    s.tokens.insert(s.tokens.end(), want.begin(), want.begin() + match->n_tokens);
    s.length += match->n_tokens;
  }
  pool_.Unref(match->block);
  return s.length;
}

void Engine::PublishFullBlocks(Sequence& s) {
  const int32_t bs = pool_.block_size();
  while (static_cast<int32_t>(s.chain.size() + 1) * bs <= s.length) {
    const size_t b = s.chain.size();
    const uint64_t parent = b == 0 ? s.cache_namespace : s.chain.back();
    const auto block_tokens =
        std::span(s.tokens).subspan(b * static_cast<size_t>(bs), static_cast<size_t>(bs));
    const uint64_t h = ChainHash(parent, block_tokens);
    const int32_t mine = s.table.blocks()[b];
    const int32_t kept = pool_.Publish(mine, h, parent, block_tokens);
    if (kept != mine) {
      s.table.Replace(b, kept);
      pool_.Unref(mine);
    }
    s.chain.push_back(h);
  }
}

void Engine::FreeSequence(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  it->second.table.Release(pool_);
  seqs_.erase(it);
}

util::Status Engine::TruncateSequence(SeqId seq, int32_t n_tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return util::NotFoundError(fmt::format("sequence {} does not exist", seq));
  if (n_tokens < 0 || n_tokens > it->second.length) {
    return util::InvalidArgumentError(
        fmt::format("cannot truncate sequence of {} tokens to {}", it->second.length, n_tokens));
  }
  Sequence& s = it->second;
  s.length = n_tokens;
  s.table.Truncate(pool_, n_tokens);
  const int32_t bs = pool_.block_size();
  if (s.cache_namespace != 0) {
    s.tokens.resize(static_cast<size_t>(n_tokens));
    s.chain.resize(std::min(s.chain.size(), static_cast<size_t>(n_tokens / bs)));
  }
  // The block the sequence will write next must be its own: if it is shared
  // or published, continue in a private copy.
  if (n_tokens % bs != 0) {
    const size_t last = static_cast<size_t>(n_tokens / bs);
    const int32_t b = s.table.blocks()[last];
    if (pool_.ref_count(b) > 1 || pool_.published(b)) {
      const std::optional<int32_t> copy = pool_.Allocate();
      if (!copy) {
        return util::ResourceExhaustedError("KV cache: no block left to copy a shared block");
      }
      pool_.CopyBlock(b, *copy);
      s.table.Replace(last, *copy);
      pool_.Unref(b);
    }
  }
  return util::OkStatus();
}

int32_t Engine::SequenceLength(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

util::StatusOr<std::span<const float>> Engine::Step(std::span<const Work> work) {
  // Validate everything first: a failed step must change nothing.
  size_t n_entries = 0, n_logits = 0, n_hidden = 0;
  std::vector<Sequence*> seqs;
  seqs.reserve(work.size());
  for (const Work& w : work) {
    auto it = seqs_.find(w.seq);
    if (it == seqs_.end()) {
      return util::NotFoundError(fmt::format("sequence {} does not exist", w.seq));
    }
    if (std::find(seqs.begin(), seqs.end(), &it->second) != seqs.end()) {
      return util::InvalidArgumentError(
          fmt::format("sequence {} appears twice in one step", w.seq));
    }
    if (w.tokens.empty()) return util::InvalidArgumentError("a step work item has no tokens");
    const int64_t new_len = it->second.length + static_cast<int64_t>(w.tokens.size());
    if (new_len > n_ctx_) {
      return util::OutOfRangeError(fmt::format(
          "context length exceeded: {} tokens do not fit the context of {}", new_len, n_ctx_));
    }
    for (int32_t tok : w.tokens) {
      if (tok < 0 || tok >= n_vocab()) {
        return util::InvalidArgumentError(
            fmt::format("token id {} is outside the vocabulary [0, {})", tok, n_vocab()));
      }
    }
    seqs.push_back(&it->second);
    n_entries += w.tokens.size();
    n_logits += w.logits ? 1 : 0;
    n_hidden += w.hidden ? w.tokens.size() : 0;
  }
  // Reserve KV blocks for every item, or none.
  std::vector<int32_t> old_capacity;
  old_capacity.reserve(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    Sequence& s = *seqs[i];
    old_capacity.push_back(s.length);
    util::Status st =
        s.table.Reserve(pool_, s.length + static_cast<int32_t>(work[i].tokens.size()));
    if (!st.ok()) {
      for (size_t j = 0; j < i; ++j) seqs[j]->table.Truncate(pool_, old_capacity[j]);
      return st;
    }
  }

  entries_.clear();
  entries_.reserve(n_entries);
  tables_.clear();
  for (size_t i = 0; i < work.size(); ++i) {
    const Work& w = work[i];
    const int32_t base = seqs[i]->length;
    for (size_t k = 0; k < w.tokens.size(); ++k) {
      model::BatchEntry e;
      e.token = w.tokens[k];
      e.pos = base + static_cast<int32_t>(k);
      e.seq = static_cast<int32_t>(i);
      e.logits = w.logits && k + 1 == w.tokens.size();
      e.hidden = w.hidden;
      entries_.push_back(e);
    }
    tables_.push_back(seqs[i]->table.blocks());
  }
  logits_.resize(n_logits * static_cast<size_t>(n_vocab()));
  hidden_.resize(n_hidden * static_cast<size_t>(model_.config().n_embd));
  util::Status st = forward_.Run({entries_, tables_}, pool_.buffer(), logits_, hidden_);
  if (!st.ok()) {
    for (size_t i = 0; i < work.size(); ++i) seqs[i]->table.Truncate(pool_, old_capacity[i]);
    return st;
  }
  for (size_t i = 0; i < work.size(); ++i) {
    Sequence& s = *seqs[i];
    s.length += static_cast<int32_t>(work[i].tokens.size());
    if (s.cache_namespace != 0) {
      s.tokens.insert(s.tokens.end(), work[i].tokens.begin(), work[i].tokens.end());
      PublishFullBlocks(s);
    }
  }
  return std::span<const float>(logits_);
}

}  // namespace strata::engine
