// TrainHashEncoder: learns the hash encoder's table from labelled pairs.
//
// Each step takes a batch of paraphrase pairs (a_i, b_i) and as many
// non-paraphrase pairs (x_k, y_k). The loss is the symmetric in-batch
// contrastive loss over the paraphrases (each a_i must pick b_i among every
// b_j, and each b_j its a_j, at softmax temperature T) plus, per
// non-paraphrase, w · max(0, cos(x_k, y_k) − margin)²: the hard negatives
// that share words with each other but not meaning are pushed apart. A text's
// vector is its feature rows' sum, normalised; the gradient flows back
// through the normalisation into the rows it touched, which a lazy Adam
// updates (only the touched rows, with the global step's bias correction).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include <fmt/format.h>

#include "model/hash_encoder.h"
#include "util/random.h"

namespace strata::model {
namespace {

struct Vec {
  std::vector<float> v;  // normalised
  double norm = 0;       // of the sum before normalising
};

class Trainer {
 public:
  Trainer(const HashTrainOptions& o, std::vector<std::vector<uint32_t>> features)
      : o_(o), dim_(o.config.dim), features_(std::move(features)) {
    const size_t n = static_cast<size_t>(o.config.buckets) * static_cast<size_t>(dim_);
    table_.resize(n);
    m_.assign(n, 0.0f);
    v_.assign(n, 0.0f);
    util::Rng rng(o.seed);
    for (float& x : table_) x = static_cast<float>(rng.Normal() * 0.1);
  }

  Vec Forward(size_t text) const {
    Vec out;
    out.v.assign(static_cast<size_t>(dim_), 0.0f);
    for (uint32_t b : features_[text]) {
      const float* row = table_.data() + static_cast<size_t>(b) * dim_;
      for (int i = 0; i < dim_; ++i) out.v[static_cast<size_t>(i)] += row[i];
    }
    double n = 0;
    for (float x : out.v) n += static_cast<double>(x) * x;
    out.norm = std::sqrt(n);
    if (out.norm > 0) {
      for (float& x : out.v) x = static_cast<float>(x / out.norm);
    }
    return out;
  }

  // Adds the gradient of the loss with respect to text's normalised vector
  // (`dv`) into the rows of its features.
  void Backward(size_t text, const Vec& f, const std::vector<double>& dv) {
    if (f.norm <= 0) return;
    double dot = 0;
    for (int i = 0; i < dim_; ++i) dot += f.v[static_cast<size_t>(i)] * dv[static_cast<size_t>(i)];
    std::vector<float> du(static_cast<size_t>(dim_));
    for (int i = 0; i < dim_; ++i) {
      du[static_cast<size_t>(i)] = static_cast<float>(
          (dv[static_cast<size_t>(i)] - f.v[static_cast<size_t>(i)] * dot) / f.norm);
    }
    for (uint32_t b : features_[text]) {
      auto [it, fresh] = grads_.try_emplace(b);
      if (fresh) it->second.assign(static_cast<size_t>(dim_), 0.0f);
      for (int i = 0; i < dim_; ++i)
        it->second[static_cast<size_t>(i)] += du[static_cast<size_t>(i)];
    }
  }

  void Step() {
    ++t_;
    constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const double c1 = 1 - std::pow(b1, t_), c2 = 1 - std::pow(b2, t_);
    for (auto& [b, g] : grads_) {
      const size_t base = static_cast<size_t>(b) * static_cast<size_t>(dim_);
      for (int i = 0; i < dim_; ++i) {
        const size_t k = base + static_cast<size_t>(i);
        const double gi = g[static_cast<size_t>(i)];
        m_[k] = static_cast<float>(b1 * m_[k] + (1 - b1) * gi);
        v_[k] = static_cast<float>(b2 * v_[k] + (1 - b2) * gi * gi);
        table_[k] -=
            static_cast<float>(o_.learning_rate * (m_[k] / c1) / (std::sqrt(v_[k] / c2) + eps));
      }
    }
    grads_.clear();
  }

