// SPDX-License-Identifier: Apache-2.0
// The request path's parsing on arbitrary bytes: the header checks (take_header, check_request,
// absolute-form rewriting, the fields with underscores taken out), then a chunked or sized body
// through put_buffered into a small buffer_body, the bytes arriving in pieces as a socket would
// deliver them. Properties, beyond "no crash, no sanitizer report": nothing throws (libFuzzer
// reports an escaping exception), the bytes held unparsed never exceed the header limit, or in a
// body the chunk limits, by more than one piece (what sluice buffers is bounded whatever the
// peer sends), the header's check in pieces agrees with its check whole at every piece, and no
// field whose name has an underscore survives the default policy.
#include "http/header_block_detail.hpp"
#include "http/message_reader.hpp"
#include "http/request_checks.hpp"
#include "request_input.hpp"

#include <boost/beast/http/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace {

using namespace sluice::http::detail;
using namespace sluice::fuzz;
using sluice::error_code;
namespace beast = boost::beast;

constexpr chunk_limits limits{64, 256};

void fail(const char* what, std::size_t held) {
    std::fprintf(stderr, "request_head_fuzz: %s (%zu bytes held)\n", what, held);
    std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    // The first byte chooses the size of the pieces the rest arrives in: 1..256 bytes.
    const std::size_t step = std::size_t{data[0]} + 1;
    std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);

    header_arena arena;
    std::optional<request_parser> parser;
    make_request_parser(parser, arena);
    beast::flat_buffer buffer;

    // The header, as handle_request reads it. Beside it, read_header's check that looks at each
    // piece's bytes alone must say what a check of the whole from its start says, up to its
    // first answer (read_header checks no further: Beast reads on from there).
    header_progress progress;
    bool in_pieces = true;
    std::optional<error_code> header_ec;
    while (true) {
        if (in_pieces) {
            if (progress.scanned == 0) {
                (void)take_empty_lines(buffer); // as read_header, before the request's first byte
            }
            header_progress fresh;
            const auto answer = check_header_block(buffer, header_limit, progress);
            if (answer != check_header_block(buffer, header_limit, fresh)) {
                fail("the header checked in pieces and whole disagree", buffer.size());
            }
            in_pieces = !answer;
        }
        if ((header_ec = take_header(buffer, *parser, header_limit))) {
            break;
        }
        if (buffer.size() > header_limit + step) {
            fail("header bytes held beyond the limit", buffer.size());
        }
        if (!deliver(buffer, input, step)) {
            return 0;
        }
    }
    if (*header_ec) {
        (void)header_error_status(*header_ec, true);
        return 0;
    }
    const sluice::config::config cfg;
    if (check_request(*parser, cfg) || !rewrite_absolute_form(parser->get())) {
        return 0;
    }
    // The default policy, drop: whatever fields go, none left may have an underscore.
    if (!take_underscored_fields(parser->get(), cfg.server.headers_with_underscores)) {
        fail("drop refused a request", buffer.size());
    }
    for (const auto& f : parser->get()) {
        if (std::string_view(f.name_string()).find('_') != std::string_view::npos) {
            fail("a field with an underscore stayed", buffer.size());
        }
    }

    // The body, as the forwarder reads it: one put at a time into a small block.
    std::array<char, 64> block;
    for (int stalled = 0; !parser->is_done() && stalled < 8;) {
        if (buffer.size() == 0 && !deliver(buffer, input, step)) {
            return 0;
        }
        parser->get().body().data = block.data();
        parser->get().body().size = block.size();
        const auto before = buffer.size();
        const auto ec = put_buffered(buffer, *parser, limits);
        if (ec == bhttp::error::need_more) {
            if (buffer.size() > limits.line + limits.trailer + 6 + step) {
                fail("body bytes held beyond the chunk limits", buffer.size());
            }
            if (!deliver(buffer, input, step)) {
                return 0;
            }
        } else if (ec && ec != bhttp::error::need_buffer) {
            return 0;
        }
        stalled = buffer.size() == before ? stalled + 1 : 0;
    }
    return 0;
}
