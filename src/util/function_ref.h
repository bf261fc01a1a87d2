// util/function_ref.h — a non-owning reference to a callable, for callbacks
// made during a call only (a parser handing over what it read): no
// allocation and no copy of the callable, where std::function may do both.
//
// Promise: FunctionRef<R(A...)> calls the callable it was made from, which
// must outlive every call (it is not copied: a temporary lambda passed as an
// argument lives until the call returns).
//
// Threading: as the callable.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace strata::util {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
           std::is_invocable_r_v<R, F&, Args...>)
      FunctionRef(F&& f)  // NOLINT(google-explicit-constructor): a callable is its reference
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace strata::util
