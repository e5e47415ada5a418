// SPDX-License-Identifier: Apache-2.0
#include "sluice/key/rate_limit_key.hpp"

#include "sluice/core/text.hpp"
#include "sluice/key/cidr.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace sluice::key {

namespace {

constexpr std::string_view key_prefix = "rate-limit:";

// '*' matches any run of characters, possibly empty; `text` holds no '/' (one segment), so the
// classic single-backtrack-point algorithm is exact here: O(|pattern| × |text|) at worst.
bool segment_match(std::string_view pattern, std::string_view text) noexcept {
    std::size_t p = 0;
    std::size_t t = 0;
    std::size_t star = std::string_view::npos;
    std::size_t resume = 0;
    while (t < text.size()) {
        if (p < pattern.size() && pattern[p] == '*') {
            star = p++;
            resume = t;
        } else if (p < pattern.size() && pattern[p] == text[t]) {
            ++p;
            ++t;
        } else if (star != std::string_view::npos) {
            p = star + 1;
            t = ++resume;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') {
        ++p;
    }
    return p == pattern.size();
}

// Segment by segment: both must have the same number of segments, each matching its pattern.
bool glob_match(std::string_view pattern, std::string_view path) noexcept {
    for (;;) {
        const std::size_t pe = pattern.find('/');
        const std::size_t te = path.find('/');
        if (!segment_match(pattern.substr(0, pe), path.substr(0, te))) {
            return false;
        }
        if (pe == std::string_view::npos || te == std::string_view::npos) {
            return pe == te;
        }
        pattern.remove_prefix(pe + 1);
        path.remove_prefix(te + 1);
    }
}

bool path_matches(const config::rule& rule, std::string_view path) noexcept {
    const std::string_view pattern = rule.path;
    switch (rule.kind) {
    case config::rule::match_kind::exact:
        return path == pattern;
    case config::rule::match_kind::prefix:
        // The loader makes a prefix pattern one '*' at the very end; anything else built in
        // code is matched as the glob it is.
        if (pattern.ends_with('*') && pattern.find('*') == pattern.size() - 1) {
            return path.starts_with(pattern.substr(0, pattern.size() - 1));
        }
        break;
    case config::rule::match_kind::glob:
        break;
    }
    return glob_match(pattern, path);
}

bool method_matches(const config::rule& rule, std::string_view method) noexcept {
    if (rule.methods.empty()) {
        return true;
    }
    return std::any_of(rule.methods.begin(), rule.methods.end(), [method](const std::string& m) {
        return m == method;
    });
}

// One key part as a tag ("h=" or nothing) and its text.
struct piece {
    std::string_view tag;
    std::string_view text;
};

// A JSON field's text as a key part: a printable one only. A body's string can hold a newline,
// which would break the access log's line; leaving it out falls back to the client, as a
// missing field does, so nothing escapes the limit by it.
bool usable_json_part(std::string_view text) noexcept {
    return !text.empty() && std::none_of(text.begin(), text.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u < 0x20 || u == 0x7f;
    });
}

// A part longer than max_key_part is written as its first `shortened_head` bytes, '~' and the
// 16 hex digits of its digest: 257 bytes, longer than any part written whole, so a shortened
// part never equals one written whole.
constexpr std::size_t shortened_head = 240;
constexpr std::size_t shortened_size = shortened_head + 1 + 16;
static_assert(shortened_size > max_key_part);

// FNV-1a, 64 bits: the same on every instance and build (std::hash is neither promised), so
// that instances sharing a Redis agree on the key. Not a secret: whoever could make another
// client's digest knows that client's whole value, and could send it as it is.
std::uint64_t digest(std::string_view text) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (const char c : text) {
        h ^= static_cast<unsigned char>(c);
        h *= 0x100000001b3ULL;
    }
    return h;
}

std::size_t written_size(std::string_view part) noexcept {
    return part.size() <= max_key_part ? part.size() : shortened_size;
}

// Appends a key part, shortened when it is long: a path or a header value can be as long as
// the client's limits allow (8 KiB, 16 KiB by default), and the memory store holds up to
// max-keys of them.
void append_part(std::string& out, std::string_view part) {
    if (part.size() <= max_key_part) {
        out.append(part);
        return;
    }
    out.append(part.substr(0, shortened_head));
    fmt::format_to(std::back_inserter(out), "~{:016x}", digest(part));
}

// A header's or a JSON field's text as a key part: '%', ':', '{' and '}' percent-encoded. ':'
// separates the key's parts, and a "{...}" is a Redis Cluster hash tag: a client's "{x}" ahead
// of the key's own tag (`hash-tag: ip`) would choose the slot of its keys. '%' too, so that the
// encoding is one to one. Empty when the text needs none, as almost every text: it then goes
// as it is, with no copy.
std::string escaped_part(std::string_view text) {
    if (text.find_first_of("%:{}") == std::string_view::npos) {
        return {};
    }
    std::string out;
    out.reserve(text.size() + 8);
    for (const char c : text) {
        switch (c) {
        case '%':
            out += "%25";
            break;
        case ':':
            out += "%3A";
            break;
        case '{':
            out += "%7B";
            break;
        case '}':
            out += "%7D";
            break;
        default:
            out += c;
        }
    }
    return out;
}

