// The echo benchmark: raw TCP baselines (blocking, busy-polling and epoll
// ping-pongs, an Asio-only ping-pong, a one-way stream).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "tools/benchmarks/bench.h"

namespace rdmarpc::bench {
namespace {

// A connected loopback TCP pair, TCP_NODELAY both ways.
struct TcpPair {
  int client = -1, server = -1;
  TcpPair() {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        listen(listener, 1) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) !=
            0) {
      std::perror("bench: raw tcp listen");
      std::exit(1);
    }
    client = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client, reinterpret_cast<sockaddr*>(&address), length) != 0) {
      std::perror("bench: raw tcp connect");
      std::exit(1);
    }
    server = accept(listener, nullptr, nullptr);
    close(listener);
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~TcpPair() {
    close(client);
    close(server);
  }
};

bool ReadAll(int fd, std::byte* data, size_t size) {
  while (size > 0) {
    const ssize_t n = read(fd, data, size);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}
// Reads `size` bytes without blocking in recv; `when_empty` runs each time
// the socket has nothing yet (it waits, or not) and returns false to give up.
template <typename WhenEmpty>
bool ReadWithoutBlocking(int fd, std::byte* data, size_t size,
                         WhenEmpty when_empty) {
  while (size > 0) {
    const ssize_t n = recv(fd, data, size, MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) return false;
    if (errno == EAGAIN && !when_empty()) return false;
  }
  return true;
}
bool WriteAll(int fd, const std::byte* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The same ping-pong on Asio, used as rdmarpc's transport uses it, with
// nothing of rdmarpc: each side its own io_context thread; async_wait until
// the socket is readable, non-blocking recv until the message is whole, send
// the next one at once, wait again. This is the floor for an event-driven
// stack on Asio (a wait in epoll, a handler dispatch, a re-armed wait per
// message): the part of the RPC/raw ratio that no RPC code can remove.
class AsioEchoSide {
 public:
  // The client side (`rtt` given) sends first and times each round trip
  // into `rtt`; the server side (nullptr) answers each message it receives.
  AsioEchoSide(int fd, size_t size, int messages, std::vector<double>* rtt)
      : socket_(context_, boost::asio::ip::tcp::v4(), dup(fd)),
        size_(size),
        left_(messages),
        rtt_(rtt),
        buffer_(std::max<size_t>(size, 1)) {
    socket_.non_blocking(true);
  }
  void Run() {
    if (rtt_ != nullptr) Send();
    Wait();
    context_.run();
  }

 private:
  void Wait() {
    socket_.async_wait(boost::asio::socket_base::wait_read,
                       [this](const boost::system::error_code& error) {
                         if (!error) OnReadable();
                       });
  }
  void OnReadable() {
    for (;;) {
      const ssize_t n =
          recv(socket_.native_handle(), buffer_.data() + got_, size_ - got_, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
      if (n < 0) break;  // Nothing more yet: wait.
      got_ += static_cast<size_t>(n);
      if (got_ < size_) continue;
      got_ = 0;
      if (rtt_ != nullptr) {
        rtt_->push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - t0_)
                .count());
        if (--left_ == 0) return;
        Send();
      } else {
        Send();
        if (--left_ == 0) return;
      }
    }
    Wait();
  }
  void Send() {
    if (rtt_ != nullptr) t0_ = Clock::now();
    const int fd = socket_.native_handle();
    for (size_t sent = 0; sent < size_;) {
      const ssize_t n =
          send(fd, buffer_.data() + sent, size_ - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno == EAGAIN) {
        boost::system::error_code ignored;
        socket_.wait(boost::asio::socket_base::wait_write, ignored);
      } else {
        return;
      }
    }
  }

  boost::asio::io_context context_{1};
  boost::asio::ip::tcp::socket socket_;
  const size_t size_;
  int left_;
  std::vector<double>* const rtt_;
  std::vector<std::byte> buffer_;
  size_t got_ = 0;
  Clock::time_point t0_;
};

}  // namespace

std::vector<double> AsioTcpPingPong(size_t size, int warmup, int iters) {
  TcpPair pair;
  std::vector<double> rtt;
  rtt.reserve(warmup + iters);
  AsioEchoSide server(pair.server, size, warmup + iters, nullptr);
  AsioEchoSide client(pair.client, size, warmup + iters, &rtt);
  std::thread echo([&] {
    PinTo(1);
    server.Run();
  });
  PinTo(0);
  client.Run();
  echo.join();
  rtt.erase(rtt.begin(), rtt.begin() + std::min<size_t>(rtt.size(), warmup));
  std::sort(rtt.begin(), rtt.end());
  return rtt;
}

