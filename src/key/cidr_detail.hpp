// SPDX-License-Identifier: Apache-2.0
#pragma once

// Address parsing pieces shared by cidr.cpp and client_address.cpp.

#include "sluice/key/cidr.hpp"

#include <array>
#include <cstdint>
#include <string_view>

namespace sluice::key::detail {

/// Strict dotted quad into out[0..3]; false if `text` is anything else.
bool parse_v4(std::string_view text, std::uint8_t* out) noexcept;

/// RFC 4291 text (no brackets, no zone) into 16 bytes, IPv4-mapped left as is.
bool parse_v6(std::string_view text, std::array<std::uint8_t, 16>& out) noexcept;

bool is_v4_mapped(const std::array<std::uint8_t, 16>& bytes) noexcept;

/// Whether the bytes are in NAT64's well-known prefix 64:ff9b::/96 (RFC 6052), which carries an
/// IPv4 address in its last 4 bytes.
bool is_nat64_well_known(const std::array<std::uint8_t, 16>& bytes) noexcept;

/// The address for 16 IPv6 bytes, turning IPv4-mapped ones into IPv4.
ip_address from_v6_bytes(const std::array<std::uint8_t, 16>& bytes) noexcept;

/// Clears every bit after the first `prefix` bits (0 <= prefix <= 32 or 128).
void mask(ip_address& address, int prefix) noexcept;

} // namespace sluice::key::detail
