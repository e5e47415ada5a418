// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/rate_limit_headers.hpp"

#include "sluice/http/response_head.hpp"

#include <boost/beast/core/string.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <string>
#include <string_view>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;

/// An append target on the stack for the rate-limit values and lines, which are short: the
/// per-response path then allocates nothing of its own, and an append is a bounds check and a
/// copy (fmt's memory_buffer, before, was an out-of-line call per piece: 1.6k instructions per
/// response for the lines, by callgrind). What does not fit (a very long rule name) moves to a
/// string.
template <std::size_t N>
class stack_text {
public:
    void push_back(char c) {
        if (spilled_.empty() && size_ < data_.size()) {
            data_[size_++] = c;
        } else {
            spill(&c, 1);
        }
    }

    void append(const char* first, const char* last) {
        const auto n = static_cast<std::size_t>(last - first);
        if (spilled_.empty() && n <= data_.size() - size_) {
            std::memcpy(data_.data() + size_, first, n);
            size_ += n;
        } else {
            spill(first, n);
        }
    }

    std::string_view view() const noexcept {
        return spilled_.empty() ? std::string_view(data_.data(), size_) : spilled_;
    }

    void clear() noexcept {
        size_ = 0;
        spilled_.clear();
    }

private:
    void spill(const char* first, std::size_t n) {
        if (spilled_.empty()) {
            spilled_.assign(data_.data(), size_);
        }
        spilled_.append(first, n);
    }

    std::array<char, N> data_;
    std::size_t size_ = 0;
    std::string spilled_;
};

using value_buffer = stack_text<128>;
using line_buffer = stack_text<384>;

// std::to_chars, not fmt: these run on every response, and a format string costs more than the
// digits.
template <typename Out>
void append_int(Out& out, std::int64_t value) {
    std::array<char, 24> digits;
    char* end = std::to_chars(digits.data(), digits.data() + digits.size(), value).ptr;
    out.append(digits.data(), end);
}

template <typename Out>
void append_text(Out& out, std::string_view text) {
    out.append(text.data(), text.data() + text.size());
}

