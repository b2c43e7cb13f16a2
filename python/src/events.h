// EventQueue: how completions reach Python without an Asio thread taking the
// GIL.
//
// Every callback the library runs on its own threads (a call's completion, a
// stream's read or write, a server's incoming call, a cancellation) does one
// thing: it pushes an Event, plain C++ data, onto the queue of the asyncio
// loop that started the operation, under a mutex. The push that finds the
// queue empty writes the queue's eventfd once; the loop watches that fd
// (loop.add_reader) and, on its own thread and with the GIL, drains every
// event at once and turns each into a Python value. So the library's threads
// never wait for Python, and Python pays one read(2) per batch, not per call.
#ifndef RDMARPC_PYTHON_EVENTS_H_
#define RDMARPC_PYTHON_EVENTS_H_

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "rdmarpc/metadata.h"
#include "rdmarpc/payload.h"
#include "rdmarpc/server_call.h"
#include "rdmarpc/status.h"

namespace rdmarpc::python {

enum class EventKind : uint8_t {
  kDone = 0,       // A call (or stream) ended: status, response, metadata.
  kMessage = 1,    // A stream's Read: a message, or none at its end.
  kWritten = 2,    // A stream's Write was taken (status).
  kIncoming = 3,   // A server's new call: `call`.
  kCancelled = 4,  // A server call was cancelled by its client or deadline.
};

struct Event {
  uint64_t token = 0;  // What the Python side waits on.
  EventKind kind = EventKind::kDone;
  Status status;
  std::optional<Payload> payload;
  std::shared_ptr<ResponseMetadata> metadata;
  std::shared_ptr<ServerCall> call;
};

class EventQueue {
 public:
  EventQueue() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (fd_ < 0)
      throw std::system_error(errno, std::generic_category(), "eventfd");
  }
  ~EventQueue() { close(fd_); }
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  int fd() const { return fd_; }

  // Any thread; never blocks on Python.
  void Push(Event event) {
    bool wake;
    {
      std::lock_guard lock(mu_);
      wake = events_.empty() && !armed_;
      if (wake) armed_ = true;
      events_.push_back(std::move(event));
    }
    if (wake) {
      const uint64_t one = 1;
      // EAGAIN (the counter is full) cannot happen: one write per drain.
      [[maybe_unused]] const ssize_t n = write(fd_, &one, sizeof(one));
    }
  }

  // The loop's thread: everything pushed so far.
  std::vector<Event> Drain() {
    uint64_t count;
    [[maybe_unused]] const ssize_t n = read(fd_, &count, sizeof(count));
    std::vector<Event> events;
    events.reserve(64);
    std::lock_guard lock(mu_);
    armed_ = false;
    events.swap(events_);
    return events;
  }

 private:
  const int fd_;
  std::mutex mu_;
  bool armed_ = false;  // The fd is readable and not yet drained.
  std::vector<Event> events_;
};

}  // namespace rdmarpc::python

#endif  // RDMARPC_PYTHON_EVENTS_H_
