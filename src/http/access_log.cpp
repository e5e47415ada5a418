// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/access_log.hpp"

#include "sluice/core/text.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>

namespace sluice::http {
namespace {

std::string_view or_dash(std::string_view text) {
    return text.empty() ? std::string_view{"-"} : text;
}

// Text fields are separated by spaces, so a space or control byte in one (a raw target that
// failed to parse) is shown escaped, keeping one request on one parseable line. So is every
// byte past ASCII (a header's obs-text in a key part): raw, it could be no UTF-8 at all, which
// log pipelines refuse, or a NEL or U+2028 that a viewer breaks the line at. nginx escapes the
// same bytes, as \xXX. '%' itself is escaped too (%25), so that the escaping can be undone: a
// raw line feed is %0A, a target that says "%0A" is %250A.
void append_text_field(std::string& out, std::string_view text) {
    constexpr char hex[] = "0123456789ABCDEF";
    for (char c : or_dash(text)) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte <= 0x20 || byte >= 0x7f || c == '%') {
            out += '%';
            out += hex[byte >> 4];
            out += hex[byte & 0xf];
        } else {
            out += c;
        }
    }
}

} // namespace

std::string format_access(const access_record& r, config::logging_settings::format_kind kind) {
    std::string out;
    out.reserve(160 + r.path.size() + r.key.size());
    if (kind == config::logging_settings::format_kind::json) {
        const auto field = [&out](std::string_view name, std::string_view value) {
            out += '"';
            out += name;
            out += R"(":")";
            append_json_escaped(out, value);
            out += R"(",)";
        };
        field("client", r.client);
        field("method", r.method);
        field("path", r.path);
        field("key", r.key);
        field("decision", r.decision);
        out += fmt::format(R"("status":{},"upstream_ms":{},"delay_ms":{},"end":")",
                           r.status,
                           r.upstream_time.count(),
                           (r.delay + r.slot_wait).count());
        out += r.end; // one of a few fixed words
        out += '"';
        return out;
    }
    const auto field = [&out](std::string_view name, std::string_view value) {
        if (!out.empty()) {
            out += ' ';
        }
        out += name;
        out += '=';
        append_text_field(out, value);
    };
    field("client", r.client);
    field("method", r.method);
    field("path", r.path);
    field("key", r.key);
    field("decision", r.decision);
    out += fmt::format(" status={} upstream_ms={} delay_ms={} end={}",
                       r.status == 0 ? std::string("-") : std::to_string(r.status),
                       r.upstream_time.count() < 0 ? std::string("-")
                                                   : std::to_string(r.upstream_time.count()),
                       (r.delay + r.slot_wait).count(),
                       r.end);
    return out;
}

access_log::access_log(std::shared_ptr<spdlog::logger> text,
                       std::shared_ptr<spdlog::logger> json) noexcept
    : text_(std::move(text))
    , json_(std::move(json)) {}

void access_log::set(format_kind format, bool enabled) noexcept {
    format_.store(format, std::memory_order_relaxed);
    enabled_.store(enabled, std::memory_order_relaxed);
}

void access_log::write(const access_record& record) const {
    if (!enabled()) {
        return;
    }
    // Read once: the fields and the logger agree, whatever a reload does meanwhile.
    const auto kind = format();
    auto& logger = kind == format_kind::json ? *json_ : *text_;
    logger.info(format_access(record, kind));
}

} // namespace sluice::http
