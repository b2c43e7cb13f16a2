// Private to the TcpConnection sources, which split one class by concern:
// setup and close (tcp_connection.cc), the receive path (tcp_receive.cc) and
// the send path (tcp_send.cc).
#ifndef RDMARPC_TRANSPORT_TCP_TCP_CONNECTION_INTERNAL_H_
#define RDMARPC_TRANSPORT_TCP_TCP_CONNECTION_INTERNAL_H_

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <string>

#include "transport/tcp/tcp_connection.h"
#include "transport/tls/tls.h"

namespace rdmarpc::transport::tcp {

// recv and sendmsg without glibc's cancellation bracketing. Both are
// cancellation points, so glibc enables and disables asynchronous
// cancellation around each call, on every message of both sides.
// These run only on rdmarpc's event-loop threads, which are never cancelled.
// Same results and errno as the libc calls. Sanitizer builds keep the libc
// calls, which the sanitizers intercept: TSan orders memory through the
// socket (a thread that writes and then sends happens before the one that
// receives), ASan checks the buffers.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline ssize_t Recv(int fd, void* data, size_t size) {
  return ::recv(fd, data, size, 0);
}
inline ssize_t SendMsg(int fd, const msghdr* message) {
  return ::sendmsg(fd, message, MSG_NOSIGNAL);
}
#else
inline ssize_t Recv(int fd, void* data, size_t size) {
  return syscall(SYS_recvfrom, fd, data, size, 0, nullptr, nullptr);
}
inline ssize_t SendMsg(int fd, const msghdr* message) {
  return syscall(SYS_sendmsg, fd, message, MSG_NOSIGNAL);
}
#endif

// "tcp://host:port" (or another scheme's) for the socket's peer.
inline std::string PeerUri(const boost::asio::ip::tcp::socket& socket,
                           const char* scheme) {
  boost::system::error_code ec;
  const auto endpoint = socket.remote_endpoint(ec);
  if (ec) return std::string(scheme) + "://?";
  const auto address = endpoint.address();
  const std::string host =
      address.is_v6() ? "[" + address.to_string() + "]" : address.to_string();
  return std::string(scheme) + "://" + host + ":" +
         std::to_string(endpoint.port());
}

// The connection whose received frames this thread is delivering. Frames
// sent meanwhile are written without a trip through the event loop: at once
// when the frame being delivered is the last one staged (a reply leaves
// before the handler's bookkeeping), otherwise together after the last one.
inline thread_local TcpConnection* delivering = nullptr;

template <typename Handler>
void TcpConnection::PostToLoop(Handler handler) {
  // The io_context executor, unlike the type-erased one, allocates the
  // handler with its own (pooled) allocator.
  if (loop_) {
    boost::asio::post(*loop_, std::move(handler));
  } else {
    boost::asio::post(socket_.get_executor(), std::move(handler));
  }
}

}  // namespace rdmarpc::transport::tcp

#endif  // RDMARPC_TRANSPORT_TCP_TCP_CONNECTION_INTERNAL_H_
