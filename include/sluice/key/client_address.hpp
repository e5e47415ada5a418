// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/key/cidr.hpp"

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sluice::key {

/// Whether `address` lies inside one of the `trusted` proxy blocks: only such a peer's
/// X-Forwarded-For is read. Cost: O(trusted), no allocation.
bool is_trusted_proxy(const ip_address& address, std::span<const cidr> trusted) noexcept;

/**
 * The address a request is limited by.
 *
 * It is `peer` (the TCP peer), unless `peer` lies inside one of the `trusted` proxy blocks. Then
 * the X-Forwarded-For list (entries separated by ',', optional spaces and tabs around each;
 * several header lines joined by ", " by the caller) is walked from the right, the end the
 * nearest proxy wrote:
 *
 * - an entry that is itself trusted is a further proxy hop: remember it and go on left;
 * - the first entry that is not trusted is the client: return it;
 * - an entry that does not parse ("unknown", an obfuscated name, garbage) stops the walk: the
 *   answer is the last trusted hop seen, i.e. the entry to its right, or `peer` if none. We do
 *   not skip it, because whatever lies to its left was not verified by anyone we trust, and we
 *   do not fail, so a proxy that writes "unknown" costs its clients a shared bucket, never a 400;
 * - if every entry is trusted (or the list is empty), the left-most one (or `peer`) is returned.
 *
 * Accepted entry forms: "203.0.113.7", "203.0.113.7:4711", "2001:db8::1", "[2001:db8::1]" and
 * "[2001:db8::1]:4711" (the port is dropped). Empty list elements are ignored (RFC 9110 5.6.1).
 *
 * Cost: O(entries × trusted), no allocation.
 */
ip_address client_address(const ip_address& peer,
                          std::string_view x_forwarded_for,
                          std::span<const cidr> trusted) noexcept;

/**
 * One X-Forwarded-For entry in any of the forms client_address() accepts, leading and trailing
 * spaces and tabs included. nullopt if it is not an address.
 */
std::optional<ip_address> parse_forwarded_entry(std::string_view entry) noexcept;

/**
 * The `<ip>` part of a rate-limit key. IPv4: the dotted quad ("203.0.113.7"). IPv6: the
 * canonical network of `ipv6_prefix` bits with its length, so that one host's many addresses
 * share a bucket ("2001:db8:1:2::/64"); with a prefix of 128 (or more) the plain address.
 * `ipv6_prefix` below 0 is taken as 0. `text`, when not empty, is `address.to_string()` made
 * already (a connection's peer's, made once per connection).
 */
std::string client_key_part(const ip_address& address, int ipv6_prefix, std::string_view text = {});

} // namespace sluice::key