// A tagged piece's text escaped into `storage` when it needs it (`escaped_part`). The text may
// be in `storage` already (`canonical`): it is read before `storage` changes.
piece escape(piece p, std::string& storage) {
    if (!p.tag.empty()) {
        auto escaped = escaped_part(p.text);
        if (!escaped.empty()) {
            storage = std::move(escaped);
            p.text = storage;
        }
    }
    return p;
}

constexpr bool is_upper(char c) noexcept {
    return c >= 'A' && c <= 'Z';
}

constexpr char to_lower(char c) noexcept {
    return is_upper(c) ? static_cast<char>(c - 'A' + 'a') : c;
}

// The one spelling of a Host value: HTTP and DNS compare host names case-insensitively (RFC
// 9110 4.2.3), a fully qualified name's trailing dot names the same host, an IPv6 literal has
// many spellings ("[::1]", "[0::1]"), and a port may be empty or carry leading zeros ("a:",
// "a:0080"). Each of these would be another key for one host behind an upstream that reads
// them alike: written as its name lower-cased without the dot (the literal as its canonical
// text), then the port's digits without leading zeros, if any. Into `storage` only when the
// value is not in that spelling already.
std::string_view canonical_host(std::string_view value, std::string& storage) {
    std::string_view host = value;
    std::string_view port;
    if (value.front() == '[') {
        const auto close = value.find(']');
        host = value.substr(0, close == std::string_view::npos ? value.size() : close + 1);
    } else {
        host = value.substr(0, std::min(value.find(':'), value.size()));
    }
    if (host.size() < value.size()) {
        if (value[host.size()] != ':') {
            return value; // no Host sluice lets through (is_host_and_port): left as it is
        }
        port = value.substr(host.size() + 1);
    }
    std::string literal; // an IPv6 literal's canonical text, when it parses
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
        // IPv6 only: an IPv4-mapped literal would parse as the IPv4 address it carries.
        if (const auto address = ip_address::parse(host.substr(1, host.size() - 2));
            address && !address->v4) {
            literal = "[" + address->to_string() + "]";
        }
    }
    const bool trailing_dot = literal.empty() && host.size() > 1 && host.back() == '.';
    const auto digits = port.substr(std::min(port.find_first_not_of('0'), port.size()));
    const auto port_text = !port.empty() && digits.empty() ? std::string_view("0") : digits;
    const bool same = (literal.empty() || literal == host) && !trailing_dot &&
                      std::none_of(host.begin(), host.end(), is_upper) &&
                      (port.empty() ? host.size() == value.size() : port_text == port);
    if (same) {
        return value;
    }
    storage = literal.empty() ? std::string(host.substr(0, host.size() - (trailing_dot ? 1 : 0)))
                              : literal;
    std::transform(storage.begin(), storage.end(), storage.begin(), to_lower);
    if (!port_text.empty()) {
        storage.push_back(':');
        storage.append(port_text);
    }
    return storage;
}

// The one spelling of credentials: their scheme is case-insensitive and one or more spaces
// part it from what follows (RFC 9110 11.4), so "Bearer t", "bearer t" and "BEARER  t" would be
// keys for one token that an upstream accepts alike: a client could spend one token's limit
// many times over. The scheme is lower-cased and one space kept; the credentials themselves
// are case-sensitive, and stay as sent, and so does a value without a space (no scheme to
// tell: a bare API key, whose case matters). Into `storage` only when the value needs it.
std::string_view canonical_credentials(std::string_view value, std::string& storage) {
    const auto scheme_end = value.find(' ');
    if (scheme_end == std::string_view::npos) {
        return value;
    }
    const auto rest_start = std::min(value.find_first_not_of(' ', scheme_end), value.size());
    const auto scheme = value.substr(0, scheme_end);
    if (rest_start == scheme_end + 1 && rest_start != value.size() &&
        std::none_of(scheme.begin(), scheme.end(), is_upper)) {
        return value;
    }
    storage.assign(scheme);
    std::transform(storage.begin(), storage.end(), storage.begin(), to_lower);
    if (rest_start != value.size()) {
        storage.push_back(' ');
        storage.append(value.substr(rest_start));
    }
    return storage;
}

// A header's value in the one spelling of what HTTP says is the same value, for the headers
// whose spelling a client may vary without changing what the upstream reads: `Host`,
// `Authorization` and `Proxy-Authorization`. Others go as sent.
piece canonical(const config::key_part& part, piece p, std::string& storage) {
    if (part.what != config::key_part::kind::header || p.tag.empty()) {
        return p;
    }
    if (iequals(part.header, "host")) {
        p.text = canonical_host(p.text, storage);
    } else if (iequals(part.header, "authorization") ||
               iequals(part.header, "proxy-authorization")) {
        p.text = canonical_credentials(p.text, storage);
    }
    return p;
}

