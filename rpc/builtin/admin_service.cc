#include <atomic>
#include <memory>
#include <utility>

#include "rdmarpc/admin.h"
#include "rpc/builtin/admin.h"
#include "rpc/builtin/prometheus.h"
#include "rpc/builtin/status_page.h"

namespace rdmarpc {
namespace {

// The admin endpoint as the server's side endpoint: its pages read the
// server it belongs to.
class AdminSide final : public SideEndpoint {
 public:
  AdminSide(const Server& server, std::string listen,
            std::shared_ptr<const std::atomic<bool>> serving)
      : server_(server),
        listen_(std::move(listen)),
        serving_(std::move(serving)) {}

  Status Start(boost::asio::io_context& loop) override {
    rpc::AdminEndpoint::Pages pages;
    pages.metrics = [this] { return rpc::PrometheusText(server_); };
    pages.status_html = [this, page = std::make_shared<rpc::StatusPage>()] {
      return page->Render(server_);
    };
    pages.healthy = [serving = serving_] { return serving->load(); };
    StatusOr<std::unique_ptr<rpc::AdminEndpoint>> endpoint =
        rpc::AdminEndpoint::Start(loop, listen_, std::move(pages));
    if (!endpoint.ok()) return endpoint.status();
    endpoint_ = std::move(*endpoint);
    return Status();
  }

  std::string uri() const override {
    return endpoint_ ? endpoint_->uri() : std::string();
  }

 private:
  const Server& server_;
  const std::string listen_;
  const std::shared_ptr<const std::atomic<bool>> serving_;
  std::unique_ptr<rpc::AdminEndpoint> endpoint_;
};

// ServerOptions::admin_listen opens the endpoint when this library is
// linked in (the target is alwayslink).
const bool kAdminFromOptions = [] {
  internal::admin_from_options = [](Server& server, const std::string& uri) {
    EnableAdmin(server, uri);
  };
  return true;
}();

}  // namespace

void EnableAdmin(Server& server, std::string uri) {
  auto serving = std::make_shared<std::atomic<bool>>(true);
  // /healthz says 503 from the start of Shutdown.
  server.OnShutdown([serving] { serving->store(false); });
  server.AddSideEndpoint(
      std::make_unique<AdminSide>(server, std::move(uri), serving));
}

}  // namespace rdmarpc
