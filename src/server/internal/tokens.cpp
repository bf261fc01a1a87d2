// The token endpoints of ApiHandler (internal/handler.h): Anthropic's
// POST /v1/messages/count_tokens and llama.cpp's POST /tokenize and
// /detokenize. Each is admitted (draining, loading, API key) like a
// generation request, answers in its path's API shape, and is counted in
// strata_http_requests_total under its own endpoint.
#include <fmt/format.h>

#include "server/internal/handler.h"
#include "server/internal/wire.h"
#include "util/utf8.h"

namespace strata::server {
namespace {

constexpr const char* kCountTokens = "/v1/messages/count_tokens";
constexpr const char* kTokenize = "/tokenize";
constexpr const char* kDetokenize = "/detokenize";

// The body's fields, parsed with nlohmann's exceptions contained.
template <typename Parse>
auto ParseFields(std::string_view body, Parse parse) -> decltype(parse(wire::Fields({}, ""))) {
  STRATA_ASSIGN_OR_RETURN(wire::Json j, wire::ParseJson(body));
  try {
    return parse(wire::Fields(j, ""));
  } catch (const std::exception& e) {
    return util::InvalidArgumentError(fmt::format("invalid request: {}", e.what()))
        .WithReason(util::ErrorReason::kInvalidField);
  }
}

struct TokenizeRequest {
  std::optional<std::string> model;
  std::string content;
  bool add_special = false;
  bool parse_special = true;  // llama.cpp's default
  bool with_pieces = false;
};

util::StatusOr<TokenizeRequest> ParseTokenize(std::string_view body) {
  return ParseFields(body, [](const wire::Fields& f) -> util::StatusOr<TokenizeRequest> {
    TokenizeRequest r;
    STRATA_ASSIGN_OR_RETURN(r.model, f.String("model"));
    STRATA_ASSIGN_OR_RETURN(auto content, f.String("content"));
    if (!content) return f.Error("content", "is required");
    r.content = std::move(*content);
    STRATA_ASSIGN_OR_RETURN(auto add_special, f.Bool("add_special"));
    r.add_special = add_special.value_or(false);
    STRATA_ASSIGN_OR_RETURN(auto parse_special, f.Bool("parse_special"));
    r.parse_special = parse_special.value_or(true);
    STRATA_ASSIGN_OR_RETURN(auto with_pieces, f.Bool("with_pieces"));
    r.with_pieces = with_pieces.value_or(false);
    return r;
  });
}

struct DetokenizeRequest {
  std::optional<std::string> model;
  std::vector<int32_t> tokens;
};

// `max_tokens` bounds the array before anything is converted.
util::StatusOr<DetokenizeRequest> ParseDetokenize(std::string_view body, size_t max_tokens) {
  return ParseFields(
      body, [max_tokens](const wire::Fields& f) -> util::StatusOr<DetokenizeRequest> {
        DetokenizeRequest r;
        STRATA_ASSIGN_OR_RETURN(r.model, f.String("model"));
        if (!f.Has("tokens")) return f.Error("tokens", "is required");
        const wire::Json& tokens = f.Get("tokens");
        if (!tokens.is_array()) return f.Error("tokens", "must be an array of token ids");
        if (tokens.size() > max_tokens) {
          return f.Error("tokens", fmt::format("has {} ids; at most {} are allowed", tokens.size(),
                                               max_tokens));
        }
        r.tokens.reserve(tokens.size());
        for (size_t i = 0; i < tokens.size(); ++i) {
          const wire::Json& t = tokens[i];
          const bool integer = t.is_number_integer();
          const int64_t v = integer ? t.get<int64_t>() : 0;
          if (!integer || v < INT32_MIN || v > INT32_MAX) {
            return wire::FieldError(fmt::format("tokens[{}]", i), "must be an integer token id");
          }
          r.tokens.push_back(static_cast<int32_t>(v));
        }
        return r;
      });
}

}  // namespace

util::StatusOr<std::pair<backend::Backend*, std::string>> ApiHandler::TokenBackend(
    const gateway::Gateway& g, const std::optional<std::string>& model) const {
  std::string served = g.model_name();
  if (model) {
    STRATA_ASSIGN_OR_RETURN(served, ResolveModel(g, *model));
  }
  backend::Backend* b = g.Find(served);
  if (b == nullptr) return util::InternalError(fmt::format("no backend serves '{}'", served));
  return std::pair{b, served};
}

size_t ApiHandler::TokenCap(const backend::Backend& b) {
  // Four contexts: room for a prompt and its answer several times over,
  // while one request's list stays small next to the body limit.
  constexpr size_t kContexts = 4;
  return kContexts * static_cast<size_t>(std::max(b.n_ctx(), 1));
}

ApiReply ApiHandler::CountTokens(const ApiCall& call) {
  const ApiKind kind = ApiKind::kAnthropicMessages;
  Scope scope(kind, kCountTokens, call, clock_.Now(), log_);
  ApiReply reply = NewReply(kind, call.request_id);
  auto admitted = Admit(/*check_draining=*/true, call.api_key);
  if (!admitted.ok()) return Fail(scope, std::move(reply), admitted.status());
  auto parsed = ParseCountTokensRequest(call.body);
  if (!parsed.ok()) return Fail(scope, std::move(reply), parsed.status());
  auto served = ResolveModel(*admitted->gateway, parsed->model);
  if (!served.ok()) return Fail(scope, std::move(reply), served.status());
  backend::Backend* b = admitted->gateway->Find(*served);
  if (b == nullptr) {
    return Fail(scope, std::move(reply),
                util::InternalError(fmt::format("no backend serves '{}'", *served)));
  }
  parsed->request.model = *served;
  parsed->request.request_id = call.request_id;
  parsed->request.tenant = admitted->tenant;
  // The local engine counts the prompt as Prepare does; a backend without a
  // vocabulary of its own asks its upstream, if its API can.
  auto counted = b->PromptTokens(parsed->request);
  if (counted.ok()) {
    reply.body = wire::Dump({{"input_tokens", *counted}});
  } else if (counted.status().reason() == util::ErrorReason::kUnsupportedByBackend) {
    auto relayed = b->CountTokensUpstream(call.body, scope.t0 + options_.request_timeout);
    if (!relayed.ok()) return Fail(scope, std::move(reply), relayed.status());
    reply.status = relayed->status;
    reply.body = std::move(relayed->body);
  } else {
    return Fail(scope, std::move(reply), counted.status());
  }
  Count(kCountTokens, reply.status);
  scope.log.Info("POST {} {} tenant={} model={} {:.1f} ms", kCountTokens, reply.status,
                 admitted->tenant, *served, util::SecondsBetween(scope.t0, clock_.Now()) * 1e3);
  return reply;
}

ApiReply ApiHandler::Tokenize(const ApiCall& call) {
  const ApiKind kind = ApiKind::kOpenAIChat;
  Scope scope(kind, kTokenize, call, clock_.Now(), log_);
  ApiReply reply = NewReply(kind, call.request_id);
  auto admitted = Admit(/*check_draining=*/true, call.api_key);
  if (!admitted.ok()) return Fail(scope, std::move(reply), admitted.status());
  auto parsed = ParseTokenize(call.body);
  if (!parsed.ok()) return Fail(scope, std::move(reply), parsed.status());
  auto target = TokenBackend(*admitted->gateway, parsed->model);
  if (!target.ok()) return Fail(scope, std::move(reply), target.status());
  backend::Backend& b = *target->first;
  auto tokens = b.EncodeText(parsed->content, parsed->add_special, parsed->parse_special);
  if (!tokens.ok()) return Fail(scope, std::move(reply), tokens.status());
  if (tokens->size() > TokenCap(b)) {
    return Fail(scope, std::move(reply),
                util::InvalidFieldError(
                    "content", fmt::format("'content' is {} tokens; at most {} are answered",
                                           tokens->size(), TokenCap(b))));
  }
  wire::Json list = wire::Json::array();
  for (int32_t id : *tokens) {
    if (!parsed->with_pieces) {
      list.push_back(id);
      continue;
    }
    auto piece = b.TokenBytes(id);
    if (!piece.ok()) return Fail(scope, std::move(reply), piece.status());
    // A piece that is part of a UTF-8 character is given as its bytes, as
    // llama.cpp's server does.
    wire::Json p;
    if (util::IsValidUtf8(*piece)) {
      p = *piece;
    } else {
      p = wire::Json::array();
      for (unsigned char c : *piece) p.push_back(static_cast<int>(c));
    }
    list.push_back({{"id", id}, {"piece", std::move(p)}});
  }
  reply.body = wire::Dump({{"tokens", std::move(list)}});
  Count(kTokenize, 200);
  scope.log.Info("POST {} 200 tenant={} tokens={} {:.1f} ms", kTokenize, admitted->tenant,
                 tokens->size(), util::SecondsBetween(scope.t0, clock_.Now()) * 1e3);
  return reply;
}

ApiReply ApiHandler::Detokenize(const ApiCall& call) {
  const ApiKind kind = ApiKind::kOpenAIChat;
  Scope scope(kind, kDetokenize, call, clock_.Now(), log_);
  ApiReply reply = NewReply(kind, call.request_id);
  auto admitted = Admit(/*check_draining=*/true, call.api_key);
  if (!admitted.ok()) return Fail(scope, std::move(reply), admitted.status());
  // The model first: its context bounds the list before it is converted.
  auto model = ParseFields(call.body, [](const wire::Fields& f) { return f.String("model"); });
  if (!model.ok()) return Fail(scope, std::move(reply), model.status());
  auto target = TokenBackend(*admitted->gateway, *model);
  if (!target.ok()) return Fail(scope, std::move(reply), target.status());
  backend::Backend& b = *target->first;
  auto parsed = ParseDetokenize(call.body, TokenCap(b));
  if (!parsed.ok()) return Fail(scope, std::move(reply), parsed.status());
  auto text = b.DecodeTokens(parsed->tokens);
  if (!text.ok()) return Fail(scope, std::move(reply), text.status());
  reply.body = wire::Dump({{"content", *text}});
  Count(kDetokenize, 200);
  scope.log.Info("POST {} 200 tenant={} tokens={} {:.1f} ms", kDetokenize, admitted->tenant,
                 parsed->tokens.size(), util::SecondsBetween(scope.t0, clock_.Now()) * 1e3);
  return reply;
}

}  // namespace strata::server
