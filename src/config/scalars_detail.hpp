// SPDX-License-Identifier: Apache-2.0
#pragma once

// Pure text parsers for configuration scalars. No yaml-cpp here, so tests can use them directly.

#include "sluice/config/config.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config::detail {

/// The longest duration a configuration may express (about a century): every later addition to
/// a time point stays far from overflow, and the Lua script's doubles stay exact in whole ms.
inline constexpr double max_duration_ms = 3.2e12;

/// A parsed value, or why the text is not one.
template <class T>
struct parsed {
    std::optional<T> value;
    std::string error; // set when `value` is empty

    static parsed fail(std::string why) { return {std::nullopt, std::move(why)}; }
};

/// A decimal integer with an optional '-' ("50", "-1"); nothing else, not even '+' or spaces.
std::optional<std::int64_t> parse_int(std::string_view text) noexcept;

/// A finite decimal number ("5", "0.5", "-2"); no inf, no nan.
std::optional<double> parse_number(std::string_view text) noexcept;

/// true/false, yes/no, on/off (lower, Capitalised or UPPER case), as YAML 1.1 spells booleans.
std::optional<bool> parse_bool(std::string_view text) noexcept;

/**
 * A duration: a plain number is seconds (fractions allowed: "1.5"), or one or more parts
 * "NUMBER UNIT" with the units `d`, `h`, `m`, `s`, `ms`, largest first and each at most once
 * ("500ms", "30s", "5m", "1h", "0.5s", "2m30s", "1h30m", "1d"). Rounded to whole milliseconds.
 * A leading '-' parses (the caller's range check reports it); more than `max_duration_ms` does
 * not.
 */
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) noexcept;

/**
 * A rate in requests per second: a plain number ("5", "0.5"), or a number followed by `r/s`,
 * `r/m` or `r/h` ("10r/s", "600r/m", "100r/h"), as nginx writes rates. Finite; the caller checks
 * the range.
 */
std::optional<double> parse_rate(std::string_view text) noexcept;

/**
 * A byte size: a number, optionally followed by a unit: k/K/kB/KB/Ki/KiB, M/MB/Mi/MiB, G/GB/Gi/GiB,
 * every one 1024-based as nginx's (2^10, 2^20, 2^30; see size_units in scalars.cpp); B is bytes.
 * A fraction is allowed when the result is a whole number of bytes ("1.5M" = 1572864). nullopt
 * on overflow.
 */
std::optional<std::uint64_t> parse_size(std::string_view text) noexcept;

/// "'text'".
std::string quoted(std::string_view text);

/// Whether a message may quote the text it is about: not a value substituted from an environment
/// variable, which may be a secret (messages are logged).
enum class echo { shown, hidden };

/// `quoted(text)` when shown; when hidden, `otherwise`, which names the text without its content
/// ("the host").
std::string quoted(std::string_view text, echo e, std::string_view otherwise);

/// A DNS name (RFC 1123 labels, at most 253 bytes) or an IPv4 literal (no brackets, no IPv6).
bool is_host_name(std::string_view host);

// The address parsers' errors quote a part of `text` only when `e` is echo::shown.

/// "host:port", "[v6]:port" or ":port" (0.0.0.0) for a listening socket; port 0 means "any free
/// port".
parsed<endpoint_address> parse_listen(std::string_view text, echo e);

/// A Redis node: "host", "host:port", "[v6]" or "[v6]:port", port 1..65535, `default_port` when
/// left out. A unix socket path is refused: Cluster announces TCP addresses, Sentinel gives one.
parsed<endpoint_address>
parse_node_address(std::string_view text, std::uint16_t default_port, echo e);

/// The upstream URL: http://host[:port] with an empty or "/" path. Fills host and port (default
/// 80).
parsed<endpoint_address> parse_upstream_url(std::string_view text, echo e);

/// A duration the way an operator writes it: "25s", "1.5s", "500ms", "5m", "2h".
std::string format_duration(std::chrono::milliseconds d);

/// The shortest text that reads back as `value`: "2", "0.5".
std::string format_number(double value);

/// Optimal-string-alignment distance (insertions, deletions, substitutions, transpositions).
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate nearest to `word` when it is within edit distance 2, else an empty string.
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

} // namespace sluice::config::detail
