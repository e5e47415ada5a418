// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <boost/system/error_code.hpp>

#include <type_traits>

namespace sluice {

/// sluice's own error conditions on I/O paths, carried in a `boost::system::error_code`.
enum class errc {
    /// Redis could not be reached (connect failed, connection lost, reply was NULL).
    redis_unavailable = 1,
    /// A Redis command got no reply within `rate-limit.redis.timeout`.
    redis_timeout,
    /// Redis answered with an error or a reply of an unexpected shape.
    bad_reply,
    /// No upstream connection could be had: every one a worker may open
    /// (`upstream.max-connections`) stayed in use for `upstream.timeout`.
    upstream_exhausted,
    /// The request exceeds a configured size limit.
    request_too_large,
    /// sluice holds as many requests as `rate-limit.max-held` allows.
    too_many_held,
    /// The upstream's host name has no address yet: its lookup did not answer within
    /// `upstream.connect-timeout`.
    upstream_unresolved,
};

const boost::system::error_category& sluice_category() noexcept;

inline boost::system::error_code make_error_code(errc e) noexcept {
    return {static_cast<int>(e), sluice_category()};
}

} // namespace sluice

template <>
struct boost::system::is_error_code_enum<sluice::errc> : std::true_type {};
