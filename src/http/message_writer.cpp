// SPDX-License-Identifier: Apache-2.0
// The message writer: the same bytes Beast's serializer produces for a `buffer_body` message
// (start line, fields in order, blank line; chunked bodies re-chunked, no trailers), in one
// contiguous header and one gather write per block.
#include "http/session_detail.hpp"

#include <boost/asio/write.hpp>

#include <charconv>
#include <span>

namespace sluice::http::detail {
namespace {

constexpr std::string_view crlf = "\r\n";
constexpr std::string_view last_chunk = "0\r\n\r\n";

void append_version(std::string& out, unsigned version) {
    out += "HTTP/";
    out += static_cast<char>('0' + version / 10);
    out += '.';
    out += static_cast<char>('0' + version % 10);
}

void append_fields(std::string& out, const bhttp::fields& fields, std::string_view extra_lines) {
    for (const auto& f : fields) {
        out += f.name_string();
        out += ": ";
        out += f.value();
        out += crlf;
    }
    out += extra_lines;
    out += crlf;
}

} // namespace

message_writer::message_writer(const bhttp::request_header<>& header,
                               body_framing framing,
                               std::string& scratch,
                               std::string_view extra_lines)
    : header_(scratch)
    , framing_(framing) {
    header_.clear();
    header_ += header.method_string();
    header_ += ' ';
    header_ += header.target();
    header_ += ' ';
    append_version(header_, header.version());
    header_ += crlf;
    append_fields(header_, header, extra_lines);
}

message_writer::message_writer(const bhttp::response_header<>& header,
                               body_framing framing,
                               std::string& scratch,
                               std::string_view extra_lines)
    : header_(scratch)
    , framing_(framing) {
    header_.clear();
    append_version(header_, header.version());
    const auto code = header.result_int();
    header_ += ' ';
    header_ += static_cast<char>('0' + code / 100 % 10);
    header_ += static_cast<char>('0' + code / 10 % 10);
    header_ += static_cast<char>('0' + code % 10);
    header_ += ' ';
    header_ += header.reason();
    header_ += crlf;
    append_fields(header_, header, extra_lines);
}

awaitable<error_code>
message_writer::write(timed_stream& stream, std::string_view block, bool last) {
    std::array<net::const_buffer, 5> buffers;
    std::size_t count = 0;
    if (!header_sent_) {
        header_sent_ = true;
        buffers[count++] = net::buffer(header_);
    }
    if (!block.empty() && framing_ == body_framing::chunked) {
        auto* end =
            std::to_chars(chunk_size_.data(), chunk_size_.data() + 16, block.size(), 16).ptr;
        end = std::copy(crlf.begin(), crlf.end(), end);
        buffers[count++] = net::buffer(chunk_size_.data(), end - chunk_size_.data());
        buffers[count++] = net::buffer(block);
        buffers[count++] = net::buffer(crlf);
    } else if (!block.empty() && framing_ == body_framing::raw) {
        buffers[count++] = net::buffer(block);
    }
    if (last && framing_ == body_framing::chunked) {
        buffers[count++] = net::buffer(last_chunk);
    }

    // The socket's send buffer almost always takes a header and a block at once: then no
    // operation is queued, no completion posted and no coroutine suspended.
    error_code ec;
    auto written = stream.write_now(std::span(buffers.data(), count), ec);
    if (ec && ec != net::error::would_block) {
        co_return ec;
    }
    std::size_t first = 0;
    for (; first < count && written >= buffers[first].size(); ++first) {
        written -= buffers[first].size();
    }
    if (first == count) {
        co_return error_code{};
    }
    buffers[first] += written;
    auto [wec, n] =
        co_await net::async_write(stream, std::span(buffers.data() + first, count - first));
    co_return wec;
}

} // namespace sluice::http::detail
