// SPDX-License-Identifier: Apache-2.0
#pragma once

// Header rewriting for messages that sluice forwards, in either direction.
//
// The templates take the fields of any message sluice handles: Beast's default `fields`, and the
// arena-allocated ones of sluice's parsers (std::pmr::polymorphic_allocator); both are
// instantiated in forward_headers.cpp. An upstream response's head is a `response_head`.

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

#include <cstdint>
#include <memory_resource>
#include <string>
#include <string_view>

namespace sluice::http {

class response_head; // sluice/http/response_head.hpp

/**
 * Removes the connection-specific ("hop-by-hop") fields of RFC 9110 7.6.1: Connection and every
 * field it names, Keep-Alive, Proxy-Connection, TE, Trailer and Upgrade. They describe one hop
 * and must not travel on. Proxy-Authorization and Proxy-Authenticate go too: they are meant for
 * a proxy (RFC 9110 11.7), and sluice authenticates nothing, so the credentials would only leak
 * to the upstream.
 *
 * Framing is the caller's business and survives: Content-Length, Transfer-Encoding and Host are
 * never removed, even when Connection names them, because a client that could strip them would
 * change how the next hop splits the byte stream into messages (request smuggling).
 */
template <typename Allocator>
void strip_hop_by_hop(boost::beast::http::basic_fields<Allocator>& fields);
void strip_hop_by_hop(response_head& head);

/**
 * Adds the forwarding fields of a request sent upstream: `peer` (the TCP peer's address) is
 * appended to X-Forwarded-For, whose several lines, if any, are first joined into one (RFC 9110
 * 5.3), and X-Forwarded-Proto is set to "http", replacing whatever the client sent.
 */
void add_forwarding_headers(boost::beast::http::fields& fields, std::string_view peer);

/**
 * `add_forwarding_headers` for a caller that writes the header itself: the client's
 * X-Forwarded-For and X-Forwarded-Proto leave `fields`, and the new ones are appended to `lines`
 * as header lines ("X-Forwarded-For: <chain>\r\nX-Forwarded-Proto: http\r\n"), to be written
 * after the fields. Saves two field allocations and set lookups per request.
 */
template <typename Allocator>
void append_forwarding_lines(boost::beast::http::basic_fields<Allocator>& fields,
                             std::string_view peer,
                             std::string& lines);

/**
 * The Host field of a request sent upstream that came without one (HTTP/1.0 allows that; the
 * HTTP/1.1 request sluice sends does not): the upstream's host as configured (`host`, an IPv6
 * literal without brackets), in brackets when it is an IPv6 literal (RFC 9110 7.2: `::1:9000`
 * would read as another address, or no port), and its port unless 80.
 */
std::string upstream_host_field(std::string_view host, std::uint16_t port);

/**
 * Whether `request` asks to switch its connection to WebSocket (RFC 6455 4.1): a GET of HTTP/1.1
 * or later whose Connection fields name `upgrade` and whose Upgrade field lists `websocket`, both
 * case-insensitively, with one Sec-WebSocket-Key of 1 to 24 bytes (the base64 of 16 bytes is 24:
 * the key the answer must prove it read, `accepts_websocket`). Anything else that carries Upgrade
 * (h2c, an HTTP/1.0 request, one without its key) goes on as plain HTTP/1.1, its upgrade fields
 * stripped. Whether the request has a body (which also rules an upgrade out) is the parser's to
 * say, not the header's.
 */
template <typename Allocator>
bool is_websocket_upgrade(
    const boost::beast::http::header<true, boost::beast::http::basic_fields<Allocator>>& request);

/**
 * Whether a 101 response `response` switches to WebSocket for the request whose
 * Sec-WebSocket-Key was `key`: its Upgrade field lists `websocket`, and its one
 * Sec-WebSocket-Accept is the key's proof (RFC 6455 4.2.2: base64 of the SHA-1 of the key and
 * the protocol's GUID). An upstream that switches to anything else would leave the client
 * speaking a protocol it did not ask for; the proof makes sure a WebSocket server read this very
 * request: a 101 that an endpoint copied from what a client asked (a status and fields it echoes)
 * would otherwise turn the client's connection into a raw pipe to the upstream, past the limiter,
 * the checks and the log for every request the client then sends on it ("WebSocket smuggling").
 */
bool accepts_websocket(const response_head& response, std::string_view key);

extern template void strip_hop_by_hop(boost::beast::http::fields&);
extern template void
strip_hop_by_hop(boost::beast::http::basic_fields<std::pmr::polymorphic_allocator<char>>&);
extern template void
append_forwarding_lines(boost::beast::http::fields&, std::string_view, std::string&);
extern template void
append_forwarding_lines(boost::beast::http::basic_fields<std::pmr::polymorphic_allocator<char>>&,
                        std::string_view,
                        std::string&);
extern template bool is_websocket_upgrade(const boost::beast::http::request_header<>&);
extern template bool
is_websocket_upgrade(const boost::beast::http::request_header<
                     boost::beast::http::basic_fields<std::pmr::polymorphic_allocator<char>>>&);

} // namespace sluice::http
