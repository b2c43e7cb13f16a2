// include/rdmarpc/admin.h: the admin endpoint of a process that is only a
// client.
#include <chrono>
#include <memory>
#include <string>

#include "rdmarpc/admin.h"
#include "rpc/builtin/admin.h"
#include "rpc/builtin/prometheus.h"
#include "rpc/builtin/status_page.h"
#include "rpc/common/event_loop.h"

namespace rdmarpc {

StatusOr<std::unique_ptr<ClientAdmin>> ClientAdmin::Start(
    std::string_view uri) {
  std::unique_ptr<ClientAdmin> admin(new ClientAdmin());
  admin->loop_ = std::make_unique<rpc::EventLoop>();
  rpc::AdminEndpoint::Pages pages;
  pages.metrics = [] { return rpc::PrometheusClientText(); };
  pages.status_html = [page = std::make_shared<rpc::StatusPage>()] {
    return page->RenderClient();
  };
  pages.healthy = [] { return true; };
  StatusOr<std::unique_ptr<rpc::AdminEndpoint>> endpoint =
      rpc::AdminEndpoint::Start(admin->loop_->context(), uri, std::move(pages));
  if (!endpoint.ok()) return endpoint.status();
  admin->endpoint_ = std::move(*endpoint);
  return admin;
}

ClientAdmin::~ClientAdmin() {
  // Closes the endpoint's sockets on the loop, which runs until they have.
  endpoint_.reset();
  if (loop_) loop_->Drain(std::chrono::seconds(1));
}

const std::string& ClientAdmin::uri() const { return endpoint_->uri(); }

}  // namespace rdmarpc
