// SPDX-License-Identifier: Apache-2.0
#include "sluice/key/cidr.hpp"

#include "cidr_detail.hpp"
#include "sluice/core/text.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>

namespace sluice::key {

namespace {

// Appends `v` as lower-case hex without leading zeros (RFC 5952 4.1, 4.3).
void append_hex16(std::string& out, unsigned v) {
    char buf[4];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, 16);
    (void)ec; // four hex digits always fit
    out.append(buf, end);
}

// Groups `groups[0..count)` into `out` from group `first` on, most significant byte first.
void put_groups(std::array<std::uint8_t, 16>& out,
                int first,
                const std::uint16_t* groups,
                int count) noexcept {
    for (int i = 0; i < count; ++i) {
        const auto at = static_cast<std::size_t>(2 * (first + i));
        out[at] = static_cast<std::uint8_t>(groups[i] >> 8);
        out[at + 1] = static_cast<std::uint8_t>(groups[i] & 0xff);
    }
}

} // namespace

namespace detail {

bool parse_v4(std::string_view text, std::uint8_t* out) noexcept {
    // Strict dotted quad: exactly four decimal parts of 1-3 digits, no leading zeros (so "010"
    // cannot mean octal 8 to one parser and ten to another), each at most 255.
    std::size_t pos = 0;
    for (int part = 0; part < 4; ++part) {
        if (part > 0) {
            if (pos >= text.size() || text[pos] != '.') {
                return false;
            }
            ++pos;
        }
        std::size_t start = pos;
        unsigned value = 0;
        while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && pos - start < 3) {
            value = value * 10 + static_cast<unsigned>(text[pos] - '0');
            ++pos;
        }
        std::size_t digits = pos - start;
        if (digits == 0 || value > 255 || (digits > 1 && text[start] == '0')) {
            return false;
        }
        out[part] = static_cast<std::uint8_t>(value);
    }
    return pos == text.size();
}

bool parse_v6(std::string_view text, std::array<std::uint8_t, 16>& out) noexcept {
    // Groups before "::" go to `head`, after it to `tail`; "::" stands for one or more zero
    // groups (RFC 4291 2.2), so with it there may be at most 7 explicit groups, without it 8.
    std::uint16_t head[8] = {};
    std::uint16_t tail[8] = {};
    int n_head = 0;
    int n_tail = 0;
    bool gap = false;
    std::size_t pos = 0;
    const std::size_t n = text.size();
    if (n >= 2 && text[0] == ':' && text[1] == ':') {
        gap = true;
        pos = 2;
    } else if (n == 0 || text[0] == ':') {
        return false;
    }
    while (pos < n) {
        std::size_t start = pos;
        unsigned value = 0;
        while (pos < n && pos - start < 5) {
            const int digit = hex_digit_value(text[pos]);
            if (digit < 0) {
                break;
            }
            value = value * 16 + static_cast<unsigned>(digit);
            ++pos;
        }
        if (pos < n && text[pos] == '.') {
            // An embedded IPv4 address ends the text and fills the last two groups.
            std::uint8_t v4[4];
            if (n_head + n_tail > 6 || !parse_v4(text.substr(start), v4)) {
                return false;
            }
            std::uint16_t* groups = gap ? tail : head;
            int& count = gap ? n_tail : n_head;
            groups[count++] = static_cast<std::uint16_t>(v4[0] << 8 | v4[1]);
            groups[count++] = static_cast<std::uint16_t>(v4[2] << 8 | v4[3]);
            pos = n;
            break;
        }
        std::size_t digits = pos - start;
        if (digits == 0 || digits > 4 || n_head + n_tail >= 8) {
            return false;
        }
        (gap ? tail[n_tail++] : head[n_head++]) = static_cast<std::uint16_t>(value);
        if (pos == n) {
            break;
        }
        if (text[pos] != ':') {
            return false;
        }
        ++pos;
        if (pos < n && text[pos] == ':') {
            if (gap) {
                return false; // a second "::"
            }
            gap = true;
            ++pos;
        } else if (pos == n) {
            return false; // a single trailing ':'
        }
    }
    const int total = n_head + n_tail;
    if (gap ? total > 7 : total != 8) {
        return false;
    }
    out.fill(0);
    put_groups(out, 0, head, n_head);
    put_groups(out, 8 - n_tail, tail, n_tail); // the zeros of "::" lie between
    return true;
}

bool is_v4_mapped(const std::array<std::uint8_t, 16>& b) noexcept {
    for (int i = 0; i < 10; ++i) {
        if (b[i] != 0) {
            return false;
        }
    }
    return b[10] == 0xff && b[11] == 0xff;
}

bool is_nat64_well_known(const std::array<std::uint8_t, 16>& b) noexcept {
    static constexpr std::array<std::uint8_t, 12> prefix{0x00, 0x64, 0xff, 0x9b};
    return std::equal(prefix.begin(), prefix.end(), b.begin());
}