namespace {

// The ping-pong as the least an event-driven loop does, without Asio: each
// side's socket non-blocking and registered once (edge-triggered) with its own
// epoll instance; a message is read with recv until it is whole, waiting in
// epoll_wait whenever the socket is empty, and answered with write. Against
// the blocking ping-pong it adds only the wait in epoll before each read:
// the kernel's share of the cost of being event-driven.
class EpollSide {
 public:
  // Reads never block (MSG_DONTWAIT, then epoll); the socket itself stays
  // blocking, so a message larger than its buffer (4 MiB) is written whole.
  explicit EpollSide(int fd) : fd_(fd), epoll_(epoll_create1(EPOLL_CLOEXEC)) {
    epoll_event event{};
    event.events = EPOLLIN | EPOLLET;
    if (epoll_ < 0 || epoll_ctl(epoll_, EPOLL_CTL_ADD, fd_, &event) != 0) {
      std::perror("bench: epoll");
      std::exit(1);
    }
  }
  ~EpollSide() { close(epoll_); }
  EpollSide(const EpollSide&) = delete;
  EpollSide& operator=(const EpollSide&) = delete;

  bool Read(std::byte* data, size_t size) {
    return ReadWithoutBlocking(fd_, data, size, [this] {
      epoll_event event;
      return epoll_wait(epoll_, &event, 1, -1) >= 0 || errno == EINTR;
    });
  }
  bool Write(const std::byte* data, size_t size) {
    return WriteAll(fd_, data, size);
  }

 private:
  const int fd_;
  const int epoll_;
};

// The blocking ping-pong's side: read and write block until done.
class BlockingSide {
 public:
  explicit BlockingSide(int fd) : fd_(fd) {}
  bool Read(std::byte* data, size_t size) { return ReadAll(fd_, data, size); }
  bool Write(const std::byte* data, size_t size) {
    return WriteAll(fd_, data, size);
  }

 private:
  const int fd_;
};

// The busy-polling ping-pong's side: the socket is non-blocking and read
// again at once while empty, as rdmarpc's busy and hybrid modes read it:
// no sleep, no wake-up. The raw baseline for --poll busy|hybrid over TCP.
class BusySide {
 public:
  explicit BusySide(int fd) : fd_(fd) {}
  bool Read(std::byte* data, size_t size) {
    return ReadWithoutBlocking(fd_, data, size, [] { return true; });
  }
  bool Write(const std::byte* data, size_t size) {
    return WriteAll(fd_, data, size);
  }

 private:
  const int fd_;
};

// Round trips of `size` bytes each way over a fresh loopback pair, in µs,
// sorted: the client on CPU 0 times each; an echo thread on CPU 1 answers.
// `Side` reads and writes whole messages on one socket.
template <typename Side>
std::vector<double> TcpPingPong(size_t size, int warmup, int iters) {
  TcpPair pair;
  std::vector<std::byte> buffer(std::max<size_t>(size, 1));
  PinTo(0);
  std::thread echo([&] {
    PinTo(1);
    Side side(pair.server);
    std::vector<std::byte> message(buffer.size());
    for (int i = 0; i < warmup + iters; ++i) {
      if (!side.Read(message.data(), size) ||
          !side.Write(message.data(), size)) {
        return;
      }
    }
  });
  Side side(pair.client);
  std::vector<double> rtt;
  rtt.reserve(iters);
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = Clock::now();
    if (!side.Write(buffer.data(), size) || !side.Read(buffer.data(), size)) {
      // The echo thread would wait for the rest forever: end its reads.
      std::perror("bench: raw ping-pong");
      shutdown(pair.client, SHUT_RDWR);
      break;
    }
    if (i >= warmup) {
      rtt.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  }
  echo.join();
  std::sort(rtt.begin(), rtt.end());
  return rtt;
}

}  // namespace

std::vector<double> RawTcpPingPong(RawTcpLoop loop, size_t size, int warmup,
                                   int iters) {
  switch (loop) {
    case RawTcpLoop::kBlocking:
      return TcpPingPong<BlockingSide>(size, warmup, iters);
    case RawTcpLoop::kBusy:
      return TcpPingPong<BusySide>(size, warmup, iters);
    case RawTcpLoop::kEpoll:
      return TcpPingPong<EpollSide>(size, warmup, iters);
  }
  return {};
}

