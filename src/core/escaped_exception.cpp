// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/escaped_exception.hpp"

#include <spdlog/spdlog.h>

namespace sluice {

void log_escaped::operator()(std::exception_ptr e) const noexcept {
    if (!e) {
        return;
    }
    const auto log = [this](std::string_view reason) {
        if (throttle != nullptr) {
            log_throttled(
                *throttle, spdlog::level::err, "{} ended by an exception: {}", what, reason);
        } else {
            spdlog::error("{} ended by an exception: {}", what, reason);
        }
    };
    // Logged inside the handler: what() belongs to the exception object.
    try {
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& ex) {
            log(ex.what());
        } catch (...) {
            log("an exception of unknown type");
        }
    } catch (...) {
        // Out of memory formatting the line: nothing more can be said.
    }
}

} // namespace sluice
