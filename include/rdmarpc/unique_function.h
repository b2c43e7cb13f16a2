// UniqueFunction<R(Args...)>: a move-only std::function.
//
// Completion handlers (an Asio coroutine's, a promise) are often move-only;
// std::function cannot hold them. Callables up to kInlineSize bytes are
// stored inline, so the common small lambda costs no allocation.
#ifndef RDMARPC_UNIQUE_FUNCTION_H_
#define RDMARPC_UNIQUE_FUNCTION_H_

#include <cassert>
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace rdmarpc {

template <typename Signature>
class UniqueFunction;

template <typename R, typename... Args>
class UniqueFunction<R(Args...)> {
 public:
  static constexpr size_t kInlineSize = 48;

  UniqueFunction() noexcept = default;
  UniqueFunction(std::nullptr_t) noexcept {}  // NOLINT

  template <typename F,
            typename = std::enable_if_t<
                !std::is_same_v<std::decay_t<F>, UniqueFunction> &&
                std::is_invocable_r_v<R, std::decay_t<F>&, Args...>>>
  UniqueFunction(F&& f) {  // NOLINT: implicit, like std::function.
    using Fn = std::decay_t<F>;
    if constexpr (sizeof(Fn) <= kInlineSize &&
                  alignof(Fn) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<Fn>) {
      ::new (static_cast<void*>(storage_)) Fn(std::forward<F>(f));
      ops_ = &InlineOps<Fn>::kOps;
    } else {
      *reinterpret_cast<Fn**>(storage_) = new Fn(std::forward<F>(f));
      ops_ = &HeapOps<Fn>::kOps;
    }
  }

  UniqueFunction(UniqueFunction&& other) noexcept { MoveFrom(other); }
  UniqueFunction& operator=(UniqueFunction&& other) noexcept {
    if (this != &other) {
      Reset();
      MoveFrom(other);
    }
    return *this;
  }
  UniqueFunction(const UniqueFunction&) = delete;
  UniqueFunction& operator=(const UniqueFunction&) = delete;
  ~UniqueFunction() { Reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  R operator()(Args... args) {
    assert(ops_ != nullptr && "calling an empty UniqueFunction");
    return ops_->invoke(storage_, std::forward<Args>(args)...);
  }

 private:
  // Calls `f`, discarding a result the signature does not return.
  template <typename Fn>
  static R Call(Fn& f, Args&&... args) {
    if constexpr (std::is_void_v<R>) {
      f(std::forward<Args>(args)...);
    } else {
      return f(std::forward<Args>(args)...);
    }
  }

  struct Ops {
    R (*invoke)(void* storage, Args&&... args);
    void (*move)(void* from, void* to) noexcept;  // Leaves `from` destroyed.
    void (*destroy)(void* storage) noexcept;
  };
  template <typename Fn>
  struct InlineOps {
    static Fn* Get(void* s) { return std::launder(static_cast<Fn*>(s)); }
    static constexpr Ops kOps = {
        [](void* s, Args&&... args) -> R {
          return Call(*Get(s), std::forward<Args>(args)...);
        },
        [](void* from, void* to) noexcept {
          ::new (to) Fn(std::move(*Get(from)));
          Get(from)->~Fn();
        },
        [](void* s) noexcept { Get(s)->~Fn(); },
    };
  };
  template <typename Fn>
  struct HeapOps {
    static Fn*& Get(void* s) { return *static_cast<Fn**>(s); }
    static constexpr Ops kOps = {
        [](void* s, Args&&... args) -> R {
          return Call(*Get(s), std::forward<Args>(args)...);
        },
        [](void* from, void* to) noexcept {
          *static_cast<Fn**>(to) = Get(from);
        },
        [](void* s) noexcept { delete Get(s); },
    };
  };

  void MoveFrom(UniqueFunction& other) noexcept {
    if (other.ops_ != nullptr) {
      other.ops_->move(other.storage_, storage_);
      ops_ = std::exchange(other.ops_, nullptr);
    }
  }
  void Reset() noexcept {
    if (ops_ != nullptr) std::exchange(ops_, nullptr)->destroy(storage_);
  }

  alignas(std::max_align_t) std::byte storage_[kInlineSize];
  const Ops* ops_ = nullptr;
};

}  // namespace rdmarpc

#endif  // RDMARPC_UNIQUE_FUNCTION_H_
