// SPDX-License-Identifier: Apache-2.0
#pragma once

// A real HTTP/1.1 origin server for integration tests. It listens on 127.0.0.1:0, serves each
// connection on its own thread (keep-alive and pipelining work because the read buffer carries
// over between requests), accepts Content-Length and chunked bodies of any size, and records
// every request it receives: arrival time, method, target, headers, body size and body hash.

#include "support/body_pattern.hpp"
#include "support/http_client.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

/// What the upstream saw of one request.
struct recorded_request {
    /// When the request's header was complete.
    std::chrono::steady_clock::time_point arrival;
    std::string method;
    std::string target;
    header_list headers;
    bool chunked = false;
    std::uint64_t body_size = 0;
    std::uint64_t body_hash = fnv1a64::offset_basis;
    /// The first 64 KiB of the body.
    std::string body_prefix;
    /// 0-based index of the upstream connection it arrived on, in accept order.
    std::size_t connection = 0;

    std::optional<std::string> header(std::string_view name) const {
        return find_header(headers, name);
    }
};

/// How to answer one request.
struct response_plan {
    enum class body_kind {
        fixed,   // `body`
        echo,    // the request body, held in memory first (meant for bodies of a few MiB)
        pattern, // `pattern_size` bytes of pattern `pattern_seed`, generated as sent
    };
    unsigned status = 200;
    header_list headers;
    body_kind kind = body_kind::fixed;
    std::string body = "ok";
    std::uint64_t pattern_size = 0;
    std::uint64_t pattern_seed = 1;
    /// Send the body chunked instead of with Content-Length.
    bool chunked = false;
    /// Wait this long after the request body before answering (for timeout tests).
    std::chrono::milliseconds delay{0};
    /// Close the connection after this response.
    bool close = false;
    /// Close it after this response without saying so (no `Connection: close`), as an upstream
    /// whose keep-alive timeout ends just after a response.
    bool close_silently = false;
    /// Read the request whole, then close the connection without answering it: an upstream
    /// whose keep-alive timeout ended as the request came, or one that died processing it.
    bool close_unanswered = false;
    /// Answer after the request's header, without reading its body, then close the connection
    /// with the body unread (the kernel then resets it): an upstream that refuses an upload
    /// early (401, 413), as Go's and many others do. The request is not recorded.
    bool answer_before_body = false;
    /// Raw bytes sent before the response, e.g. a complete 1xx interim response.
    std::string interim;
    /// When set, `interim` is sent again every this long until the server stops or the peer
    /// goes, and the response never follows: an upstream that keeps a request with 1xx
    /// responses alone.
    std::chrono::milliseconds interim_every{0};
    /// Raw trailer lines ("Name: value\r\n" each) after the last chunk of a chunked body.
    std::string trailer;
    /// A chunked body ends without its last chunk: the connection closes after the body's bytes,
    /// as an upstream that dies mid-stream.
    bool cut_short = false;
    /// Neither Content-Length nor chunked: the body ends when the connection closes (after this
    /// response, whatever the request asked).
    bool close_delimited = false;
    /// Wait this long between the response's head and its body.
    std::chrono::milliseconds body_delay{0};
    /// Raw bytes sent unasked on the connection `stray_delay` after this response (an upstream
    /// that answers twice); `upstream_stats::strays_sent` counts them once sent.
    std::string stray;
    std::chrono::milliseconds stray_delay{0};
};

/// Counters over the upstream's lifetime.
struct upstream_stats {
    std::size_t connections = 0;
    /// Request headers parsed (a request counts here before its body arrives).
    std::size_t headers_received = 0;
    /// Requests whose body arrived in full; the same as `requests().size()`.
    std::size_t completed = 0;
    /// Connections that ended with a parse error or in the middle of a request.
    std::size_t broken = 0;
    /// `response_plan::stray` bytes sent.
    std::size_t strays_sent = 0;
};

class recording_upstream {
public:
    /// Chooses the answer once the request header is in (body fields are not filled yet).
    using handler = std::function<response_plan(const recorded_request&)>;

    /// Answers every request 200 "ok". Every response carries `X-Upstream-Target: <target>`.
    recording_upstream();

    explicit recording_upstream(handler h);

    /// Stops accepting, wakes every connection thread (also those in a delay) and joins them.
    ~recording_upstream();

    recording_upstream(const recording_upstream&) = delete;
    recording_upstream& operator=(const recording_upstream&) = delete;

    std::uint16_t port() const { return port_; }

    /// "http://127.0.0.1:<port>".
    std::string url() const;

    void set_handler(handler h);

    /// A snapshot of the completed requests, in completion order.
    std::vector<recorded_request> requests() const;

    upstream_stats stats() const;

    /// Waits until at least `n` requests completed; false on timeout.
    bool wait_for_count(std::size_t n, std::chrono::milliseconds timeout) const;

    /// Waits until `done(stats())` holds; false on timeout.
    bool wait_for_stats(const std::function<bool(const upstream_stats&)>& done,
                        std::chrono::milliseconds timeout) const;

    /**
     * Waits until the upstream has processed everything sent to it so far: no connection waits
     * to be accepted, and every connection is closed or idle between requests with no unread
     * byte. After a client saw sluice's answer, this makes "nothing reached the upstream" a
     * fact rather than a race with the connection threads. False on timeout.
     */
    bool wait_quiet(std::chrono::milliseconds timeout) const;

private:
    struct connection_state {
        int fd = -1;
        bool idle = false; // blocked waiting for the first byte of a request
        bool done = false;
    };

    void accept_loop();
    void serve(fd_stream stream, std::size_t index);
    // Whether wait_quiet's condition holds; called with mutex_ held.
    bool quiet_locked() const;
    // Serves one request; false when the connection is over.
    bool serve_one(fd_stream& stream, boost::beast::flat_buffer& buffer, std::size_t index);
    bool write_response(fd_stream& stream,
                        const response_plan& plan,
                        const recorded_request& request,
                        const std::string& echo,
                        bool keep_alive);
    // Increments one of the stats and wakes the waiters.
    void count(std::size_t upstream_stats::*counter);
    // Sleeps for `delay` unless stopped first; false if stopped.
    bool pause(std::chrono::milliseconds delay) const;

    mutable std::mutex mutex_;
    mutable std::condition_variable changed_;
    handler handler_;
    std::vector<recorded_request> requests_;
    upstream_stats stats_;
    std::vector<std::thread> connections_;
    // One per accepted connection, indexed like `recorded_request::connection`.
    std::vector<connection_state> connection_states_;
    // The acceptor is between poll and registering a new connection.
    bool accepting_ = false;

    int listen_fd_ = -1;
    // An eventfd that becomes readable (and stays so) when the server stops.
    int wake_fd_ = -1;
    std::uint16_t port_ = 0;
    std::thread acceptor_;
};

/// An upstream that answers every request with its own body (response_plan::body_kind::echo).
recording_upstream echo_upstream();

} // namespace sluice::test
