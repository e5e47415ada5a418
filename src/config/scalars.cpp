// SPDX-License-Identifier: Apache-2.0
#include "scalars_detail.hpp"
#include "sluice/core/saturate.hpp"
#include "sluice/key/cidr.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>

namespace sluice::config::detail {
namespace {

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::string_view trim(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
        text.remove_prefix(1);
    }
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
        text.remove_suffix(1);
    }
    return text;
}

/// Splits "30s" into "30" and "s", "1.5 m" into "1.5" and "m".
std::pair<std::string_view, std::string_view> split_unit(std::string_view text) {
    std::size_t i = 0;
    while (i < text.size() && !is_alpha(text[i])) {
        ++i;
    }
    return {trim(text.substr(0, i)), text.substr(i)};
}

/// Digits with at most one '.', and at least one digit; an optional leading '-'.
bool is_plain_decimal(std::string_view text) {
    if (!text.empty() && text.front() == '-') {
        text.remove_prefix(1);
    }
    const auto dots = std::count(text.begin(), text.end(), '.');
    const auto digits = std::count_if(text.begin(), text.end(), is_digit);
    return digits > 0 && dots <= 1 && static_cast<std::size_t>(digits + dots) == text.size();
}

/**
 * Parses "host", "host:port", "[v6]" or "[v6]:port" (the port is required unless `default_port`
 * is given). IPv6 hosts are returned without brackets.
 */
parsed<endpoint_address> parse_authority(std::string_view text,
                                         std::optional<std::uint16_t> default_port,
                                         std::uint16_t min_port,
                                         echo e) {
    using result = parsed<endpoint_address>;
    endpoint_address out;
    std::string_view port_text;
    bool has_port = false;
    if (!text.empty() && text.front() == '[') {
        const auto close = text.find(']');
        if (close == std::string_view::npos) {
            return result::fail("missing ']' after the IPv6 address");
        }
        const auto host = text.substr(1, close - 1);
        const auto address = key::ip_address::parse(host);
        if (!address) {
            return result::fail(quoted(host, e, "the host") + " is not an IPv6 address");
        }
        out.host = std::string(host);
        const auto rest = text.substr(close + 1);
        if (!rest.empty() && rest.front() != ':') {
            return result::fail("expected ':port' after ']'");
        }
        has_port = !rest.empty();
        port_text = has_port ? rest.substr(1) : rest;
    } else {
        const auto colon = text.rfind(':');
        if (colon != std::string_view::npos && text.find(':') != colon) {
            return result::fail("an IPv6 address needs brackets, e.g. [::1]:8080");
        }
        has_port = colon != std::string_view::npos;
        const auto host = text.substr(0, has_port ? colon : text.size());
        if (host.empty()) {
            return result::fail("the host is missing");
        }
        if (!is_host_name(host)) {
            return result::fail(quoted(host, e, "the host") +
                                " is not a host name or IPv4 address");
        }
        out.host = std::string(host);
        port_text = has_port ? text.substr(colon + 1) : std::string_view{};
    }
    if (!has_port) {
        if (!default_port) {
            return result::fail("the port is missing");
        }
        out.port = *default_port;
        return {out, {}};
    }
    if (port_text.empty()) {
        return result::fail("the port is missing after ':'");
    }
    const auto port = parse_int(port_text);
    if (!port || *port < min_port || *port > 65535) {
        return result::fail("the port must be a number between " + std::to_string(min_port) +
                            " and 65535");
    }
    out.port = static_cast<std::uint16_t>(*port);
    return {out, {}};
}

/// Seconds as whole milliseconds; nullopt beyond the longest duration a configuration may hold.
std::optional<std::chrono::milliseconds> seconds_to_ms(double seconds) noexcept {
    const double ms = seconds * 1000;
    if (std::fabs(ms) > max_duration_ms) {
        return std::nullopt;
    }
    return saturating_ms(std::round(ms)); // |ms| <= 3.2e12: never saturates
}

