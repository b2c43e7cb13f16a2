// What the RDMA transport keeps per event loop (io_context): created with
// the loop's first RDMA connection and destroyed with the io_context.
//
// - loop_id(): a number that names the loop for as long as it lives and is
//   never given to another. Per-loop registries (CmChannel, CompletionGroup)
//   are keyed by it, not by the io_context's address: a new io_context may be
//   built at the address of one destroyed, and a registry keyed by address
//   would hand the new loop's connections a descriptor no running loop
//   watches (their calls then hang until keepalive closes them).
// - Hold/Release: the owner of a connection being set up. Nothing else holds
//   one until it is established (its rdma_cm events reach it through a weak
//   reference), so the loop holds it; when the loop is destroyed first, its
//   shutdown lets go of it, and the connection (QP, memory, descriptors) is
//   freed instead of holding itself forever.
#ifndef RDMARPC_TRANSPORT_RDMA_LOOP_STATE_H_
#define RDMARPC_TRANSPORT_RDMA_LOOP_STATE_H_

#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace rdmarpc::transport::rdma {

class LoopState : public boost::asio::execution_context::service {
 public:
  // `context`'s state, created on first use (thread-safe).
  static LoopState& Of(boost::asio::io_context& context);

  uint64_t loop_id() const { return id_; }

  // Keeps `owner` alive until Release(owner.get()) or the loop's shutdown.
  void Hold(std::shared_ptr<void> owner);
  // What Hold kept of `object` (null if nothing: released, or the loop is
  // shutting down). The caller decides when to drop it.
  std::shared_ptr<void> Release(const void* object);
  // How many are held (tests).
  size_t held();

  // For Asio.
  static inline boost::asio::execution_context::id id;
  explicit LoopState(boost::asio::execution_context& context);

 private:
  void shutdown() override;

  const uint64_t id_;
  std::mutex mu_;
  std::unordered_map<const void*, std::shared_ptr<void>> held_;
};

}  // namespace rdmarpc::transport::rdma

#endif  // RDMARPC_TRANSPORT_RDMA_LOOP_STATE_H_
