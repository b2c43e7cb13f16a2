// rpc/builtin/client_admin.h: the admin endpoint of a process that is only a
// client.
#include "rpc/builtin/client_admin.h"

#include <chrono>

#include "rpc/builtin/prometheus.h"
#include "rpc/builtin/status_page.h"

namespace rdmarpc::rpc {

StatusOr<std::unique_ptr<ClientAdmin>> ClientAdmin::Start(
    std::string_view uri) {
  std::unique_ptr<ClientAdmin> admin(new ClientAdmin());
  AdminEndpoint::Pages pages;
  pages.metrics = [] { return PrometheusClientText(); };
  pages.status_html = [page = std::make_shared<StatusPage>()] {
    return page->RenderClient();
  };
  pages.healthy = [] { return true; };
  StatusOr<std::unique_ptr<AdminEndpoint>> endpoint =
      AdminEndpoint::Start(admin->loop_.context(), uri, std::move(pages));
  if (!endpoint.ok()) return endpoint.status();
  admin->endpoint_ = std::move(*endpoint);
  return admin;
}

ClientAdmin::~ClientAdmin() {
  endpoint_.reset();                     // Closes its sockets on the loop...
  loop_.Drain(std::chrono::seconds(1));  // ...which runs until they have.
}

}  // namespace rdmarpc::rpc
