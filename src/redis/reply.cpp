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

std::string reply::describe() const {
    switch (type) {
    case kind::nil:
        return "nil";
    case kind::integer:
        return std::to_string(integer);
    case kind::string:
        return '"' + str + '"';
    case kind::status:
        return str;
    case kind::error:
        return "(error) " + str;
    case kind::array:
        break;
    }
    std::string out = "[";
    for (std::size_t i = 0; i < elements.size(); ++i) {
        out += (i == 0 ? "" : ", ") + elements[i].describe();
    }
    return out + "]";
}

} // namespace sluice::redis
