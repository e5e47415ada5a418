// SPDX-License-Identifier: Apache-2.0
#include "support/http_client.hpp"

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>

#include <algorithm>
#include <cctype>
#include <limits>
#include <vector>

namespace sluice::test {

namespace http = boost::beast::http;

namespace {

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

std::string hex(std::uint64_t value) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string text;
    do {
        text.insert(text.begin(), digits[value % 16]);
        value /= 16;
    } while (value != 0);
    return text;
}

} // namespace

std::optional<std::string> find_header(const header_list& headers, std::string_view name) {
    for (const auto& [field, value] : headers) {
        if (iequals(field, name)) {
            return value;
        }
    }
    return std::nullopt;
}

std::size_t count_header(const header_list& headers, std::string_view name) {
    return static_cast<std::size_t>(std::count_if(
        headers.begin(), headers.end(), [name](const auto& f) { return iequals(f.first, name); }));
}

std::string format_request(std::string_view method,
                           std::string_view target,
                           const header_list& headers,
                           std::string_view body) {
    std::string text;
    text.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
    if (!find_header(headers, "Host")) {
        text.append("Host: 127.0.0.1\r\n");
    }
    for (const auto& [name, value] : headers) {
        text.append(name).append(": ").append(value).append("\r\n");
    }
    if (!body.empty() && !find_header(headers, "Content-Length") &&
        !find_header(headers, "Transfer-Encoding")) {
        text.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
    }
    text.append("\r\n").append(body);
    return text;
}

std::string chunk_encode(std::string_view body, std::size_t chunk_size) {
    std::string text;
    while (!body.empty()) {
        const std::size_t n = std::min(chunk_size, body.size());
        text.append(hex(n)).append("\r\n").append(body.substr(0, n)).append("\r\n");
        body.remove_prefix(n);
    }
    text.append("0\r\n\r\n");
    return text;
}

http_connection::http_connection(std::uint16_t port, std::chrono::milliseconds timeout)
    : stream_(fd_stream::connect_loopback(port)) {
    stream_.timeout(timeout);
}

void http_connection::send_raw(std::string_view bytes) {
    stream_.write_all(bytes);
}

void http_connection::send(std::string_view method,
                           std::string_view target,
                           const header_list& headers,
                           std::string_view body) {
    send_raw(format_request(method, target, headers, body));
}

void http_connection::send_pattern_body(std::uint64_t seed,
                                        std::uint64_t size,
                                        bool chunked,
                                        std::size_t chunk_size) {
    std::vector<char> piece(chunk_size);
    for (std::uint64_t offset = 0; offset < size;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_size, size - offset));
        fill_pattern(seed, offset, piece.data(), n);
        if (chunked) {
            send_raw(hex(n) + "\r\n");
        }
        send_raw(std::string_view(piece.data(), n));
        if (chunked) {
            send_raw("\r\n");
        }
        offset += n;
    }
    if (chunked) {
        send_raw("0\r\n\r\n");
    }
}

std::optional<http_response>
http_connection::try_read_response(error_code& ec, bool head_request, std::size_t keep_body_limit) {
    http::response_parser<http::buffer_body> parser;
    parser.header_limit(1024 * 1024);
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser.skip(head_request);
    http::read_header(stream_, buffer_, parser, ec);
    if (ec) {
        return std::nullopt;
    }
    http_response response;
    response.received = std::chrono::steady_clock::now();
    response.status = parser.get().result_int();
    response.reason = std::string(parser.get().reason());
    for (const auto& field : parser.get()) {
        response.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    // Stream the body through a fixed piece of memory, hashing as it goes.
    std::vector<char> piece(64 * 1024);
    fnv1a64 hash;
    while (!parser.is_done()) {
        parser.get().body().data = piece.data();
        parser.get().body().size = piece.size();
        http::read(stream_, buffer_, parser, ec);
        if (ec == http::error::need_buffer) {
            ec = {};
        }
        if (ec) {
            return std::nullopt;
        }
        const std::size_t n = piece.size() - parser.get().body().size;
        hash.update(piece.data(), n);
        response.body_size += n;
        if (response.body.size() < keep_body_limit) {
            response.body.append(piece.data(), std::min(n, keep_body_limit - response.body.size()));
        }
    }
    response.body_hash = hash.value();
    response.chunked = parser.chunked();
    response.keep_alive = parser.keep_alive();
    return response;
}

http_response http_connection::read_response(bool head_request, std::size_t keep_body_limit) {
    error_code ec;
    auto response = try_read_response(ec, head_request, keep_body_limit);
    if (!response) {
        throw boost::system::system_error(ec, "read_response");
    }
    return std::move(*response);
}

bool http_connection::wait_closed(std::chrono::milliseconds timeout) {
    buffer_.clear();
    return stream_.wait_closed(timeout);
}

http_response request(std::uint16_t port,
                      std::string_view method,
                      std::string_view target,
                      const header_list& headers,
                      std::string_view body) {
    http_connection connection(port);
    connection.send(method, target, headers, body);
    return connection.read_response(method == "HEAD");
}

http_response get(std::uint16_t port, std::string_view target, const header_list& headers) {
    return request(port, "GET", target, headers);
}

} // namespace sluice::test
