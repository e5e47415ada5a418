// SPDX-License-Identifier: Apache-2.0
#pragma once

// Forwarding a request upstream and its response back (forwarder.cpp, response_relay.cpp).

#include "http/buffered_body.hpp"
#include "http/local_reply.hpp"
#include "http/message_types.hpp"
#include "http/message_writer.hpp"
#include "sluice/config/config.hpp"
#include "sluice/http/worker_context.hpp"
#include "sluice/io/timed_stream.hpp"
#include "sluice/upstream/pool.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/container/small_vector.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sluice::http::detail {

/// What the forwarder saw of the upstream: what the upstream metrics count.
enum class upstream_outcome {
    response,       // the upstream answered: its status went to the client (maybe cut short)
    connect_failed, // no connection could be made: 502
    failed,         // the connection broke, or the answer was not HTTP: 502
    timed_out,      // no response header within upstream.timeout: 504
    busy,           // upstream.max-connections in use for upstream.timeout: 503, nothing sent
    tunnels_full,   // a WebSocket upgrade at upstream.max-tunnels: 503, nothing sent
    client_failed,  // the client failed first (a broken or too large body: 400/413, or it left):
                    // nothing to say about the upstream
};

/// What forwarding a request came to.
struct forward_result {
    /// The status the client got; 0 when it got none.
    unsigned status = 0;
    /// The client connection may carry another request.
    bool keep_alive = false;
    upstream_outcome upstream = upstream_outcome::client_failed;
    /// The client connection ends with a reset: the response's body, which ends with the
    /// connection (no length, an HTTP/1.0 client), was cut short by the upstream.
    bool reset = false;
    /// How the exchange ended when not in full: "client_left", "upstream_broke", or for a
    /// WebSocket tunnel "idle_timeout"; empty otherwise.
    std::string_view cut_short;
    /// From the start of forwarding to the end of the response (for a tunnel: to its 101).
    milliseconds upstream_time{-1};
    /// The figures of `forward_args::settle_sources` in the response (a header or trailer's
    /// value, a JSON number as written), in order; nullopt where absent. Empty when no response
    /// came.
    boost::container::small_vector<std::optional<std::string>, 1> figures;
};

/// Everything `forward` needs; references point into the session's frame.
struct forward_args {
    timed_stream& client;
    beast::flat_buffer& client_buffer;
    request_parser& parser;
    /// The request's header arena, for the response's fields.
    header_arena& arena;
    upstream::pool& pool;
    const config::config& config;
    std::string_view peer;
    reply_context reply;
    bool client_keep_alive = true;
    /// The client sent `Expect: 100-continue` and waits for our word before sending the body.
    bool expect_continue = false;
    /// The worker is draining: close the client connection after this response.
    const bool* draining = nullptr;
    /// The connection's header strings.
    header_scratch& scratch;
    /// The worker's body buffers: a forward borrows one for as long as it runs.
    buffer_pool& relay_buffers;
    /// The request body read ahead (`read_body_ahead`), for the limiter's `json:` fields or by
    /// server.request-buffer-size: all of it when the parser is done, otherwise the rest follows
    /// from the client. Meaningful when `body_read_ahead` is set; freed once the request is sent.
    buffered_body& body_ahead;
    /// When the request body's first read began (server.body-timeout counts from there).
    std::optional<std::chrono::steady_clock::time_point> body_started{};
    /// Where in the response the caller wants figures from once it is over (the figures that
    /// settle cost-weighted limits: fields, or `json:` paths into the body), and how much of
    /// the body to keep aside for the `json:` ones.
    std::span<const config::cost_source* const> settle_sources{};
    std::uint64_t response_json_bytes = 0;
    /// The request body was read ahead, into `body_ahead`.
    bool body_read_ahead = false;
    /// Set by the forwarder: the upstream answered before it took the whole body (a write of it
    /// failed), so its connection is broken whatever its answer says.
    bool body_unsent = false;
    /// Where a drain reaches a WebSocket tunnel (tunnel.hpp `tunnel_drain`); null: nowhere.
    session_entry* entry = nullptr;
    const std::chrono::steady_clock::time_point* drain_deadline = nullptr;
    /// The worker's upgrades and tunnels (`upstream.max-tunnels`); null: not counted.
    tunnel_count* tunnels = nullptr;
};

/**
 * Sends the request in `args.parser` (header read, body not) to the upstream and its response
 * back: a request body with a Content-Length read first up to server.request-buffer-size, then
 * both bodies streamed through one fixed buffer; answers 502/504 itself when the upstream fails
 * before a response started; what came of it goes into `result` (as the caller made it:
 * default). See forwarder.cpp for the retry and framing rules. (`result` rather than a return
 * value: the value would be held three times, in this frame and the caller's. With
 * that, the JSON scan on the heap, and request_handler.cpp's one `early` and the store's outcome
 * out of its frame, this frame went from 1488 to 784 bytes and handle_request's from 1456 to
 * 912: 1.2 KiB less for every request in flight. Before io/frame_pool.hpp it also brought both
 * under the 1020 bytes Asio's own frame cache takes; docs/benchmarks.md.)
 */
awaitable<void> forward(forward_args& args, forward_result& result);

} // namespace sluice::http::detail
