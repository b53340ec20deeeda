// runtime/errors.h — fastdyn's three error kinds, shared by every layer.
//
// UserError: the user's fault (bad argument, bad config); surfaces as Python ValueError/TypeError.
// BackendError: a backend (ATen, LLVM, NVRTC) refused; its message is kept verbatim.
// InternalError: a fastdyn bug; the frame falls back to eager and a warning is printed once.
#pragma once
#include <stdexcept>
#include <string>

namespace fastdyn {

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct BackendError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct InternalError : std::logic_error {
  using std::logic_error::logic_error;
};

#define FD_CHECK(cond, msg)                                                              \
  do {                                                                                   \
    if (!(cond))                                                                         \
      throw ::fastdyn::InternalError(std::string("fastdyn internal error: ") + (msg) +   \
                                     " (" __FILE__ ":" + std::to_string(__LINE__) + ")"); \
  } while (0)

}  // namespace fastdyn
