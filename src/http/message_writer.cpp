// SPDX-License-Identifier: Apache-2.0
// The message writer: the same bytes Beast's serializer produces for a `buffer_body` message
// (start line, fields in order, blank line; chunked bodies re-chunked, no trailers), in one
// contiguous header and one gather write per block.
#include "http/message_writer.hpp"

#include <boost/asio/write.hpp>

#include <charconv>
#include <cstring>
#include <span>

namespace sluice::http::detail {
namespace {

constexpr std::string_view crlf = "\r\n";
constexpr std::string_view last_chunk = "0\r\n\r\n";

// Writes the header through a raw cursor into a string sized once: the header is a few dozen
// short pieces, and appending them one at a time would check the capacity for each.
class header_builder {
public:
    header_builder(std::string& out, std::size_t size)
        : cursor_((out.resize(size), out.data())) {}

    void put(std::string_view text) noexcept {
        // An empty value's data() may be null, and memcpy from null is undefined even for 0 bytes.
        if (text.empty()) {
            return;
        }
        std::memcpy(cursor_, text.data(), text.size());
        cursor_ += text.size();
    }

    void put(char c) noexcept { *cursor_++ = c; }

    void put_version(unsigned version) noexcept {
        put("HTTP/");
        put(static_cast<char>('0' + version / 10 % 10));
        put('.');
        put(static_cast<char>('0' + version % 10));
    }

    /// A request's header_fields or a response_head: their fields read alike.
    template <typename Fields>
    void put_fields(const Fields& fields, std::string_view extra_lines) noexcept {
        for (const auto& f : fields) {
            put(f.name_string());
            put(": ");
            put(f.value());
            put(crlf);
        }
        put(extra_lines);
        put(crlf);
    }

private:
    char* cursor_;
};

constexpr std::size_t version_size = 8; // "HTTP/1.1"

template <typename Fields>
std::size_t fields_size(const Fields& fields, std::string_view extra_lines) {
    std::size_t size = extra_lines.size() + crlf.size();
    for (const auto& f : fields) {
        size += f.name_string().size() + f.value().size() + 4; // ": " and CRLF
    }
    return size;
}

} // namespace

message_writer::message_writer(const bhttp::header<true, header_fields>& header,
                               body_framing framing,
                               std::string& scratch,
                               std::string_view extra_lines)
    : header_(scratch)
    , framing_(framing) {
    const std::string_view method = header.method_string();
    const std::string_view target = header.target();
    header_builder out(header_,
                       method.size() + target.size() + version_size + 4 +
                           fields_size(header, extra_lines));
    out.put(method);
    out.put(' ');
    out.put(target);
    out.put(' ');
    out.put_version(header.version());
    out.put(crlf);
    out.put_fields(header, extra_lines);
}

message_writer::message_writer(const response_head& header,
                               body_framing framing,
                               std::string& scratch,
                               std::string_view extra_lines)
    : header_(scratch)
    , framing_(framing) {
    const auto code = header.status;
    const std::string_view reason = header.reason();
    header_builder out(header_,
                       version_size + 5 + reason.size() + 2 + fields_size(header, extra_lines));
    out.put_version(header.version);
    out.put(' ');
    out.put(static_cast<char>('0' + code / 100 % 10));
    out.put(static_cast<char>('0' + code / 10 % 10));
    out.put(static_cast<char>('0' + code % 10));
    out.put(' ');
    out.put(reason);
    out.put(crlf);
    out.put_fields(header, extra_lines);
}

bool message_writer::write_now(timed_stream& stream,
                               std::string_view block,
                               bool last,
                               error_code& ec) {
    auto& buffers = pending_;
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
    ec = {};
    auto written = stream.write_now(std::span(buffers.data(), count), ec);
    if (ec && ec != net::error::would_block) {
        return true;
    }
    ec = {};
    std::size_t first = 0;
    for (; first < count && written >= buffers[first].size(); ++first) {
        written -= buffers[first].size();
    }
    if (first == count) {
        return true;
    }
    buffers[first] += written;
    first_ = first;
    count_ = count;
    return false;
}

awaitable<error_code> message_writer::finish(timed_stream& stream) {
    auto [ec, n] =
        co_await net::async_write(stream, std::span(pending_.data() + first_, count_ - first_));
    co_return ec;
}

} // namespace sluice::http::detail