/// Size units, every one 1024-based, as nginx's `k` and `m` are: `16k` in a config written for
/// nginx means what it meant there, and no existing config changes meaning. (Kubernetes' decimal
/// `M` = 10^6 would make `1M` here differ from `1m` in nginx.conf by 5%.)
constexpr std::uint64_t kibi = std::uint64_t{1} << 10;
constexpr std::uint64_t mebi = std::uint64_t{1} << 20;
constexpr std::uint64_t gibi = std::uint64_t{1} << 30;
constexpr std::array<std::pair<std::string_view, std::uint64_t>, 16> size_units{{{"", 1},
                                                                                 {"B", 1},
                                                                                 {"k", kibi},
                                                                                 {"K", kibi},
                                                                                 {"kB", kibi},
                                                                                 {"KB", kibi},
                                                                                 {"M", mebi},
                                                                                 {"MB", mebi},
                                                                                 {"G", gibi},
                                                                                 {"GB", gibi},
                                                                                 {"Ki", kibi},
                                                                                 {"KiB", kibi},
                                                                                 {"Mi", mebi},
                                                                                 {"MiB", mebi},
                                                                                 {"Gi", gibi},
                                                                                 {"GiB", gibi}}};

bool starts_with_nocase(std::string_view text, std::string_view prefix) {
    if (text.size() < prefix.size()) {
        return false;
    }
    return std::equal(prefix.begin(), prefix.end(), text.begin(), [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) ==
               std::tolower(static_cast<unsigned char>(b));
    });
}

} // namespace

bool is_host_name(std::string_view host) {
    if (host.empty() || host.size() > 253) {
        return false;
    }
    const bool numeric =
        std::all_of(host.begin(), host.end(), [](char c) { return is_digit(c) || c == '.'; });
    if (numeric) {
        return key::ip_address::parse(host).has_value();
    }
    // RFC 1123 labels: letters, digits and '-', neither first nor last ("-1" is no host).
    std::size_t label = 0;
    char previous = '.';
    for (const char c : host) {
        if (c == '.') {
            if (label == 0 || previous == '-') {
                return false;
            }
            label = 0;
        } else if (is_alpha(c) || is_digit(c) || (c == '-' && label > 0)) {
            ++label;
        } else {
            return false;
        }
        previous = c;
    }
    return label > 0 && previous != '-';
}

std::optional<std::int64_t> parse_int(std::string_view text) noexcept {
    std::int64_t value = 0;
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc{} || ptr != end) {
        return std::nullopt;
    }
    return value;
}

std::optional<double> parse_number(std::string_view text) noexcept {
    if (!is_plain_decimal(text)) {
        return std::nullopt;
    }
    double value = 0;
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (ec != std::errc{} || ptr != end || !std::isfinite(value)) {
        return std::nullopt;
    }
    return value;
}

