#include "backend/backend.h"

namespace strata::backend {

std::string_view FinishReasonLabel(FinishReason r) {
  switch (r) {
    case FinishReason::kEndOfTurn:
      return "end_of_turn";
    case FinishReason::kStopString:
      return "stop_string";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "cancelled";
}

}  // namespace strata::backend
