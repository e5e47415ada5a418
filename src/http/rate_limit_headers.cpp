// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/rate_limit_headers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;

// The values are short: formatting into an inline buffer keeps the per-response path free of
// allocations other than the fields themselves.
using value_buffer = fmt::basic_memory_buffer<char, 128>;

void append_sf_string(value_buffer& out, std::string_view text) {
    out.push_back('"');
    for (char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(c);
        } else if (byte < 0x20 || byte > 0x7e) {
            out.push_back('_');
        } else {
            out.push_back(c);
        }
    }
    out.push_back('"');
}

void format_policy(value_buffer& out, std::string_view name, const limiter::decision& d) {
    append_sf_string(out, name);
    fmt::format_to(std::back_inserter(out), ";q={}", std::max<std::int64_t>(d.limit, 0));
    if (d.window.count() > 0) {
        fmt::format_to(std::back_inserter(out), ";w={}", ceil_seconds(d.window));
    }
}

void format_rate_limit(value_buffer& out, std::string_view name, const limiter::decision& d) {
    append_sf_string(out, name);
    fmt::format_to(std::back_inserter(out),
                   ";r={};t={}",
                   std::max<std::int64_t>(d.remaining, 0),
                   ceil_seconds(d.reset_after));
}

std::string_view view(const value_buffer& buffer) {
    return {buffer.data(), buffer.size()};
}

} // namespace

std::int64_t ceil_seconds(std::chrono::milliseconds duration) noexcept {
    const auto ms = duration.count();
    return ms <= 0 ? 0 : (ms + 999) / 1000;
}

std::int64_t retry_after_seconds(std::chrono::milliseconds duration) noexcept {
    return std::max<std::int64_t>(1, ceil_seconds(duration));
}

std::string policy_value(std::string_view name, const limiter::decision& decision) {
    value_buffer out;
    format_policy(out, name, decision);
    return fmt::to_string(out);
}

std::string rate_limit_value(std::string_view name, const limiter::decision& decision) {
    value_buffer out;
    format_rate_limit(out, name, decision);
    return fmt::to_string(out);
}

void set_rate_limit_headers(bhttp::fields& fields,
                            std::string_view name,
                            const limiter::decision& decision,
                            bool x_ratelimit) {
    value_buffer value;
    format_policy(value, name, decision);
    fields.set("RateLimit-Policy", view(value));
    value.clear();
    format_rate_limit(value, name, decision);
    fields.set("RateLimit", view(value));
    if (!x_ratelimit) {
        return;
    }
    value.clear();
    fmt::format_to(std::back_inserter(value), "{}", std::max<std::int64_t>(decision.limit, 0));
    fields.set("X-RateLimit-Limit", view(value));
    value.clear();
    fmt::format_to(std::back_inserter(value), "{}", std::max<std::int64_t>(decision.remaining, 0));
    fields.set("X-RateLimit-Remaining", view(value));
    value.clear();
    fmt::format_to(std::back_inserter(value), "{}", ceil_seconds(decision.reset_after));
    fields.set("X-RateLimit-Reset", view(value));
}

void append_json_escaped(std::string& out, std::string_view text) {
    constexpr char hex[] = "0123456789abcdef";
    for (char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (byte < 0x20) {
                out += "\\u00";
                out += hex[byte >> 4];
                out += hex[byte & 0xf];
            } else {
                out += c;
            }
        }
    }
}

std::string rejection_body(std::string_view name, std::int64_t retry_after) {
    std::string body = R"({"error":"rate_limited","limit":")";
    append_json_escaped(body, name);
    body += R"(","retry_after":)";
    body += std::to_string(retry_after);
    body += '}';
    return body;
}

} // namespace sluice::http
