#include "net/internal/body_decoder.h"

#include <brotli/decode.h>
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>

#include "net/http.h"

namespace strata::net::internal {
namespace {

// Output is produced this much at a time, and the limits checked between steps.
constexpr size_t kStep = 16u << 10;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The limits, shared by the codings.
class Budget {
 public:
  explicit Budget(const DecodeLimits& limits) : limits_(limits) {}
  void Consumed(size_t n) { in_ += n; }
  util::Status Produced(size_t n) {
    out_ += n;
    if (out_ > limits_.max_bytes) {
      return util::ResourceExhaustedError(fmt::format(
          "the request body exceeds the limit of {} bytes once decompressed", limits_.max_bytes));
    }
    if (out_ > limits_.ratio_floor_bytes &&
        static_cast<double>(out_) >
            limits_.max_ratio * static_cast<double>(std::max<size_t>(in_, 1))) {
      return util::ResourceExhaustedError(
          fmt::format("the request body decompresses more than {}-fold ({} bytes from {})",
                      limits_.max_ratio, out_, in_));
    }
    return util::OkStatus();
  }

 private:
  const DecodeLimits limits_;
  size_t in_ = 0;
  size_t out_ = 0;
};

class IdentityDecoder final : public BodyDecoder {
 public:
  explicit IdentityDecoder(const DecodeLimits& limits) : budget_(limits) {}
  util::Status Decode(std::string_view in, std::string* out) override {
    budget_.Consumed(in.size());
    STRATA_RETURN_IF_ERROR(budget_.Produced(in.size()));
    out->append(in);
    return util::OkStatus();
  }
  util::Status Finish(std::string*) override { return util::OkStatus(); }

 private:
  Budget budget_;
};

class ZlibDecoder final : public BodyDecoder {
 public:
  // window_bits: 15 + 32 detects a zlib or gzip header; -15 is raw deflate.
  ZlibDecoder(const DecodeLimits& limits, bool gzip) : budget_(limits), gzip_(gzip) {
    Init(15 + 32);
  }
  ~ZlibDecoder() override {
    if (initialised_) inflateEnd(&zs_);
  }

  util::Status Decode(std::string_view in, std::string* out) override {
    if (ended_) {
      return in.empty() ? util::OkStatus()
                        : util::InvalidArgumentError("data after the end of the compressed body");
    }
    if (!initialised_) return util::InternalError("zlib: out of memory");
    budget_.Consumed(in.size());
    if (!started_ && !gzip_) {
      // "deflate" should be zlib-wrapped (RFC 9110 §8.4.1.2) but some clients
      // send raw deflate: a first byte that is no zlib header means raw.
      head_.append(in);
      if (head_.size() < 2) return util::OkStatus();
      const auto b0 = static_cast<unsigned char>(head_[0]);
      const auto b1 = static_cast<unsigned char>(head_[1]);
      const bool zlib_header = (b0 & 0x0f) == 8 && ((b0 << 8) | b1) % 31 == 0;
      if (!zlib_header) {
        inflateEnd(&zs_);
        Init(-15);
      }
      started_ = true;
      std::string pending;
      pending.swap(head_);
      return Run(pending, out, Z_NO_FLUSH);
    }
    started_ = true;
    return Run(in, out, Z_NO_FLUSH);
  }

  util::Status Finish(std::string* out) override {
    if (!ended_ && !head_.empty()) {
      std::string pending;
      pending.swap(head_);
      started_ = true;
      STRATA_RETURN_IF_ERROR(Run(pending, out, Z_FINISH));
    }
    if (!ended_ && started_) STRATA_RETURN_IF_ERROR(Run({}, out, Z_FINISH));
    if (!ended_ && started_) {
      return util::InvalidArgumentError("the compressed request body is truncated");
    }
    return util::OkStatus();
  }

 private:
  void Init(int window_bits) {
    zs_ = z_stream{};
    initialised_ = inflateInit2(&zs_, window_bits) == Z_OK;
  }

