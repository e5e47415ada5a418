// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/rate_limit_headers.hpp"

#include "sluice/core/text.hpp"
#include "sluice/http/response_head.hpp"

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

    void append(std::string_view text) {
        if (spilled_.empty() && text.size() <= data_.size() - size_) {
            std::memcpy(data_.data() + size_, text.data(), text.size());
            size_ += text.size();
        } else {
            spill(text.data(), text.size());
        }
    }

    // std::to_chars, not fmt: these run on every response, and a format string costs more than
    // the digits. The digits go where they belong when there is room, not through a copy.
    void append_int(std::int64_t value) {
        constexpr std::size_t widest = 20; // "-9223372036854775808"
        if (spilled_.empty() && data_.size() - size_ >= widest) {
            char* const at = data_.data() + size_;
            size_ += static_cast<std::size_t>(std::to_chars(at, at + widest, value).ptr - at);
            return;
        }
        std::array<char, widest> digits;
        char* const end = std::to_chars(digits.data(), digits.data() + digits.size(), value).ptr;
        spill(digits.data(), static_cast<std::size_t>(end - digits.data()));
    }

    std::string_view view() const noexcept {
        return spilled_.empty() ? std::string_view(data_.data(), size_) : spilled_;
    }

    void clear() noexcept {
        size_ = 0;
        spilled_.clear();
    }

private:
    // Out of line and cold, so that the appends stay small enough to inline: a short literal's
    // copy then compiles to a store or two.
    [[gnu::cold, gnu::noinline]] void spill(const char* first, std::size_t n) {
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

template <typename Out>
void append_sf_string(Out& out, std::string_view text) {
    out.push_back('"');
    const auto plain = [](char c) {
        const auto byte = static_cast<unsigned char>(c);
        return byte >= 0x20 && byte <= 0x7e && c != '"' && c != '\\';
    };
    if (std::all_of(text.begin(), text.end(), plain)) {
        out.append(text); // the usual rule name: nothing to escape, one copy
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
    out.append(";q=");
    out.append_int(std::max<std::int64_t>(d.limit, 0));
    if (d.window.count() > 0) {
        out.append(";w=");
        out.append_int(ceil_seconds(d.window));
    }
}

template <typename Out>
void format_rate_limit(Out& out, std::string_view name, const limiter::decision& d) {
    append_sf_string(out, name);
    out.append(";r=");
    out.append_int(std::max<std::int64_t>(d.remaining, 0));
    // A concurrency limit frees slots when responses end, not on a clock: no reset to state.
    if (!d.in_flight) {
        out.append(";t=");
        out.append_int(ceil_seconds(d.reset_after));
    }
}

// The fields sluice sets, in the order it sets them: the IETF draft's always, the older trio
// only with rate-limit.x-ratelimit-headers.
constexpr std::array<std::string_view, 2> ietf_fields{"RateLimit-Policy", "RateLimit"};
constexpr std::array<std::string_view, 3> x_ratelimit_fields{
    "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"};

/// Writes each rate-limit field of `decision` into `out`: `out.begin_field(field)`, the value's
/// pieces (push_back, append, append_int), then `out.end_field()`. The one place that says which
/// fields there are and what they hold, whether they go into a header sluice writes itself or
/// into an upstream response's. The value is formatted straight into `out`: a line's value
/// formatted apart and copied in cost a copy per field.
template <typename Out>
void for_each_field(Out& out,
                    std::string_view name,
                    const limiter::decision& decision,
                    bool x_ratelimit) {
    out.begin_field(ietf_fields[0]);
    format_policy(out, name, decision);
    out.end_field();
    out.begin_field(ietf_fields[1]);
    format_rate_limit(out, name, decision);
    out.end_field();
    if (!x_ratelimit) {
        return;
    }
    out.begin_field(x_ratelimit_fields[0]);
    out.append_int(std::max<std::int64_t>(decision.limit, 0));
    out.end_field();
    out.begin_field(x_ratelimit_fields[1]);
    out.append_int(std::max<std::int64_t>(decision.remaining, 0));
    out.end_field();
    if (!decision.in_flight) {
        out.begin_field(x_ratelimit_fields[2]);
        out.append_int(ceil_seconds(decision.reset_after));
        out.end_field();
    }
}

/// for_each_field's target for header lines: "Name: value\r\n" each.
struct field_lines : line_buffer {
    void begin_field(std::string_view field) {
        append(field);
        append(": ");
    }

    void end_field() { append("\r\n"); }
};

/// for_each_field's target for Beast's fields: each value set as it is finished.
struct beast_field_values : value_buffer {
    explicit beast_field_values(bhttp::fields& f) noexcept
        : fields(f) {}

    void begin_field(std::string_view name) noexcept { field = name; }

    void end_field() {
        fields.set(field, view());
        clear();
    }

    bhttp::fields& fields;
    std::string_view field;
};

// Whether `name` is one of the fields we set (the X-RateLimit ones only when we set those).
bool is_ours(std::string_view name, bool x_ratelimit) {
    const auto named = [name](std::string_view field) {
        return iequals(name, field);
    };
    return std::any_of(ietf_fields.begin(), ietf_fields.end(), named) ||
           (x_ratelimit &&
            std::any_of(x_ratelimit_fields.begin(), x_ratelimit_fields.end(), named));
}

} // namespace

std::int64_t ceil_seconds(std::chrono::milliseconds duration) noexcept {
    const auto ms = duration.count();
    // Divided first: ms + 999 overflows within a second of the largest duration (a Redis
    // reply's, say), and the quotient plus one never does.
    return ms <= 0 ? 0 : ms / 1000 + (ms % 1000 != 0 ? 1 : 0);
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
    beast_field_values out(fields);
    for_each_field(out, name, decision, x_ratelimit);
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
    field_lines buffer;
    for_each_field(buffer, name, decision, x_ratelimit);
    lines += buffer.view();
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