piece resolve(const config::key_part& part,
              std::string_view client_part,
              std::string_view endpoint,
              const header_lookup& headers,
              const header_lookup& json_fields) {
    switch (part.what) {
    case config::key_part::kind::ip:
        return {{}, client_part};
    case config::key_part::kind::endpoint:
        return {{}, endpoint};
    case config::key_part::kind::global:
        return {{}, "*"};
    case config::key_part::kind::json: {
        const std::optional<std::string_view> value = json_fields(part.json.text);
        if (!value || !usable_json_part(*value)) {
            return {{}, client_part};
        }
        return {"j=", *value};
    }
    case config::key_part::kind::header:
        break;
    }
    const std::optional<std::string_view> value = headers(part.header);
    if (!value || value->empty()) {
        return {{}, client_part};
    }
    return {"h=", *value};
}

/// The page's own key shape, [ip, endpoint].
bool is_page_key(const config::limit& limit) noexcept {
    using kind = config::key_part::kind;
    return limit.key.size() == 2 && limit.key[0].what == kind::ip &&
           limit.key[1].what == kind::endpoint;
}

} // namespace

limit_keys request_limit_keys(const config::rule* rule,
                              std::span<const config::limit> limits,
                              std::string_view rule_name,
                              std::string_view client_part,
                              std::string_view normalized_path,
                              header_lookup headers,
                              header_lookup json_fields) {
    const bool pattern_key = rule != nullptr && rule->kind != config::rule::match_kind::exact;
    const std::string_view endpoint = pattern_key ? std::string_view(rule->path) : normalized_path;
    bool page_key_taken = false;
    const bool page_key_allowed = rule == nullptr || rule->methods.empty();
    limit_keys keys;
    for (std::size_t i = 0; i < limits.size(); ++i) {
        auto k = limit_key(limits[i], client_part, endpoint, headers, json_fields);
        if (!page_key_taken && page_key_allowed && is_page_key(limits[i])) {
            page_key_taken = true;
        } else {
            k.insert(key_prefix.size(), fmt::format("{}#{}:", rule_name, i));
        }
        keys.push_back(std::move(k));
    }
    return keys;
}

std::string make_key(std::string_view client, std::string_view endpoint) {
    std::string out;
    out.reserve(key_prefix.size() + written_size(client) + 1 + written_size(endpoint));
    out.append(key_prefix);
    append_part(out, client);
    out.push_back(':');
    append_part(out, endpoint);
    return out;
}

config::rule::match_kind classify_pattern(std::string_view pattern) noexcept {
    const std::size_t star = pattern.find('*');
    if (star == std::string_view::npos) {
        return config::rule::match_kind::exact;
    }
    if (star + 1 == pattern.size()) {
        return config::rule::match_kind::prefix;
    }
    return config::rule::match_kind::glob;
}

const config::rule* match_rule(std::span<const config::rule> rules,
                               std::string_view method,
                               std::string_view normalized_path) noexcept {
    for (const config::rule& rule : rules) {
        if (method_matches(rule, method) && path_matches(rule, normalized_path)) {
            return &rule;
        }
    }
    return nullptr;
}

std::string limit_key(const config::limit& limit,
                      std::string_view client_part,
                      std::string_view endpoint,
                      header_lookup headers,
                      header_lookup json_fields) {
    const std::size_t n = limit.key.size();
    if (n == 0) {
        return std::string(key_prefix) + "*";
    }
    // Resolve every part first (each header looked up once) to size the string exactly.
    std::array<piece, 8> cache;
    std::array<std::string, 8> escaped; // no allocation unless a part needs escaping
    const bool cached = n <= cache.size();
    std::size_t size = key_prefix.size() + n - 1;
    std::string scratch;
    for (std::size_t i = 0; i < n; ++i) {
        auto& storage = cached ? escaped[i] : scratch;
        const auto& part = limit.key[i];
        const piece p = escape(
            canonical(part, resolve(part, client_part, endpoint, headers, json_fields), storage),
            storage);
        if (cached) {
            cache[i] = p;
        }
        size += p.tag.size() + written_size(p.text);
    }
    std::string out;
    out.reserve(size);
    out.append(key_prefix);
    for (std::size_t i = 0; i < n; ++i) {
        const auto& part = limit.key[i];
        const piece p =
            cached ? cache[i]
                   : escape(canonical(part,
                                      resolve(part, client_part, endpoint, headers, json_fields),
                                      scratch),
                            scratch);
        if (i > 0) {
            out.push_back(':');
        }
        out.append(p.tag);
        append_part(out, p.text);
    }
    return out;
}

} // namespace sluice::key
