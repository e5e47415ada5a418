// SPDX-License-Identifier: Apache-2.0
// An upstream response read as the relay reads it, on arbitrary bytes: its head (and any interim
// responses before it) through parse_buffered, as read_message parses what the connection's
// buffer holds, then its body in blocks of a small buffer, put_buffered holding a chunked body to
// the chunk limits. The input's first byte chooses the size of the pieces the rest arrives in
// (1..256 bytes); its second the body buffer's size (1..64) and whether the request was a HEAD;
// its third the chunk limits (server.max-chunk-header-size, server.max-trailer-size). Properties,
// beyond "no crash, no sanitizer report": nothing throws; what the connection's buffer holds while
// the parser waits for more stays within the limits (a head, a chunk-size line or a trailer
// within its limit, plus one read); and whether each head is let in, its status, how its body
// ends and the body's bytes do not depend on how the input was cut into pieces (sluice's scan
// reads a head that came whole, Beast's parser one that came in pieces).
#include "http/message_reader.hpp"
#include "pieces.hpp"
#include "sluice/http/response_parser.hpp"

#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory_resource>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace sluice::http::detail;
using sluice::error_code;
using sluice::fuzz::deliver;
using sluice::http::response_parser;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

/// The response header's limit here: small, for inputs to reach it.
constexpr std::uint32_t header_limit = 1024;
/// The interim responses the relay passes on before a final one (forwarder.cpp's bound).
constexpr unsigned max_interim = 4;

void fail(const char* what, std::size_t size) {
    std::fprintf(stderr, "response_body_fuzz: %s (at %zu bytes)\n", what, size);
    std::abort();
}

/// What one response came to.
struct response_outcome {
    /// How its head's read ended (an error, or none: a head).
    error_code head;
    unsigned status = 0;
    /// How its body's read ended (none: done), and its bytes.
    error_code body_end;
    std::string body;

    /// The same response for the relay: a head let in or refused alike, with the same status,
    /// and a body ended alike, broken or not, with the same bytes. Why a head or a body was
    /// refused may differ: Beast refuses a bare LF in a head that came whole at once and waits
    /// for the head's end when it comes in pieces; a broken trailer is refused for its size
    /// while it comes, for its first bad field when it came whole within the limit. The relay
    /// answers any of them alike (a 502, or the response cut off).
    bool operator==(const response_outcome& other) const {
        if (head || other.head) {
            return static_cast<bool>(head) == static_cast<bool>(other.head);
        }
        return status == other.status &&
               static_cast<bool>(body_end) == static_cast<bool>(other.body_end) &&
               body == other.body;
    }
};

/// The relay's reader: parses what `buffer` holds, and takes the next piece of `input` only
/// when the parser needs more, checking what the buffer holds meanwhile.
class reader {
public:
    reader(std::string_view input, std::size_t step, const chunk_limits& limits)
        : input_(input)
        , step_(step)
        , bound_(std::max<std::uint64_t>(header_limit, limits.line + limits.trailer + 6)) {}

    /// parse_buffered until it has an answer, or the input ends.
    error_code parse(response_parser& parser, bool header_only, const chunk_limits& limits) {
        for (;;) {
            if (auto parsed = parse_buffered(buffer_, parser, header_only, limits)) {
                return *parsed;
            }
            if (buffer_.size() > bound_) {
                fail("the buffer holds more than a head, chunk line or trailer may",
                     buffer_.size());
            }
            if (!deliver(buffer_, input_, step_)) {
                return stream_ended(parser);
            }
        }
    }

private:
    std::string_view input_;
    std::size_t step_;
    std::uint64_t bound_;
    beast::flat_buffer buffer_;
};

/// Reads `input` in pieces of `step` bytes as the relay would: the interim responses and the
/// final one.
std::vector<response_outcome> relay(std::string_view input,
                                    std::size_t step,
                                    std::size_t room,
                                    bool head_request,
                                    const chunk_limits& limits) {
    reader in(input, step, limits);
    std::vector<response_outcome> out;
    std::vector<char> block(room);
    for (unsigned seen = 0; seen <= max_interim; ++seen) {
        response_parser parser(std::pmr::new_delete_resource());
        parser.header_limit(header_limit);
        parser.body_limit(boost::none);
        parser.skip(head_request);
        auto& r = out.emplace_back();
        r.head = in.parse(parser, true, chunk_limits{});
        if (r.head) {
            break;
        }
        r.status = parser.head().status;
        if (r.status >= 100 && r.status < 200 && r.status != 101) {
            continue; // interim: the final response follows
        }
        auto& body = parser.body();
        while (!parser.is_done()) {
            body.data = block.data();
            body.size = block.size();
            const auto ec = in.parse(parser, false, limits);
            r.body.append(block.data(), block.size() - body.size);
            if (ec && ec != bhttp::error::need_buffer) {
                r.body_end = ec;
                break;
            }
        }
        break;
    }
    return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 3) {
        return 0;
    }
    const std::size_t step = std::size_t{data[0]} + 1;
    const std::size_t room = std::size_t{data[1]} % 64 + 1;
    const bool head_request = (data[1] & 0x40) != 0;
    const auto limits = sluice::fuzz::chunk_limits_from(data[2]);
    const std::string_view input(reinterpret_cast<const char*>(data) + 3, size - 3);

    const auto cut = relay(input, step, room, head_request, limits);
    const auto whole = relay(input, input.size() + 1, room, head_request, limits);
    if (cut != whole) {
        for (const auto* o : {&cut, &whole}) {
            for (const auto& r : *o) {
                std::fprintf(stderr,
                             "%s: head %s, status %u, body %zu bytes, %s\n",
                             o == &cut ? "cut" : "whole",
                             r.head.message().c_str(),
                             r.status,
                             r.body.size(),
                             r.body_end.message().c_str());
            }
        }
        fail("the outcome depends on how the input was cut", input.size());
    }
    return 0;
}
