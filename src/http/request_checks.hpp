// SPDX-License-Identifier: Apache-2.0
#pragma once

// The checks of a request header that Beast's parser leaves to sluice (request_checks.cpp).

#include "http/message_types.hpp"
#include "sluice/config/config.hpp"

#include <boost/beast/http/status.hpp>

#include <optional>
#include <string_view>

namespace sluice::http::detail {

/// The answer to a request whose header could not be read or parsed; nullopt: close without
/// one (the client left, or was idle). `got_some`: part of a header had arrived.
std::optional<bhttp::status> header_error_status(const error_code& ec, bool got_some);

/**
 * The checks Beast's parser leaves to us, on a parsed header: target length (414), exactly one
 * Host in HTTP/1.1 and at most one before (400), a Host of host[:port] alone (400; empty only in
 * HTTP/1.0), a single plain Content-Length (400), Transfer-Encoding only as HTTP/1.1 chunked
 * alone, on one line (400), Expect only 100-continue (417). nullopt: the request is acceptable.
 */
std::optional<bhttp::status> check_request(const request_parser& parser, const config::config& cfg);

/**
 * Applies `server.headers-with-underscores` to a request's fields: a field whose name has an
 * underscore stays (allow), is taken out (drop), or refuses the request (reject). Returns how
 * many fields were taken out, or nullopt when the request is refused.
 */
std::optional<std::size_t> take_underscored_fields(header_fields& fields,
                                                   config::underscore_headers policy);

/// An absolute-form request target (RFC 9112 3.2.2) taken apart.
struct absolute_target {
    /// host[:port]; points into the target.
    std::string_view authority;
    /// The path and query, "/" when the path is empty.
    std::string origin_form;
};

/**
 * Splits an absolute-form `target` ("http://host[:port]/path?query", or https) into its authority
 * and origin-form. nullopt when it is not one, or an invalid one: another scheme, no host, user
 * info, characters no Host field may carry.
 */
std::optional<absolute_target> split_absolute_form(std::string_view target);

/**
 * Rewrites an absolute-form target to origin-form, its authority replacing every Host field, as
 * nginx does (RFC 9112 3.2.2: the authority wins); an upstream that is no proxy expects
 * origin-form. Other targets are left alone. False: an invalid absolute-form (a 400).
 */
bool rewrite_absolute_form(bhttp::request_header<header_fields>& req);

} // namespace sluice::http::detail