  // One batch: paraphrases (a_i, b_i) and non-paraphrases (x_k, y_k), as text
  // indices. Returns the batch's loss.
  double Batch(const std::vector<std::pair<size_t, size_t>>& pos,
               const std::vector<std::pair<size_t, size_t>>& neg) {
    double loss = 0;
    const size_t n = pos.size();
    if (n > 0) {
      std::vector<Vec> a(n), b(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = Forward(pos[i].first);
        b[i] = Forward(pos[i].second);
      }
      std::vector<double> s(n * n);
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < n; ++j) {
          double d = 0;
          for (int k = 0; k < dim_; ++k)
            d += a[i].v[static_cast<size_t>(k)] * b[j].v[static_cast<size_t>(k)];
          s[i * n + j] = d / o_.temperature;
        }
      }
      // dS from the row (a picks b) and column (b picks a) softmaxes.
      std::vector<double> ds(n * n, 0.0);
      for (int dir = 0; dir < 2; ++dir) {
        for (size_t i = 0; i < n; ++i) {
          auto at = [&](size_t j) -> double& { return dir == 0 ? s[i * n + j] : s[j * n + i]; };
          auto dat = [&](size_t j) -> double& { return dir == 0 ? ds[i * n + j] : ds[j * n + i]; };
          double mx = -1e300;
          for (size_t j = 0; j < n; ++j) mx = std::max(mx, at(j));
          double z = 0;
          for (size_t j = 0; j < n; ++j) z += std::exp(at(j) - mx);
          loss += (mx + std::log(z) - at(i)) / static_cast<double>(n);
          for (size_t j = 0; j < n; ++j) {
            dat(j) += (std::exp(at(j) - mx) / z - (i == j ? 1.0 : 0.0)) / static_cast<double>(n);
          }
        }
      }
      for (size_t i = 0; i < n; ++i) {
        std::vector<double> da(static_cast<size_t>(dim_), 0.0), db(static_cast<size_t>(dim_), 0.0);
        for (size_t j = 0; j < n; ++j) {
          const double gij = ds[i * n + j] / o_.temperature;  // d loss / d (a_i · b_j)
          const double gji = ds[j * n + i] / o_.temperature;  // d loss / d (a_j · b_i)
          for (int k = 0; k < dim_; ++k) {
            da[static_cast<size_t>(k)] += gij * b[j].v[static_cast<size_t>(k)];
            db[static_cast<size_t>(k)] += gji * a[j].v[static_cast<size_t>(k)];
          }
        }
        Backward(pos[i].first, a[i], da);
        Backward(pos[i].second, b[i], db);
      }
    }
    for (const auto& [x, y] : neg) {
      const Vec fx = Forward(x), fy = Forward(y);
      double c = 0;
      for (int k = 0; k < dim_; ++k)
        c += fx.v[static_cast<size_t>(k)] * fy.v[static_cast<size_t>(k)];
      if (c <= o_.margin) continue;
      const double scale = o_.negative_weight / static_cast<double>(neg.size());
      loss += scale * (c - o_.margin) * (c - o_.margin);
      const double dc = 2 * scale * (c - o_.margin);
      std::vector<double> dx(static_cast<size_t>(dim_)), dy(static_cast<size_t>(dim_));
      for (int k = 0; k < dim_; ++k) {
        dx[static_cast<size_t>(k)] = dc * fy.v[static_cast<size_t>(k)];
        dy[static_cast<size_t>(k)] = dc * fx.v[static_cast<size_t>(k)];
      }
      Backward(x, fx, dx);
      Backward(y, fy, dy);
    }
    Step();
    return loss;
  }

  std::vector<float> TakeTable() { return std::move(table_); }

 private:
  const HashTrainOptions& o_;
  const int dim_;
  const std::vector<std::vector<uint32_t>> features_;
  std::vector<float> table_, m_, v_;
  std::unordered_map<uint32_t, std::vector<float>> grads_;
  int64_t t_ = 0;
};

}  // namespace

util::StatusOr<std::unique_ptr<HashEncoder>> TrainHashEncoder(
    const std::vector<TrainingPair>& pairs, const HashTrainOptions& o,
    const std::function<void(const HashTrainProgress&)>& progress) {
  if (o.epochs < 1 || o.epochs > 1000 || o.batch < 2 || o.batch > 4096 || !(o.learning_rate > 0) ||
      !(o.temperature > 0) || !(o.margin > -1 && o.margin < 1) || !(o.negative_weight >= 0)) {
    return util::InvalidArgumentError(
        "hash encoder training: epochs [1, 1000], batch [2, 4096], learning rate, temperature > "
        "0, margin (-1, 1), negative weight >= 0");
  }
  STRATA_RETURN_IF_ERROR(ValidateHashEncoderConfig(o.config));
  std::vector<std::vector<uint32_t>> features;
  std::vector<std::pair<size_t, size_t>> pos, neg;
  for (const TrainingPair& p : pairs) {
    const size_t i = features.size();
    features.push_back(HashFeatures(p.a, o.config));
    features.push_back(HashFeatures(p.b, o.config));
    (p.label == 1 ? pos : neg).emplace_back(i, i + 1);
  }
  if (pos.size() < 2) {
    return util::InvalidArgumentError("hash encoder training needs at least two paraphrase pairs");
  }
  Trainer trainer(o, std::move(features));
  util::Rng rng(o.seed ^ 0x5348'5546'464cULL);
  auto shuffle = [&](std::vector<std::pair<size_t, size_t>>& v) {
    for (size_t i = v.size(); i > 1; --i) {
      std::swap(v[i - 1], v[static_cast<size_t>(rng.Next() % i)]);
    }
  };
  for (int32_t epoch = 1; epoch <= o.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    shuffle(pos);
    shuffle(neg);
    double loss = 0;
    size_t batches = 0, next_neg = 0;
    for (size_t start = 0; start + 1 < pos.size(); start += static_cast<size_t>(o.batch)) {
      const size_t end = std::min(pos.size(), start + static_cast<size_t>(o.batch));
      std::vector<std::pair<size_t, size_t>> bp(pos.begin() + static_cast<ptrdiff_t>(start),
                                                pos.begin() + static_cast<ptrdiff_t>(end));
      std::vector<std::pair<size_t, size_t>> bn;
      for (size_t k = 0; k < bp.size() && !neg.empty(); ++k) {
        bn.push_back(neg[next_neg++ % neg.size()]);
      }
      loss += trainer.Batch(bp, bn);
      ++batches;
    }
    if (progress) {
      progress({.epoch = epoch,
                .epochs = o.epochs,
                .loss = batches ? loss / static_cast<double>(batches) : 0,
                .seconds =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
    }
  }
  return HashEncoder::Create(o.config, trainer.TakeTable(), o.name);
}

}  // namespace strata::model
