// RingQueue: a FIFO over one growable array. Unlike std::deque, which
// allocates and frees a block every few elements as it flows, it allocates
// only when it grows past its largest size so far: a queue in steady state
// allocates nothing.
#ifndef RDMARPC_BASE_RING_QUEUE_H_
#define RDMARPC_BASE_RING_QUEUE_H_

#include <cassert>
#include <cstddef>
#include <utility>
#include <vector>

namespace rdmarpc {

template <typename T>
class RingQueue {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  T& front() {
    assert(size_ > 0);
    return slots_[head_];
  }
  T& back() {
    assert(size_ > 0);
    return (*this)[size_ - 1];
  }
  // The i-th element from the front.
  T& operator[](size_t i) {
    assert(i < size_);
    return slots_[(head_ + i) & (slots_.size() - 1)];
  }
  // By reference: an element moved in once, not into a parameter first
  // (a send queue's frame is a few hundred bytes).
  void push_back(T&& value) {
    if (size_ == slots_.size()) Grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(value);
    ++size_;
  }
  void push_back(const T& value) {
    if (size_ == slots_.size()) Grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = value;
    ++size_;
  }
  void push_front(T value) {
    if (size_ == slots_.size()) Grow();
    head_ = (head_ + slots_.size() - 1) & (slots_.size() - 1);
    slots_[head_] = std::move(value);
    ++size_;
  }
  // Destroys the front element's contents now (a released Buffer returns to
  // its owner at once).
  void pop_front() {
    assert(size_ > 0);
    slots_[head_] = T();
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }
  void pop_back() {
    assert(size_ > 0);
    back() = T();
    --size_;
  }
  void clear() {
    while (!empty()) pop_front();
  }

 private:
  void Grow() {  // Capacity stays a power of two.
    std::vector<T> bigger(slots_.empty() ? 8 : 2 * slots_.size());
    for (size_t i = 0; i < size_; ++i) {
      bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    }
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_RING_QUEUE_H_
