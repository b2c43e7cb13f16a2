// ClientLoops: the event-loop threads every Channel of a process shares.
//
// A Channel is a connection, not a thread: a client of 100 servers runs on
// a few loops, not 100. The pool starts with the first Channel and stops
// when the last one is gone; channels are spread over its loops round
// robin, so a channel's callbacks all run on one thread (its loop's), and
// channels on the same loop take turns on it. A callback that blocks holds
// up the other channels of its loop: hand long work to a thread of your own.
//
// Busy- and hybrid-polling channels (TransportOptions::polling) are not
// spread over the pool: each gets a loop to itself, since it spins that
// thread.
#ifndef RDMARPC_RPC_CLIENT_CLIENT_LOOPS_H_
#define RDMARPC_RPC_CLIENT_CLIENT_LOOPS_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "rpc/common/event_loop.h"

namespace rdmarpc::rpc {

class ClientLoops {
 public:
  // The process's pool, started if no Channel holds it now. Held by each
  // Channel; the last holder to let go stops its threads.
  static std::shared_ptr<ClientLoops> Shared();

  // Loops the pool runs: min(hardware threads, kMaxClientLoops), at least 1.
  static size_t DefaultSize();

  explicit ClientLoops(size_t size);
  // Stops and joins every loop. Must not run on one of them (Release does
  // that right).
  ~ClientLoops();
  ClientLoops(const ClientLoops&) = delete;
  ClientLoops& operator=(const ClientLoops&) = delete;

  // The next loop, round robin.
  EventLoop& Next();
  // True on one of this pool's threads.
  bool InLoopThread() const;
  size_t size() const { return loops_.size(); }

  // Drops a holder's reference. When it is the last and the caller runs on
  // one of the pool's own threads (a Channel destroyed in its callback),
  // another thread stops the pool: a thread cannot join itself.
  static void Release(std::shared_ptr<ClientLoops> pool);

 private:
  std::vector<std::unique_ptr<EventLoop>> loops_;
  std::atomic<size_t> next_{0};
};

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_CLIENT_CLIENT_LOOPS_H_