ip_address from_v6_bytes(const std::array<std::uint8_t, 16>& b) noexcept {
    ip_address a;
    if (is_v4_mapped(b)) {
        a.v4 = true;
        a.bytes[0] = b[12];
        a.bytes[1] = b[13];
        a.bytes[2] = b[14];
        a.bytes[3] = b[15];
        return a;
    }
    a.v4 = false;
    a.bytes = b;
    return a;
}

void mask(ip_address& address, int prefix) noexcept {
    const int bits = address.v4 ? 32 : 128;
    for (int i = 0; i < 16; ++i) {
        const int keep = prefix - 8 * i; // bits of byte i that belong to the network
        if (8 * i >= bits || keep <= 0) {
            address.bytes[i] = 0;
        } else if (keep < 8) {
            address.bytes[i] &= static_cast<std::uint8_t>(0xff << (8 - keep));
        }
    }
}

} // namespace detail

std::optional<ip_address> ip_address::parse(std::string_view text) noexcept {
    if (text.find(':') == std::string_view::npos) {
        ip_address a;
        if (!detail::parse_v4(text, a.bytes.data())) {
            return std::nullopt;
        }
        return a;
    }
    std::array<std::uint8_t, 16> b;
    if (!detail::parse_v6(text, b)) {
        return std::nullopt;
    }
    return detail::from_v6_bytes(b);
}

std::string ip_address::to_string() const {
    std::string out;
    if (v4) {
        out.reserve(15);
        for (int i = 0; i < 4; ++i) {
            if (i > 0) {
                out.push_back('.');
            }
            char buf[3];
            auto [end, ec] = std::to_chars(buf, buf + sizeof buf, unsigned{bytes[i]});
            (void)ec;
            out.append(buf, end);
        }
        return out;
    }
    // RFC 5952 4.2: "::" replaces the longest run of two or more zero groups, the first such
    // run when two are equally long; a single zero group is written as "0".
    unsigned groups[8];
    for (int i = 0; i < 8; ++i) {
        groups[i] = static_cast<unsigned>(bytes[2 * i] << 8 | bytes[2 * i + 1]);
    }
    int best = -1;
    int best_len = 1;
    for (int i = 0; i < 8;) {
        if (groups[i] != 0) {
            ++i;
            continue;
        }
        int j = i;
        while (j < 8 && groups[j] == 0) {
            ++j;
        }
        if (j - i > best_len) {
            best = i;
            best_len = j - i;
        }
        i = j;
    }
    out.reserve(39);
    for (int i = 0; i < 8; ++i) {
        if (i == best) {
            out.append("::");
            i += best_len - 1;
            continue;
        }
        if (i > 0 && out.back() != ':') {
            out.push_back(':');
        }
        append_hex16(out, groups[i]);
    }
    return out;
}

std::optional<cidr> cidr::parse(std::string_view text) noexcept {
    const std::size_t slash = text.find('/');
    const std::string_view addr_text = text.substr(0, slash);
    int prefix = -1;
    if (slash != std::string_view::npos) {
        // Decimal, no sign, no leading zeros, at most three digits.
        const std::string_view p = text.substr(slash + 1);
        if (p.empty() || p.size() > 3 || (p.size() > 1 && p[0] == '0')) {
            return std::nullopt;
        }
        prefix = 0;
        for (char c : p) {
            if (c < '0' || c > '9') {
                return std::nullopt;
            }
            prefix = prefix * 10 + (c - '0');
        }
    }
    cidr result;
    if (addr_text.find(':') == std::string_view::npos) {
        if (!detail::parse_v4(addr_text, result.network.bytes.data())) {
            return std::nullopt;
        }
        result.network.v4 = true;
        result.prefix = prefix < 0 ? 32 : prefix;
    } else {
        std::array<std::uint8_t, 16> b;
        if (!detail::parse_v6(addr_text, b)) {
            return std::nullopt;
        }
        result.prefix = prefix < 0 ? 128 : prefix;
        if (detail::is_v4_mapped(b)) {
            // Mapped addresses are stored as IPv4, so a block of them becomes an IPv4 block. A
            // shorter prefix would mix mapped and native IPv6 addresses: refuse it.
            if (result.prefix < 96 || result.prefix > 128) {
                return std::nullopt;
            }
            result.prefix -= 96;
        }
        result.network = detail::from_v6_bytes(b);
    }
    if (result.prefix > (result.network.v4 ? 32 : 128)) {
        return std::nullopt;
    }
    // Host bits are masked off: "10.1.2.3/8" is 10.0.0.0/8.
    detail::mask(result.network, result.prefix);
    return result;
}

bool cidr::contains(const ip_address& address) const noexcept {
    if (address.v4 != network.v4) {
        return false;
    }
    const int full = prefix / 8;
    for (int i = 0; i < full; ++i) {
        if (address.bytes[i] != network.bytes[i]) {
            return false;
        }
    }
    const int rest = prefix % 8;
    if (rest == 0) {
        return true;
    }
    const auto m = static_cast<std::uint8_t>(0xff << (8 - rest));
    return (address.bytes[full] & m) == network.bytes[full];
}

std::string cidr::to_string() const {
    std::string out = network.to_string();
    out.push_back('/');
    out.append(std::to_string(prefix));
    return out;
}

} // namespace sluice::key
