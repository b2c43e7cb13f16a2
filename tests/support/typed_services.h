// The generated services of tests/proto/multi.proto, implemented once for
// the suites that call them (typed_service_test, introspection_test) and
// hosted by TestServer, in this process or in tests/test_server on the
// other host (test_support.h):
//   Calculator.Add       a + b; OUT_OF_RANGE "negative" when a < 0
//   Calculator.Negate    -value, finished about 5 ms later from another
//                        thread
//   Calculator.Divide    the generated default: UNIMPLEMENTED
//   Clock.Echo           the stamp, its label + " (seen)"
//   Clock.Describe       "note: " + text; INVALID_ARGUMENT "note text is
//                        empty" when the text is empty
//   Blob.Bounce          the request's attachment back, and what it saw
//                        of it; FAILED_PRECONDITION for the label "fail"
#ifndef RDMARPC_TESTS_TYPED_SERVICES_H_
#define RDMARPC_TESTS_TYPED_SERVICES_H_

#include <memory>

#include "rdmarpc/service.h"

namespace rdmarpc::testing {

std::unique_ptr<rpc::Service> MakeCalculator();
std::unique_ptr<rpc::Service> MakeClock();
std::unique_ptr<rpc::Service> MakeBlob();

}  // namespace rdmarpc::testing

#endif  // RDMARPC_TESTS_TYPED_SERVICES_H_
