// SPDX-License-Identifier: Apache-2.0
#include "redis/reply_detail.hpp"
#include "sluice/redis/client.hpp"

#include <hiredis/hiredis.h>

#include <array>

namespace sluice::redis {

namespace detail {

reply copy_reply(const redisReply& r) {
    reply out;
    switch (r.type) {
    case REDIS_REPLY_STRING:
        out.type = reply::kind::string;
        out.str.assign(r.str, r.len);
        break;
    case REDIS_REPLY_STATUS:
        out.type = reply::kind::status;
        out.str.assign(r.str, r.len);
        break;
    case REDIS_REPLY_ERROR:
        out.type = reply::kind::error;
        out.str.assign(r.str, r.len);
        break;
    case REDIS_REPLY_INTEGER:
        out.type = reply::kind::integer;
        out.integer = r.integer;
        break;
    case REDIS_REPLY_ARRAY:
        out.type = reply::kind::array;
        out.elements.reserve(r.elements);
        for (std::size_t i = 0; i < r.elements; ++i) {
            out.elements.push_back(copy_reply(*r.element[i]));
        }
        break;
    default:
        break; // REDIS_REPLY_NIL
    }
    return out;
}

} // namespace detail

std::string_view reply::error_kind() const noexcept {
    // The codes Redis 5 to 7 start its error replies with (a script's own error_reply may start
    // with anything: "other").
    static constexpr std::array<std::string_view, 22> codes = {
        "ERR",        "WRONGTYPE", "NOSCRIPT", "BUSY",      "OOM",       "READONLY",
        "MASTERDOWN", "LOADING",   "NOAUTH",   "NOPERM",    "WRONGPASS", "MISCONF",
        "NOREPLICAS", "EXECABORT", "MOVED",    "ASK",       "TRYAGAIN",  "CLUSTERDOWN",
        "CROSSSLOT",  "UNBLOCKED", "NOTBUSY",  "UNKILLABLE"};
    if (type != kind::error) {
        return "other";
    }
    const std::string_view text(str);
    const auto code = text.substr(0, text.find(' '));
    for (const auto known : codes) {
        if (code == known) {
            return known;
        }
    }
    return "other";
}

namespace {

// Appends `r`'s rendering to `out`, stopping once `out` holds `max_bytes`: past that, at most a
// closing quote or bracket (or a number, or "nil") per level.
void render(const reply& r, std::string& out, std::size_t max_bytes) {
    const auto append_bounded = [&](const std::string& text) {
        out.append(text, 0, max_bytes > out.size() ? max_bytes - out.size() : 0);
    };
    switch (r.type) {
    case reply::kind::nil:
        out += "nil";
        return;
    case reply::kind::integer:
        out += std::to_string(r.integer);
        return;
    case reply::kind::string:
        out += '"';
        append_bounded(r.str);
        out += '"';
        return;
    case reply::kind::status:
        append_bounded(r.str);
        return;
    case reply::kind::error:
        out += "(error) ";
        append_bounded(r.str);
        return;
    case reply::kind::array:
        break;
    }
    out += '[';
    for (std::size_t i = 0; i < r.elements.size() && out.size() < max_bytes; ++i) {
        if (i != 0) {
            out += ", ";
        }
        render(r.elements[i], out, max_bytes);
    }
    out += ']';
}

} // namespace

std::string reply::describe(std::size_t max_bytes) const {
    std::string out;
    render(*this, out, max_bytes);
    if (out.size() > max_bytes) {
        constexpr std::string_view cut = "...";
        out.resize(max_bytes > cut.size() ? max_bytes - cut.size() : 0);
        out += cut;
    }
    return out;
}

} // namespace sluice::redis
