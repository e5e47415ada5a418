// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/forward_headers.hpp"

#include "sluice/core/text.hpp"
#include "sluice/http/response_head.hpp"

#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/websocket/detail/hybi13.hpp>
#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <iterator>
#include <string>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;
namespace websocket = boost::beast::websocket;

bool is_fixed_hop_by_hop(bhttp::field name) {
    switch (name) {
    case bhttp::field::keep_alive:
    case bhttp::field::proxy_authenticate:
    case bhttp::field::proxy_authorization:
    case bhttp::field::proxy_connection:
    case bhttp::field::te:
    case bhttp::field::trailer:
    case bhttp::field::upgrade:
        return true;
    default:
        return false;
    }
}

bool is_framing(std::string_view name) {
    return iequals(name, "content-length") || iequals(name, "transfer-encoding") ||
           iequals(name, "host");
}

// Whether a field Beast has no enumerator for is called `name`.
template <typename Field>
bool is_unknown_named(const Field& f, std::string_view name) {
    return f.name() == bhttp::field::unknown && iequals(f.name_string(), name);
}

// Removes the client's X-Forwarded-For and X-Forwarded-Proto, appending each non-blank
// X-Forwarded-For line and ", " to `chain`. One pass: erasing by name would search the field
// set once per name, on every request.
template <typename Allocator>
void take_forwarding_fields(bhttp::basic_fields<Allocator>& fields, std::string& chain) {
    for (auto it = fields.begin(); it != fields.end();) {
        if (is_unknown_named(*it, "x-forwarded-for")) {
            const std::string_view value{it->value().data(), it->value().size()};
            if (value.find_first_not_of(" \t") != std::string_view::npos) {
                chain += value;
                chain += ", ";
            }
            it = fields.erase(it);
        } else if (is_unknown_named(*it, "x-forwarded-proto")) {
            it = fields.erase(it);
        } else {
            ++it;
        }
    }
}

// Whether the comma-separated list `list` has an element named `item`, ignoring case and the
// blanks around elements. An element's name ends at a '/': an Upgrade element is a protocol
// name with an optional version (RFC 9110 7.8), which bhttp::token_list would not parse.
bool lists(std::string_view list, std::string_view item) {
    while (!list.empty()) {
        const auto comma = list.find(',');
        auto element = list.substr(0, comma);
        list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
        element = trim_blanks(element.substr(0, element.find('/')));
        if (!element.empty() && iequals(element, item)) {
            return true;
        }
    }
    return false;
}

// Whether any `name` field of `fields` lists `item`.
template <typename Allocator>
bool any_lists(const bhttp::basic_fields<Allocator>& fields,
               bhttp::field name,
               std::string_view item) {
    const auto [first, last] = fields.equal_range(name);
    for (auto it = first; it != last; ++it) {
        if (lists({it->value().data(), it->value().size()}, item)) {
            return true;
        }
    }
    return false;
}

} // namespace

template <typename Allocator>
bool is_websocket_upgrade(const bhttp::header<true, bhttp::basic_fields<Allocator>>& request) {
    const auto [key, end] = request.equal_range(bhttp::field::sec_websocket_key);
    return request.version() >= 11 && request.method() == bhttp::verb::get &&
           any_lists(request, bhttp::field::connection, "upgrade") &&
           any_lists(request, bhttp::field::upgrade, "websocket") && key != end &&
           std::next(key) == end && !key->value().empty() &&
           key->value().size() <= websocket::detail::sec_ws_key_type::static_capacity;
}

std::string upstream_host_field(std::string_view host, std::uint16_t port) {
    std::string field;
    if (host.find(':') != std::string_view::npos) {
        field.append("[").append(host).append("]");
    } else {
        field.append(host);
    }
    if (port != 80) {
        field.append(":").append(std::to_string(port));
    }
    return field;
}

bool accepts_websocket(const response_head& response, std::string_view key) {
    websocket::detail::sec_ws_accept_type expected;
    websocket::detail::make_sec_ws_accept(expected, key);
    bool upgrade = false;
    int accepts = 0;
    bool accepted = false;
    for (const auto& f : response) {
        if (f.name() == bhttp::field::upgrade && lists(f.value(), "websocket")) {
            upgrade = true;
        } else if (f.name() == bhttp::field::sec_websocket_accept) {
            ++accepts;
            accepted = trim_blanks(f.value()) == std::string_view(expected.data(), expected.size());
        }
    }
    return upgrade && accepts == 1 && accepted;
}

