// model/hash_encoder.h — strata's own small sentence encoder: hashed word
// and character n-grams, each a learned vector, summed and normalised.
//
// Promise: HashFeatures turns a text into feature buckets: the text is
// lower-cased (ASCII) and split into words at every byte that is not a
// letter, digit or part of a multi-byte UTF-8 character; each word gives its
// unigram, each pair of adjacent words a bigram, and each word's character
// trigrams (with "<" and ">" marking its ends) give one feature each; a
// feature's bucket is a seeded 64-bit hash of its kind and bytes modulo
// `buckets`. Embed sums the buckets' rows and L2-normalises (a text without
// features gets the zero vector). A file is GGUF with general.architecture
// "strata-hash" (docs/formats/gguf.md): the table `hash.embd` [dim, buckets]
// in F32, F16 or Q8_0, and the hash seed and n-gram settings as metadata.
// TrainHashEncoder (hash_encoder_train.cpp) learns the table from labelled
// pairs: in-batch contrastive loss over the paraphrases, a hinge that pushes
// the non-paraphrases' cosine below a margin; single-threaded and seeded, so
// the same data and options give the same bytes.
//
// Threading: a HashEncoder is immutable and thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"
#include "kernels/tensor_type.h"
#include "util/file_system.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::model {

inline constexpr std::string_view kHashEncoderArchitecture = "strata-hash";
// Whether general.architecture names a hash encoder.
bool IsHashEncoderFile(const format::GgufFile& gguf);

struct HashEncoderConfig {
  int32_t dim = 128;          // vector width, [8, 4096]
  int32_t buckets = 1 << 15;  // rows of the table, a power of two in [2^8, 2^24]
  uint64_t seed = 0x5354'5241'5441'4831ULL;
  bool word_bigrams = true;
  bool char_trigrams = true;
};

// InvalidArgument naming the field out of range.
util::Status ValidateHashEncoderConfig(const HashEncoderConfig& config);

// The feature buckets of `text` (with repeats), at most `max_features`.
std::vector<uint32_t> HashFeatures(std::string_view text, const HashEncoderConfig& config,
                                   size_t max_features = 4096);

class HashEncoder {
 public:
  // A table of config.buckets rows of config.dim floats (InvalidArgument when
  // the sizes disagree or the config is out of range).
  static util::StatusOr<std::unique_ptr<HashEncoder>> Create(const HashEncoderConfig& config,
                                                             std::vector<float> table,
                                                             std::string name);
  static util::StatusOr<std::unique_ptr<HashEncoder>> Load(util::FileSystem& fs,
                                                           const std::string& path,
                                                           util::Logger& log);
  static util::StatusOr<std::unique_ptr<HashEncoder>> FromGguf(const format::GgufFile& gguf,
                                                               util::Logger& log);
  // Writes the encoder as GGUF with the table in `type` (F32, F16 or Q8_0).
  util::Status Write(util::FileSystem& fs, const std::string& path, kernels::TensorType type) const;

  const HashEncoderConfig& config() const { return config_; }
  const std::string& name() const { return name_; }
  // A hash of the config and the table.
  uint64_t fingerprint() const { return fingerprint_; }
  // The unit vector of `text` (zero when it has no features).
  std::vector<float> Embed(std::string_view text) const;
  // The same from features HashFeatures already made with this config.
  std::vector<float> EmbedFeatures(std::span<const uint32_t> features) const;
  const float* Row(uint32_t bucket) const { return table_.data() + size_t{bucket} * config_.dim; }

 private:
  HashEncoder() = default;
  HashEncoderConfig config_;
  std::vector<float> table_;  // [buckets][dim]
  std::string name_;
  uint64_t fingerprint_ = 0;
};

// A labelled pair for training (label 1: the texts mean the same).
struct TrainingPair {
  std::string a, b;
  int label = 0;
};

struct HashTrainOptions {
  HashEncoderConfig config;
  int32_t epochs = 12;
  int32_t batch = 128;          // paraphrase pairs per step (in-batch negatives)
  double learning_rate = 0.01;  // Adam
  double temperature = 0.05;    // of the contrastive softmax
  double margin = 0.6;          // non-paraphrases' cosine is pushed below this
  double negative_weight = 1.0;
  uint64_t seed = 1;  // initialisation and shuffling
  std::string name = "strata-hash";
};

struct HashTrainProgress {
  int32_t epoch = 0, epochs = 0;
  double loss = 0;  // mean loss of the epoch
  double seconds = 0;
};

// Learns an encoder from `pairs` (at least one paraphrase). `progress` (may
// be null) is called after each epoch.
util::StatusOr<std::unique_ptr<HashEncoder>> TrainHashEncoder(
    const std::vector<TrainingPair>& pairs, const HashTrainOptions& options,
    const std::function<void(const HashTrainProgress&)>& progress);

}  // namespace strata::model
