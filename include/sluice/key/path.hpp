// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sluice::key {

/**
 * The `<endpoint>` part of a rate-limit key: the path of an HTTP request-target in one canonical
 * spelling, so that "/a//b/./c", "/a/b/%63" and "http://host/a/b/c?x" share one bucket. The
 * rules (docs/keys.md has them in full):
 *
 * - origin-form ("/a/b?x#y") or absolute-form with an http or https scheme, any case
 *   ("http://host/a/b?x" gives "/a/b"); the query and fragment are dropped;
 * - "%XX" of an unreserved character (ALPHA DIGIT - . _ ~) is decoded, every other "%XX" keeps
 *   its encoding with upper-case hex; "%2F" in particular stays "%2F" and is no separator;
 * - a raw byte that RFC 3986 does not allow in a path (e.g. '|', '{', '"', bytes >= 0x80) is
 *   percent-encoded, so that it equals its encoded spelling;
 * - runs of '/' collapse to one, then "." and ".." segments are removed (RFC 3986 5.2.4, which
 *   also applies to "%2E" dots); ".." never climbs above the root; a trailing '/' is kept;
 * - an empty path becomes "/".
 *
 * nullopt when the target is not valid: empty, not starting with '/' unless absolute-form
 * http(s) with a non-empty authority, the asterisk-form "*" (only for OPTIONS: the caller answers
 * 400), an invalid percent-encoding ("%G1", a trailing "%4"), or a control character, space or
 * DEL anywhere in the target.
 *
 * Cost: one pass over the target and one std::string, reserved to the path's length.
 */
std::optional<std::string> normalize_path(std::string_view request_target);

} // namespace sluice::key