  util::Status Run(std::string_view in, std::string* out, int flush) {
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs_.avail_in = static_cast<uInt>(in.size());
    while (true) {
      const size_t before = out->size();
      out->resize(before + kStep);
      zs_.next_out = reinterpret_cast<Bytef*>(out->data() + before);
      zs_.avail_out = static_cast<uInt>(kStep);
      const int rc = inflate(&zs_, flush);
      const size_t produced = kStep - zs_.avail_out;
      out->resize(before + produced);
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
        return util::InvalidArgumentError(
            fmt::format("the request body is not valid {} data ({})", gzip_ ? "gzip" : "deflate",
                        zs_.msg != nullptr ? zs_.msg : "corrupt stream"));
      }
      STRATA_RETURN_IF_ERROR(budget_.Produced(produced));
      if (rc == Z_STREAM_END) {
        ended_ = true;
        if (zs_.avail_in > 0) {
          return util::InvalidArgumentError("data after the end of the compressed body");
        }
        return util::OkStatus();
      }
      // More output may be pending only when the step's output space filled
      // up; otherwise zlib took all the input it can use for now.
      if (zs_.avail_out != 0) return util::OkStatus();
    }
  }

  Budget budget_;
  const bool gzip_;
  z_stream zs_{};
  bool initialised_ = false;
  bool started_ = false;
  bool ended_ = false;
  std::string head_;  // "deflate": the first bytes, until the header kind is known
};

class BrotliDecoder final : public BodyDecoder {
 public:
  explicit BrotliDecoder(const DecodeLimits& limits)
      : budget_(limits), state_(BrotliDecoderCreateInstance(nullptr, nullptr, nullptr)) {}
  ~BrotliDecoder() override {
    if (state_ != nullptr) BrotliDecoderDestroyInstance(state_);
  }

  util::Status Decode(std::string_view in, std::string* out) override {
    if (state_ == nullptr) return util::InternalError("brotli: out of memory");
    budget_.Consumed(in.size());
    const uint8_t* next_in = reinterpret_cast<const uint8_t*>(in.data());
    size_t avail_in = in.size();
    while (true) {
      if (ended_) {
        return avail_in == 0 ? util::OkStatus()
                             : util::InvalidArgumentError("data after the end of the brotli body");
      }
      const size_t before = out->size();
      out->resize(before + kStep);
      uint8_t* next_out = reinterpret_cast<uint8_t*>(out->data() + before);
      size_t avail_out = kStep;
      const BrotliDecoderResult rc = BrotliDecoderDecompressStream(state_, &avail_in, &next_in,
                                                                   &avail_out, &next_out, nullptr);
      const size_t produced = kStep - avail_out;
      out->resize(before + produced);
      STRATA_RETURN_IF_ERROR(budget_.Produced(produced));
      switch (rc) {
        case BROTLI_DECODER_RESULT_SUCCESS:
          ended_ = true;
          continue;
        case BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT:
          return util::OkStatus();
        case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT:
          continue;
        case BROTLI_DECODER_RESULT_ERROR:
        default:
          return util::InvalidArgumentError(
              fmt::format("the request body is not valid brotli data ({})",
                          BrotliDecoderErrorString(BrotliDecoderGetErrorCode(state_))));
      }
    }
  }

  util::Status Finish(std::string*) override {
    if (!ended_) return util::InvalidArgumentError("the brotli request body is truncated");
    return util::OkStatus();
  }

 private:
  Budget budget_;
  BrotliDecoderState* state_;
  bool ended_ = false;
};

}  // namespace

util::StatusOr<std::unique_ptr<BodyDecoder>> NewBodyDecoder(std::string_view content_encoding,
                                                            const DecodeLimits& limits) {
  const std::string_view coding = Trim(content_encoding);
  if (coding.find(',') != std::string_view::npos) {
    return util::UnimplementedError(fmt::format(
        "Content-Encoding '{}': only one coding per request is supported (gzip, deflate, br)",
        coding.substr(0, 64)));
  }
  if (coding.empty() || EqualsIgnoreCase(coding, "identity")) {
    return std::unique_ptr<BodyDecoder>(new IdentityDecoder(limits));
  }
  if (EqualsIgnoreCase(coding, "gzip") || EqualsIgnoreCase(coding, "x-gzip")) {
    return std::unique_ptr<BodyDecoder>(new ZlibDecoder(limits, true));
  }
  if (EqualsIgnoreCase(coding, "deflate")) {
    return std::unique_ptr<BodyDecoder>(new ZlibDecoder(limits, false));
  }
  if (EqualsIgnoreCase(coding, "br")) {
    return std::unique_ptr<BodyDecoder>(new BrotliDecoder(limits));
  }
  return util::UnimplementedError(fmt::format(
      "Content-Encoding '{}' is not supported (gzip, deflate, br)", coding.substr(0, 64)));
}

}  // namespace strata::net::internal