std::optional<bool> parse_bool(std::string_view text) noexcept {
    static constexpr std::array<std::string_view, 9> yes{
        "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static constexpr std::array<std::string_view, 9> no{
        "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    if (std::find(yes.begin(), yes.end(), text) != yes.end()) {
        return true;
    }
    if (std::find(no.begin(), no.end(), text) != no.end()) {
        return false;
    }
    return std::nullopt;
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) noexcept {
    text = trim(text);
    // A plain number is seconds.
    if (const auto seconds = parse_number(text)) {
        return seconds_to_ms(*seconds);
    }
    const bool negative = !text.empty() && text.front() == '-';
    if (negative) {
        text.remove_prefix(1);
    }
    // One or more "NUMBER UNIT" parts, largest unit first, each unit at most once ("1h30m",
    // "2m30s", "1d"). The sum is checked after every part, so no part can overflow.
    static constexpr std::array<std::pair<std::string_view, double>, 5> units{
        {{"d", 86'400'000}, {"h", 3'600'000}, {"m", 60'000}, {"s", 1000}, {"ms", 1}}};
    std::size_t next_unit = 0;
    double ms = 0;
    while (!text.empty()) {
        const auto [number_text, rest] = split_unit(text);
        std::size_t unit_length = 0;
        while (unit_length < rest.size() && is_alpha(rest[unit_length])) {
            ++unit_length;
        }
        const auto unit = rest.substr(0, unit_length);
        const auto number = parse_number(number_text);
        if (!number || *number < 0 || unit.empty()) {
            return std::nullopt;
        }
        while (next_unit < units.size() && units[next_unit].first != unit) {
            ++next_unit;
        }
        if (next_unit == units.size()) {
            return std::nullopt; // unknown, repeated or out of order
        }
        ms += *number * units[next_unit].second;
        if (!(ms <= max_duration_ms)) {
            return std::nullopt;
        }
        ++next_unit;
        text = trim(rest.substr(unit_length));
    }
    if (next_unit == 0) {
        return std::nullopt; // a lone '-'
    }
    return saturating_ms(std::round(negative ? -ms : ms)); // |ms| <= 3.2e12: never saturates
}

std::optional<double> parse_rate(std::string_view text) noexcept {
    const auto [number_text, unit] = split_unit(trim(text));
    const auto number = parse_number(number_text);
    if (!number) {
        return std::nullopt;
    }
    if (unit.empty() || unit == "r/s") {
        return *number;
    }
    if (unit == "r/m") {
        return *number / 60;
    }
    if (unit == "r/h") {
        return *number / 3600;
    }
    return std::nullopt;
}

std::optional<std::uint64_t> parse_size(std::string_view text) noexcept {
    const auto [number_text, unit] = split_unit(trim(text));
    std::uint64_t scale = 0;
    for (const auto& [name, value] : size_units) {
        if (unit == name) {
            scale = value;
        }
    }
    if (scale == 0 || number_text.empty() || number_text.front() == '.' ||
        number_text.back() == '.' || !is_plain_decimal(number_text) || number_text.front() == '-') {
        return std::nullopt;
    }
    // Exact integer arithmetic, fractions included ("1.5M" = 15 * 10^6 / 10): a double would
    // round large sizes. Trailing zeros of the fraction change nothing, so they are dropped.
    const auto dot = number_text.find('.');
    auto whole = number_text.substr(0, dot);
    auto fraction =
        dot == std::string_view::npos ? std::string_view{} : number_text.substr(dot + 1);
    while (!fraction.empty() && fraction.back() == '0') {
        fraction.remove_suffix(1);
    }
    if (fraction.size() > 18) {
        return std::nullopt;
    }
    std::uint64_t mantissa = 0;
    std::uint64_t divisor = 1;
    constexpr auto max = std::numeric_limits<std::uint64_t>::max();
    for (const auto part : {whole, fraction}) {
        for (const char c : part) {
            const auto digit = static_cast<std::uint64_t>(c - '0');
            if (mantissa > (max - digit) / 10) {
                return std::nullopt;
            }
            mantissa = mantissa * 10 + digit;
        }
    }
    for (std::size_t i = 0; i < fraction.size(); ++i) {
        divisor *= 10;
    }
    // bytes = mantissa * scale / divisor, reduced first so that "18446744073.709551615G" fits.
    const auto common = std::gcd(scale, divisor);
    scale /= common;
    divisor /= common;
    if (mantissa % divisor != 0) {
        return std::nullopt; // not a whole number of bytes
    }
    mantissa /= divisor;
    if (mantissa > max / scale) {
        return std::nullopt;
    }
    return mantissa * scale;
}

parsed<endpoint_address> parse_listen(std::string_view text, echo e) {
    // ":8080" is every IPv4 interface, as in Go's net.Listen and nginx's `listen`.
    if (text.starts_with(':')) {
        std::string any = "0.0.0.0";
        any.append(text);
        return parse_authority(any, std::nullopt, 0, e);
    }
    return parse_authority(text, std::nullopt, 0, e);
}

parsed<endpoint_address>
parse_node_address(std::string_view text, std::uint16_t default_port, echo e) {
    if (text.starts_with('/')) {
        return parsed<endpoint_address>::fail(
            "a unix socket is not allowed here: the nodes are reached over TCP");
    }
    return parse_authority(text, default_port, 1, e);
}

parsed<endpoint_address> parse_upstream_url(std::string_view text, echo e) {
    using result = parsed<endpoint_address>;
    if (starts_with_nocase(text, "https://")) {
        return result::fail("https is not supported: sluice speaks plain HTTP to its upstream");
    }
    if (!starts_with_nocase(text, "http://")) {
        return result::fail("must start with http://");
    }
    auto rest = text.substr(7);
    const auto end = rest.find_first_of("/?#");
    const auto authority = rest.substr(0, end);
    const auto path = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
    if (authority.find('@') != std::string_view::npos) {
        return result::fail("user information ('user@') is not supported");
    }
    if (!path.empty() && path != "/") {
        std::string what = "must not have a path, query or fragment";
        if (e == echo::shown) {
            what += " (got " + quoted(path) + ")";
        }
        return result::fail(what + "; requests are forwarded with their own path");
    }
    return parse_authority(authority, 80, 1, e);
}

std::string quoted(std::string_view text) {
    // Appended piece by piece: GCC 12 misjudges `"'" + std::string(...)` (a false -Wrestrict).
    // A control byte is written as \xNN: a newline in a value (a block scalar, an environment
    // variable's) would break the one problem per line the messages promise.
    std::string out;
    out.reserve(text.size() + 2);
    out += '\'';
    for (const char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f) {
            constexpr std::string_view hex = "0123456789abcdef";
            out += "\\x";
            out += hex[u >> 4];
            out += hex[u & 0xf];
        } else {
            out += c;
        }
    }
    out += '\'';
    return out;
}

std::string quoted(std::string_view text, echo e, std::string_view otherwise) {
    return e == echo::shown ? quoted(text) : std::string(otherwise);
}

std::string format_duration(std::chrono::milliseconds d) {
    const auto ms = d.count();
    if (ms != 0 && ms % 3'600'000 == 0) {
        return std::to_string(ms / 3'600'000) + "h";
    }
    if (ms != 0 && ms % 60'000 == 0) {
        return std::to_string(ms / 60'000) + "m";
    }
    if (ms % 1000 == 0) {
        return std::to_string(ms / 1000) + "s";
    }
    if (ms > -1000 && ms < 1000) {
        return std::to_string(ms) + "ms";
    }
    return format_number(static_cast<double>(ms) / 1000) + "s";
}

std::string format_number(double value) {
    std::array<char, 32> buffer{};
    const auto [ptr, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
    return ec == std::errc{} ? std::string(buffer.data(), ptr) : std::string("?");
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
    // Three rolling rows of the classic table; the third one supports transpositions.
    std::vector<std::size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) {
        previous[j] = j;
    }
    for (std::size_t i = 1; i <= a.size(); ++i) {
        current[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
                current[j] = std::min(current[j], before[j - 2] + 1);
            }
        }
        std::swap(before, previous);
        std::swap(previous, current);
    }
    return previous[b.size()];
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
    // A difference only in case is the likeliest slip ("leaky_bucket" for "LEAKY_BUCKET").
    for (const auto& candidate : candidates) {
        if (candidate.size() == word.size() && starts_with_nocase(candidate, word)) {
            return candidate;
        }
    }
    std::string best;
    std::size_t best_distance = 3;
    for (const auto& candidate : candidates) {
        const auto distance = edit_distance(word, candidate);
        if (distance < best_distance) {
            best = candidate;
            best_distance = distance;
        }
    }
    return best;
}

} // namespace sluice::config::detail