// `size` bytes one way then a 1-byte answer, `iters` times: GB/s.
double RawTcpBandwidth(size_t size, int iters, bool ack_each) {
  TcpPair pair;
  std::vector<std::byte> out(std::max<size_t>(size, 1));
  // Touched before the clock starts, as the RPC side's reused blocks are.
  std::vector<std::byte> buffer(out.size());
  PinTo(0);
  const std::byte kAck{1};
  std::thread sink([&] {
    PinTo(1);
    for (int i = 0; i < iters; ++i) {
      if (!ReadAll(pair.server, buffer.data(), size) ||
          (ack_each && !WriteAll(pair.server, &kAck, 1))) {
        return;
      }
    }
    if (!ack_each) WriteAll(pair.server, &kAck, 1);  // All of it was read.
  });
  std::byte ack;
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    WriteAll(pair.client, out.data(), size);
    if (ack_each) ReadAll(pair.client, &ack, 1);
  }
  if (!ack_each) ReadAll(pair.client, &ack, 1);
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  sink.join();
  return static_cast<double>(size) * iters / seconds / 1e9;
}

// `k` messages of `size` bytes in flight on one connection, for `seconds`
// after `warmup` seconds: the server side echoes each message once it is
// whole (blocking reads of up to 1 MiB, the whole messages written back
// together), the client keeps k messages' worth in flight with gathered
// writes from one buffer and counts a completion per `size` bytes back. No
// framing and no copies beyond the kernel's and the tail's: the most one
// connection's socket pair carries for a store-and-forward echo.
double RawTcpLoad(size_t size, int k, double warmup, double seconds) {
  TcpPair pair;
  std::thread echo([&] {
    PinTo(1);
    // Store and forward, as any server must: a message goes back once it is
    // whole. Reads take what has come (up to 1 MiB), the whole messages
    // among it go back in one write, a partial one waits for its rest.
    std::vector<std::byte> buffer(std::max<size_t>(size, 1 << 20) + (1 << 20));
    size_t held = 0;
    for (;;) {
      const ssize_t n = read(pair.server, buffer.data() + held,
                             std::min<size_t>(buffer.size() - held, 1 << 20));
      if (n <= 0) break;
      held += static_cast<size_t>(n);
      const size_t whole = held / size * size;
      if (whole == 0) continue;
      if (!WriteAll(pair.server, buffer.data(), whole)) break;
      std::memmove(buffer.data(), buffer.data() + whole, held - whole);
      held -= whole;
    }
    shutdown(pair.server, SHUT_WR);
  });
  double calls_per_s = 0;
  std::thread client([&] {
    PinTo(0);
    const int fd = pair.client;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    const std::vector<std::byte> message(size, std::byte{7});
    std::vector<std::byte> in(1 << 20);
    uint64_t sent = 0, received = 0;
    // Bytes of messages started: k at first, one more per completion.
    uint64_t started = uint64_t{size} * k;
    const auto start = Clock::now();
    const auto from = start + std::chrono::duration<double>(warmup);
    const auto until = from + std::chrono::duration<double>(seconds);
    bool counting = false;
    uint64_t counted_from = 0;
    Clock::time_point counted_at;
    for (;;) {
      const auto now = Clock::now();
      if (!counting && now >= from) {
        counting = true;
        counted_from = received / size;
        counted_at = now;
      }
      if (counting && now >= until) {
        calls_per_s = static_cast<double>(received / size - counted_from) /
                      std::chrono::duration<double>(now - counted_at).count();
        break;
      }
      pollfd p{fd, static_cast<short>(POLLIN | (sent < started ? POLLOUT : 0)),
               0};
      if (poll(&p, 1, 100) < 0 && errno != EINTR) break;
      if (p.revents & (POLLERR | POLLHUP)) break;
      if (sent < started && (p.revents & POLLOUT)) {
        std::array<iovec, 64> iov;
        size_t count = 0;
        uint64_t offset = sent % size, left = started - sent;
        while (count < iov.size() && left > 0) {
          const uint64_t piece = std::min<uint64_t>(size - offset, left);
          iov[count++] = {const_cast<std::byte*>(message.data()) + offset,
                          static_cast<size_t>(piece)};
          left -= piece;
          offset = 0;
        }
        const ssize_t n = writev(fd, iov.data(), static_cast<int>(count));
        if (n > 0) sent += static_cast<uint64_t>(n);
      }
      if (p.revents & POLLIN) {
        for (;;) {
          const ssize_t n = read(fd, in.data(), in.size());
          if (n <= 0) break;
          const uint64_t before = received / size;
          received += static_cast<uint64_t>(n);
          started += (received / size - before) * size;
        }
      }
    }
    // The echo side sees the end, answers what is in flight and stops.
    shutdown(fd, SHUT_WR);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    while (read(fd, in.data(), in.size()) > 0) {
    }
  });
  client.join();
  echo.join();
  return calls_per_s;
}

}  // namespace rdmarpc::bench
