// The admin endpoint's status page (GET /, rpc/builtin/admin.h): plain HTML
// that refreshes itself every few seconds. Services and methods with their
// calls, errors, rate since the page was last made and p50/p99; the server's
// totals; each transport's counters; each open connection with its peer
// and counters; the server's options; this process's channels.
#ifndef RDMARPC_RPC_BUILTIN_STATUS_PAGE_H_
#define RDMARPC_RPC_BUILTIN_STATUS_PAGE_H_

#include <chrono>
#include <map>
#include <string>

#include "rdmarpc/server.h"

namespace rdmarpc::rpc {

class StatusPage {
 public:
  // The page for `server` now. Not thread-safe: it keeps the last counts to
  // give rates (the admin endpoint calls it under its lock).
  std::string Render(const Server& server);
  // The page of a process that is only a client (include/rdmarpc/admin.h):
  // its channels.
  std::string RenderClient();

 private:
  // The methods' table, with each one's call rate since the last render.
  void Methods(const Server& server, double elapsed, std::string& out);
  std::map<std::string, uint64_t> last_calls_;  // Per "service/method".
  std::chrono::steady_clock::time_point last_time_{};
};

// `text` with &, <, >, " and ' escaped for HTML.
std::string HtmlEscape(std::string_view text);

}  // namespace rdmarpc::rpc

#endif  // RDMARPC_RPC_BUILTIN_STATUS_PAGE_H_
