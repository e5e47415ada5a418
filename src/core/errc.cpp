// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/errc.hpp"

#include <string>

namespace sluice {
namespace {

// boost::system::error_category's destructor is protected and non-virtual by design: categories
// are never deleted through a base pointer.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"

class sluice_error_category final : public boost::system::error_category {
public:
    // A fixed id, so that categories compare equal across shared objects (as Beast does).
    sluice_error_category() noexcept
        : boost::system::error_category(0x736c7569636531ULL) {}

    const char* name() const noexcept override { return "sluice"; }

    std::string message(int ev) const override {
        switch (static_cast<errc>(ev)) {
        case errc::redis_unavailable:
            return "redis unavailable";
        case errc::redis_timeout:
            return "redis command timed out";
        case errc::bad_reply:
            return "unexpected redis reply";
        case errc::upstream_exhausted:
            return "no upstream connection available";
        case errc::request_too_large:
            return "request too large";
        case errc::too_many_held:
            return "too many held requests";
        case errc::upstream_unresolved:
            return "upstream host name not resolved in time";
        }
        return "sluice error";
    }
};

#pragma GCC diagnostic pop

} // namespace

const boost::system::error_category& sluice_category() noexcept {
    static const sluice_error_category category;
    return category;
}

} // namespace sluice