template <typename Out>
void append_sf_string(Out& out, std::string_view text) {
    out.push_back('"');
    const auto plain = [](char c) {
        const auto byte = static_cast<unsigned char>(c);
        return byte >= 0x20 && byte <= 0x7e && c != '"' && c != '\\';
    };
    if (std::all_of(text.begin(), text.end(), plain)) {
        append_text(out, text); // the usual rule name: nothing to escape, one copy
        out.push_back('"');
        return;
    }
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

template <typename Out>
void format_policy(Out& out, std::string_view name, const limiter::decision& d) {
    append_sf_string(out, name);
    append_text(out, ";q=");
    append_int(out, std::max<std::int64_t>(d.limit, 0));
    if (d.window.count() > 0) {
        append_text(out, ";w=");
        append_int(out, ceil_seconds(d.window));
    }
}

template <typename Out>
void format_rate_limit(Out& out, std::string_view name, const limiter::decision& d) {
    append_sf_string(out, name);
    append_text(out, ";r=");
    append_int(out, std::max<std::int64_t>(d.remaining, 0));
    // A concurrency limit frees slots when responses end, not on a clock: no reset to state.
    if (!d.in_flight) {
        append_text(out, ";t=");
        append_int(out, ceil_seconds(d.reset_after));
    }
}

// The fields sluice sets, in the order it sets them: the IETF draft's always, the older trio
// only with rate-limit.x-ratelimit-headers.
constexpr std::array<std::string_view, 2> ietf_fields{"RateLimit-Policy", "RateLimit"};
constexpr std::array<std::string_view, 3> x_ratelimit_fields{
    "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"};

/// Calls `emit(field, value)` for each rate-limit field of `decision`: the one place that says
/// which fields there are and what they hold, whether they go into a header sluice writes
/// itself or into an upstream response's.
template <typename Emit>
void for_each_field(std::string_view name,
                    const limiter::decision& decision,
                    bool x_ratelimit,
                    Emit&& emit) {
    value_buffer value;
    const auto field = [&](std::string_view field_name) {
        emit(field_name, value.view());
        value.clear();
    };
    format_policy(value, name, decision);
    field(ietf_fields[0]);
    format_rate_limit(value, name, decision);
    field(ietf_fields[1]);
    if (!x_ratelimit) {
        return;
    }
    append_int(value, std::max<std::int64_t>(decision.limit, 0));
    field(x_ratelimit_fields[0]);
    append_int(value, std::max<std::int64_t>(decision.remaining, 0));
    field(x_ratelimit_fields[1]);
    if (!decision.in_flight) {
        append_int(value, ceil_seconds(decision.reset_after));
        field(x_ratelimit_fields[2]);
    }
}

template <typename Out>
void format_lines(Out& out,
                  std::string_view name,
                  const limiter::decision& decision,
                  bool x_ratelimit) {
    for_each_field(
        name, decision, x_ratelimit, [&](std::string_view field, std::string_view value) {
            append_text(out, field);
            append_text(out, ": ");
            append_text(out, value);
            append_text(out, "\r\n");
        });
}

// Whether `name` is one of the fields we set (the X-RateLimit ones only when we set those).
bool is_ours(std::string_view name, bool x_ratelimit) {
    const auto named = [name](std::string_view field) {
        return boost::beast::iequals(name, field);
    };
    return std::any_of(ietf_fields.begin(), ietf_fields.end(), named) ||
           (x_ratelimit &&
            std::any_of(x_ratelimit_fields.begin(), x_ratelimit_fields.end(), named));
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
    return std::string(out.view());
}

std::string rate_limit_value(std::string_view name, const limiter::decision& decision) {
    value_buffer out;
    format_rate_limit(out, name, decision);
    return std::string(out.view());
}

void set_rate_limit_headers(bhttp::fields& fields,
                            std::string_view name,
                            const limiter::decision& decision,
                            bool x_ratelimit) {
    for_each_field(
        name, decision, x_ratelimit, [&](std::string_view field, std::string_view value) {
            fields.set(field, value);
        });
}

void append_rate_limit_lines(response_head& head,
                             std::string& lines,
                             std::string_view name,
                             const limiter::decision& decision,
                             bool x_ratelimit) {
    // Our fields are not among Beast's known ones: only unknown fields need a name compare.
    head.remove_if([x_ratelimit](const head_field& f) {
        return f.name() == bhttp::field::unknown && is_ours(f.name_string(), x_ratelimit);
    });
    // Formatted on the stack and appended once: every append to the string would check its
    // capacity, and there are a dozen small pieces.
    line_buffer buffer;
    format_lines(buffer, name, decision, x_ratelimit);
    lines += buffer.view();
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

std::string rejection_body(std::string_view name, int limit_index, std::int64_t retry_after) {
    std::string body = R"({"error":"rate_limited","limit":")";
    append_json_escaped(body, name);
    body += R"(","limit_index":)";
    body += std::to_string(limit_index);
    body += R"(,"retry_after":)";
    // 0: no estimate (a concurrency limit frees slots when responses end, not on a clock).
    body += retry_after > 0 ? std::to_string(retry_after) : std::string("null");
    body += '}';
    return body;
}

namespace {

// rejection_body's fields, then `"cost":<cost>,"<figure>":<value>`.
std::string with_cost(std::string_view name,
                      int limit_index,
                      std::int64_t retry_after,
                      std::int64_t cost,
                      std::string_view figure,
                      std::int64_t value) {
    auto body = rejection_body(name, limit_index, retry_after);
    body.pop_back(); // the closing brace
    body += R"(,"cost":)";
    body += std::to_string(cost);
    body += ",\"";
    body += figure;
    body += "\":";
    body += std::to_string(value);
    body += '}';
    return body;
}

} // namespace

std::string
never_fits_body(std::string_view name, int limit_index, std::int64_t cost, std::int64_t capacity) {
    return with_cost(name, limit_index, 0, cost, "capacity", capacity);
}

std::string cost_rejection_body(std::string_view name,
                                int limit_index,
                                std::int64_t retry_after,
                                std::int64_t cost,
                                std::int64_t remaining) {
    return with_cost(name, limit_index, retry_after, cost, "remaining", remaining);
}

} // namespace sluice::http