namespace {

// strip_hop_by_hop's one algorithm reads Beast's fields and a response_head alike; they differ
// in how a field is taken out.
template <typename Allocator, typename Predicate>
void remove_fields(bhttp::basic_fields<Allocator>& fields, Predicate remove) {
    for (auto it = fields.begin(); it != fields.end();) {
        it = remove(*it) ? fields.erase(it) : std::next(it);
    }
}

template <typename Predicate>
void remove_fields(response_head& head, Predicate remove) {
    head.remove_if(remove);
}

template <typename Fields>
void strip_hop_by_hop_from(Fields& fields) {
    // Most messages carry none of these fields, or a Connection naming nothing else: one pass
    // tells, where erasing each name would search the field set once per name.
    bool connection = false;
    bool fixed = false;
    for (const auto& f : fields) {
        connection = connection || f.name() == bhttp::field::connection;
        fixed = fixed || is_fixed_hop_by_hop(f.name());
    }
    if (!connection && !fixed) {
        return;
    }
    // Collect the names listed in every Connection line before erasing anything: the views point
    // into the fields' storage.
    boost::container::small_vector<std::string, 4> named;
    for (const auto& f : fields) {
        if (f.name() != bhttp::field::connection) {
            continue;
        }
        const std::string_view value = f.value();
        if (iequals(value, "keep-alive")) {
            continue; // the usual one: it names Keep-Alive, which goes anyway
        }
        for (auto token : bhttp::token_list{value}) {
            const std::string_view name{token.data(), token.size()};
            if (!is_framing(name)) {
                named.emplace_back(name);
            }
        }
    }
    // Sorted, each field is looked up in log time: a client's Connection line may name
    // thousands of tokens, and a header as many fields; compared pairwise, a 16 KiB header
    // cost a worker 85 ms (tokens × fields), a 1 MiB one minutes.
    std::sort(named.begin(), named.end(), boost::beast::iless{});
    named.erase(
        std::unique(named.begin(),
                    named.end(),
                    [](const std::string& a, const std::string& b) { return iequals(a, b); }),
        named.end());
    remove_fields(fields, [&named](const auto& f) {
        if (f.name() == bhttp::field::connection || is_fixed_hop_by_hop(f.name())) {
            return true;
        }
        return std::binary_search(
            named.begin(), named.end(), std::string_view(f.name_string()), boost::beast::iless{});
    });
}

} // namespace

template <typename Allocator>
void strip_hop_by_hop(bhttp::basic_fields<Allocator>& fields) {
    strip_hop_by_hop_from(fields);
}

void strip_hop_by_hop(response_head& head) {
    strip_hop_by_hop_from(head);
}

void add_forwarding_headers(bhttp::fields& fields, std::string_view peer) {
    std::string chain;
    take_forwarding_fields(fields, chain);
    chain += peer;
    fields.insert("X-Forwarded-For", chain);
    fields.insert("X-Forwarded-Proto", "http");
}

template <typename Allocator>
void append_forwarding_lines(bhttp::basic_fields<Allocator>& fields,
                             std::string_view peer,
                             std::string& lines) {
    lines += "X-Forwarded-For: ";
    take_forwarding_fields(fields, lines);
    lines += peer;
    lines += "\r\nX-Forwarded-Proto: http\r\n";
}

using arena_fields = bhttp::basic_fields<std::pmr::polymorphic_allocator<char>>;

template void strip_hop_by_hop(bhttp::fields&);
template void strip_hop_by_hop(arena_fields&);
template void append_forwarding_lines(bhttp::fields&, std::string_view, std::string&);
template void append_forwarding_lines(arena_fields&, std::string_view, std::string&);
template bool is_websocket_upgrade(const bhttp::request_header<>&);
template bool is_websocket_upgrade(const bhttp::request_header<arena_fields>&);

} // namespace sluice::http
