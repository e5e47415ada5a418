// SPDX-License-Identifier: Apache-2.0
// Streamed responses (issue 14): a Server-Sent Events stream reaches the client event by event,
// as the upstream sends it, through either store and every limiter path (a shaping leaky
// bucket, a policing one, and a CONCURRENCY slot held for the stream's whole length);
// upstream.timeout bounds the wait between two pieces of a stream, not the stream's whole
// length.

#include "integration_util.hpp"
#include "support/admin_client.hpp"
#include "support/body_pattern.hpp"
#include "support/limit_probe.hpp"
#include "support/limited_sluice.hpp"
#include "support/one_connection_server.hpp"
#include "support/redis_server.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <optional>
#include <ostream>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

bool send_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        const auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n <= 0) {
            return false;
        }
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

/**
 * An upstream that answers its one connection's request with a chunked `text/event-stream` of
 * `count` events, one every `period` (the first at once), and records when it sent each. In
 * lockstep (`lockstep()`), event i + 1 is sent only once the test said event i reached the
 * client (`received(i)`), as soon as it does: a relay that held an event until more came would
 * hold it until the stream gave up (`lockstep_patience`), not for a gap of the test's choosing.
 */
class event_stream_upstream {
public:
    /// How long a lockstep stream waits for its client's word before it sends its end.
    static constexpr auto lockstep_patience = 10s;

    event_stream_upstream(int count, std::chrono::milliseconds period)
        : count_(count)
        , period_(period) {}

    static std::unique_ptr<event_stream_upstream> lockstep(int count) {
        auto upstream = std::make_unique<event_stream_upstream>(count, 0ms);
        upstream->lockstep_ = true;
        return upstream;
    }

    std::string url() const { return server_.url(); }

    /// Event i reached the client: a lockstep stream may send the next one.
    void received(int i) {
        {
            std::lock_guard lock(mutex_);
            received_up_to_ = std::max(received_up_to_, i);
        }
        received_changed_.notify_all();
    }

    /// When sluice closed the connection while the stream was waiting for its next event.
    std::optional<clock_type::time_point> closed_at() const {
        std::lock_guard lock(mutex_);
        return closed_at_;
    }

    /// When event i was sent (written to the socket), for the events sent so far.
    std::vector<clock_type::time_point> sent() const {
        std::lock_guard lock(mutex_);
        return sent_;
    }

private:
    void serve(int fd) {
        std::string request;
        char buffer[4096];
        while (request.find("\r\n\r\n") == std::string::npos) {
            const auto n = ::recv(fd, buffer, sizeof buffer, 0);
            if (n <= 0) {
                ::close(fd);
                return;
            }
            request.append(buffer, static_cast<std::size_t>(n));
        }
        send_all(fd,
                 "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n");
        auto next = clock_type::now();
        for (int i = 0; i < count_; ++i) {
            if (lockstep_) {
                // Until the client has the previous event.
                std::unique_lock lock(mutex_);
                if (!received_changed_.wait_for(
                        lock, lockstep_patience, [&] { return received_up_to_ >= i - 1; })) {
                    break;
                }
            } else if (!wait_until(fd, next)) {
                // The stream's own pace, watching for sluice closing the connection meanwhile.
                break;
            }
            const auto event = fmt::format("data: {}\n\n", i);
            const auto chunk = fmt::format("{:x}\r\n{}\r\n", event.size(), event);
            {
                std::lock_guard lock(mutex_);
                sent_.push_back(clock_type::now());
            }
            if (!send_all(fd, chunk)) {
                break;
            }
            next += period_;
        }
        send_all(fd, "0\r\n\r\n");
        // Wait for sluice to close (or the test to end).
        while (::recv(fd, buffer, sizeof buffer, 0) > 0) {
        }
        ::close(fd);
    }

    /// Waits until `when`; false (and the time noted) if the connection closed first.
    bool wait_until(int fd, clock_type::time_point when) {
        for (;;) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(when - clock_type::now());
            if (left <= 0ms) {
                return true;
            }
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count()) + 1) > 0) {
                char byte = 0;
                if (::recv(fd, &byte, 1, 0) <= 0) {
                    std::lock_guard lock(mutex_);
                    closed_at_ = clock_type::now();
                    return false;
                }
            }
        }
    }

    int count_;
    std::chrono::milliseconds period_;
    bool lockstep_ = false;
    mutable std::mutex mutex_;
    std::condition_variable received_changed_;
    int received_up_to_ = -1;
    std::vector<clock_type::time_point> sent_;
    std::optional<clock_type::time_point> closed_at_;
    /// Last: its thread starts serving at once, with every other member ready.
    one_connection_server server_{[this](int fd) {
        serve(fd);
    }};
};

/**
 * An upstream that reads one request with a chunked body and records when each piece of it
 * ("piece i;") arrived, then answers 200 once the body is complete.
 */
class upload_upstream {
public:
    std::string url() const { return server_.url(); }

    /// When piece i of the body arrived, for the pieces seen so far (by number).
    std::vector<std::optional<clock_type::time_point>> arrived() const {
        std::lock_guard lock(mutex_);
        return arrived_;
    }

    /// Waits up to `timeout` for piece i to arrive; true when it has.
    bool wait_for_piece(std::size_t i, std::chrono::milliseconds timeout) const {
        std::unique_lock lock(mutex_);
        return arrived_changed_.wait_for(
            lock, timeout, [&] { return arrived_.size() > i && arrived_[i].has_value(); });
    }

private:
    void serve(int fd) {
        std::string text;
        std::size_t scanned = 0;
        char buffer[4096];
        while (text.find("\r\n0\r\n\r\n") == std::string::npos) {
            const auto n = ::recv(fd, buffer, sizeof buffer, 0);
            const auto at = clock_type::now();
            if (n <= 0) {
                ::close(fd);
                return;
            }
            text.append(buffer, static_cast<std::size_t>(n));
            for (auto found = text.find("piece ", scanned); found != std::string::npos;
                 found = text.find("piece ", scanned)) {
                const auto end = text.find(';', found);
                if (end == std::string::npos) {
                    break;
                }
                const auto i =
                    static_cast<std::size_t>(std::stoi(text.substr(found + 6, end - found - 6)));
                std::lock_guard lock(mutex_);
                if (arrived_.size() <= i) {
                    arrived_.resize(i + 1);
                }
                if (!arrived_[i]) {
                    arrived_[i] = at;
                    arrived_changed_.notify_all();
                }
                scanned = end;
            }
        }
        send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        while (::recv(fd, buffer, sizeof buffer, 0) > 0) {
        }
        ::close(fd);
    }

    mutable std::mutex mutex_;
    mutable std::condition_variable arrived_changed_;
    std::vector<std::optional<clock_type::time_point>> arrived_;
    /// Last: its thread starts serving at once, with every other member ready.
    one_connection_server server_{[this](int fd) {
        serve(fd);
    }};
};

/// Reads the response to GET /events from sluice on `port`, and notes when each event's
/// "data: i" line arrived (telling `on_event`, when given). Stops at the terminating chunk or
/// after `deadline`.
std::vector<std::optional<clock_type::time_point>>
receive_events(std::uint16_t port,
               int count,
               std::chrono::milliseconds deadline,
               const std::function<void(int)>& on_event = {}) {
    auto stream = fd_stream::connect_loopback(port);
    stream.timeout(deadline);
    stream.write_all("GET /events HTTP/1.1\r\nHost: test\r\nAccept: text/event-stream\r\n\r\n");
    std::vector<std::optional<clock_type::time_point>> received(static_cast<std::size_t>(count));
    std::string text;
    std::size_t scanned = 0;
    const auto end = clock_type::now() + deadline;
    char buffer[4096];
    while (clock_type::now() < end && text.find("\r\n0\r\n\r\n") == std::string::npos) {
        error_code ec;
        const auto n = stream.read_some(boost::asio::buffer(buffer), ec);
        const auto at = clock_type::now();
        if (ec) {
            break;
        }
        text.append(buffer, n);
        for (auto found = text.find("data: ", scanned); found != std::string::npos;
             found = text.find("data: ", scanned)) {
            const auto line_end = text.find('\n', found);
            if (line_end == std::string::npos) {
                break;
            }
            const int i = std::stoi(text.substr(found + 6, line_end - found - 6));
            if (i >= 0 && i < count && !received[static_cast<std::size_t>(i)]) {
                received[static_cast<std::size_t>(i)] = at;
                if (on_event) {
                    on_event(i);
                }
            }
            scanned = line_end;
        }
    }
    EXPECT_NE(text.find("Content-Type: text/event-stream"), std::string::npos) << text;
    return received;
}

/// The store, and the limiter path the stream takes.
struct streaming_case {
    const char* store;   // memory | redis
    const char* limiter; // shape | police | concurrency
};

void PrintTo(const streaming_case& c, std::ostream* os) {
    *os << c.store << '/' << c.limiter;
}

class StreamingTest : public ::testing::TestWithParam<streaming_case> {
protected:
    std::string rate_limit_yaml() {
        const std::string limiter = GetParam().limiter;
        // Limits that admit at once: the stream goes through the limiter's path.
        std::string yaml;
        if (limiter == "police") {
            yaml = "  fallback: { capacity: 100, flowRate: 100, mode: police }\n";
        } else if (limiter == "concurrency") {
            // The slot is held for as long as the stream runs.
            yaml = "  rules:\n"
                   "    - name: streams\n"
                   "      match: { path: /events }\n"
                   "      limits:\n"
                   "        - { algorithm: CONCURRENCY, limit: 4, key: [global] }\n"
                   "        - { algorithm: LEAKY_BUCKET, capacity: 100, flowRate: 100 }\n";
        } else {
            yaml = "  fallback: { capacity: 100, flowRate: 100, mode: shape }\n";
        }
        if (std::string(GetParam().store) == "redis") {
            if (!redis_server::available()) {
                return {};
            }
            redis_ = std::make_unique<redis_server>();
            yaml += redis_store_yaml(redis_->port());
        }
        return yaml;
    }

    bool holds_slots() const { return std::string(GetParam().limiter) == "concurrency"; }

    void client_leaves_mid_stream(bool half_close);

    std::unique_ptr<redis_server> redis_;
};

/// Reads from `fd` into `text` until it holds `what`; false if the connection ended or failed
/// first, or the socket's timeout passed.
bool read_until(fd_stream& stream, std::string& text, std::string_view what) {
    char buffer[16 * 1024];
    while (text.find(what) == std::string::npos) {
        error_code ec;
        const auto n = stream.read_some(boost::asio::buffer(buffer), ec);
        if (ec) {
            return false;
        }
        text.append(buffer, n);
    }
    return true;
}

// The most a piece of a stream may lag through sluice. The streaming tests below go in
// lockstep: the next piece is sent only once the previous one has come through, so a relay that
// held a piece until more came, or until a read filled, would hold it until the sender gave up
// (event_stream_upstream::lockstep_patience, 10 s; piece_patience), never within this bound. A
// loaded machine's scheduling has made a piece lag 61 ms on CI's two shared cores (then paced
// 200 ms apart, with half that as the bound); 1 s leaves room for a sanitized build's 5-20x.
constexpr auto stream_lag_bound = 1000ms;

/// How long the upload below waits for a piece to reach the upstream before it fails.
constexpr auto piece_patience = 10s;

// Ten events, each sent once the previous one reached the client: each arrives within
// stream_lag_bound of the upstream sending it (sluice neither buffers a stream nor waits to
// fill a read), and all of them arrive.
TEST_P(StreamingTest, EventsArriveAsTheUpstreamSendsThem) {
    constexpr int count = 10;
    const auto upstream = event_stream_upstream::lockstep(count);
    const auto rate_limit = rate_limit_yaml();
    if (rate_limit.empty()) {
        GTEST_SKIP() << "redis-server is not on PATH";
    }
    sluice_process sluice(compose_yaml(upstream->url(), rate_limit));
    const auto received =
        receive_events(sluice.port(), count, 30s, [&](int i) { upstream->received(i); });
    const auto sent = upstream->sent();
    for (int i = 0; i < count; ++i) {
        const auto& at = received[static_cast<std::size_t>(i)];
        ASSERT_TRUE(at.has_value()) << "event " << i << " never arrived";
        ASSERT_LT(static_cast<std::size_t>(i), sent.size());
        const auto lag = std::chrono::duration_cast<std::chrono::milliseconds>(
            *at - sent[static_cast<std::size_t>(i)]);
        EXPECT_LT(lag, stream_lag_bound) << "event " << i;
    }
    EXPECT_EQ(sent.size(), static_cast<std::size_t>(count));
}

// The request direction: a chunked upload whose pieces the client sends one at a time, each once
// the previous one reached the upstream: each arrives within stream_lag_bound of the client
// sending it (sluice forwards the body as it comes, and does not wait to fill a buffer).
TEST_P(StreamingTest, AStreamedUploadIsForwardedAsItComes) {
    constexpr int count = 8;
    upload_upstream upstream;
    auto rate_limit = rate_limit_yaml();
    if (rate_limit.empty()) {
        GTEST_SKIP() << "redis-server is not on PATH";
    }
    sluice_process sluice(compose_yaml(upstream.url(), rate_limit));
    auto client = fd_stream::connect_loopback(sluice.port());
    client.timeout(30s);
    client.write_all("POST /events HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n");
    std::vector<clock_type::time_point> sent;
    for (int i = 0; i < count; ++i) {
        const auto piece = fmt::format("piece {};", i);
        sent.push_back(clock_type::now());
        client.write_all(fmt::format("{:x}\r\n{}\r\n", piece.size(), piece));
        ASSERT_TRUE(upstream.wait_for_piece(static_cast<std::size_t>(i), piece_patience))
            << "piece " << i << " never arrived";
    }
    client.write_all("0\r\n\r\n");
    std::string text;
    ASSERT_TRUE(read_until(client, text, "\r\n\r\nok")) << text;
    EXPECT_TRUE(text.starts_with("HTTP/1.1 200")) << text;
    const auto arrived = upstream.arrived();
    ASSERT_EQ(arrived.size(), static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) {
        const auto& at = arrived[static_cast<std::size_t>(i)];
        ASSERT_TRUE(at.has_value()) << "piece " << i << " never arrived";
        const auto lag = std::chrono::duration_cast<std::chrono::milliseconds>(
            *at - sent[static_cast<std::size_t>(i)]);
        EXPECT_LT(lag, stream_lag_bound) << "piece " << i;
    }
}

// upstream.timeout (1 s) is the longest wait for the next piece of a stream, not the stream's
// whole length: six events 600 ms apart (3 s in all) go through to the end.
TEST_P(StreamingTest, UpstreamTimeoutBoundsTheGapNotTheStream) {
    constexpr int count = 6;
    event_stream_upstream upstream(count, 600ms);
    const auto rate_limit = rate_limit_yaml();
    if (rate_limit.empty()) {
        GTEST_SKIP() << "redis-server is not on PATH";
    }
    auto yaml = compose_yaml(upstream.url(), rate_limit);
    const auto url_line = fmt::format("  url: \"{}\"\n", upstream.url());
    ASSERT_NE(yaml.find(url_line), std::string::npos) << yaml;
    yaml.insert(yaml.find(url_line) + url_line.size(), "  timeout: 1s\n");
    sluice_process sluice(yaml);
    const auto started = clock_type::now();
    const auto received = receive_events(sluice.port(), count, 10s);
    for (int i = 0; i < count; ++i) {
        EXPECT_TRUE(received[static_cast<std::size_t>(i)].has_value()) << "event " << i;
    }
    // The stream outlasted the timeout three times over.
    EXPECT_GE(clock_type::now() - started, 3s);
}

// A client that leaves mid-stream makes sluice close the upstream connection at once, while the
// upstream is silent (an event every 2 s): the backend can stop generating. (sluice used to
// notice only at its next write to the client, here 2 s after the first event, so nearly 2 s
// after the client left: client_left_bound, 1 s, tells that apart and leaves a sanitized
// build's scheduling most of a second.)
// How the client goes: it closes its socket, or only its sending side (a half-close, which
// counts as leaving, as with nginx's default: docs/configuration.md, `upstream`).
constexpr auto client_left_bound = 1000ms;

void leave(fd_stream& client, bool half_close) {
    if (half_close) {
        client.shutdown_send();
    } else {
        client.close();
    }
}

TEST_P(StreamingTest, AClientLeavingMidStreamClosesTheUpstreamAtOnce) {
    for (const bool half_close : {false, true}) {
        SCOPED_TRACE(half_close ? "half-close" : "close");
        client_leaves_mid_stream(half_close);
        if (HasFatalFailure() || IsSkipped()) {
            return;
        }
    }
}

void StreamingTest::client_leaves_mid_stream(bool half_close) {
    event_stream_upstream upstream(5, 2s);
    const auto rate_limit = rate_limit_yaml();
    if (rate_limit.empty()) {
        GTEST_SKIP() << "redis-server is not on PATH";
    }
    sluice_process sluice(compose_yaml(upstream.url(), rate_limit));
    auto client = fd_stream::connect_loopback(sluice.port());
    client.timeout(5s);
    client.write_all("GET /events HTTP/1.1\r\nHost: test\r\n\r\n");
    std::string text;
    ASSERT_TRUE(read_until(client, text, "data: 0")) << text;
    leave(client, half_close);
    const auto left = clock_type::now();
    ASSERT_TRUE(eventually([&] { return upstream.closed_at().has_value(); }, 1500ms))
        << "the upstream connection stayed open";
    EXPECT_LT(*upstream.closed_at() - left, client_left_bound);
    EXPECT_EQ(upstream.sent().size(), 1u) << "nothing more was sent for the departed client";
    EXPECT_TRUE(sluice.wait_for_log("path=/events", 2s)) << sluice.log_text();
    EXPECT_NE(sluice.log_text().find("end=client_left"), std::string::npos) << sluice.log_text();
    if (holds_slots()) {
        // Given back when the request ends, just after its access-log line.
        const auto admin = admin_port(sluice);
        EXPECT_TRUE(eventually(
            [&] {
                return metric_value(scrape_metrics(admin),
                                    R"(sluice_concurrency_in_flight{rule="streams"})") == 0.0;
            },
            1s))
            << "the departed stream's slot was not given back\n"
            << scrape_metrics(admin);
    }
}

// As above, but the client leaves once its stream has been silent longer than
// server.idle-timeout (1 s), with upstream.timeout (60 s) longer, as for a stream of rare events.
// The client stream's deadline, set for the last write, passed meanwhile, and its watchdog
// cancelled what waited on the socket: the watch on the client too, which was not armed again,
// so that its leaving was noticed only at the upstream's next event (here 30 s later).
TEST(Streaming, AClientLeavingAfterTheIdleTimeoutStillClosesTheUpstreamAtOnce) {
    event_stream_upstream upstream(2, 30s);
    auto yaml = compose_yaml(upstream.url(), roomy_fallback_yaml(), "  idle-timeout: 1s\n");
    const auto url_line = fmt::format("  url: \"{}\"\n", upstream.url());
    ASSERT_NE(yaml.find(url_line), std::string::npos) << yaml;
    yaml.insert(yaml.find(url_line) + url_line.size(), "  timeout: 60s\n");
    sluice_process sluice(yaml);
    auto client = fd_stream::connect_loopback(sluice.port());
    client.timeout(5s);
    client.write_all("GET /events HTTP/1.1\r\nHost: test\r\n\r\n");
    std::string text;
    ASSERT_TRUE(read_until(client, text, "data: 0")) << text;
    // Past the idle timeout after the last write (and the coarse clock's two ticks), the
    // condition under test: time passing, not a wait for sluice.
    std::this_thread::sleep_for(1500ms);
    ASSERT_FALSE(upstream.closed_at()) << "sluice closed the stream while the client was there";
    client.close();
    const auto left = clock_type::now();
    ASSERT_TRUE(eventually([&] { return upstream.closed_at().has_value(); }, 5s))
        << "the upstream connection stayed open after the client left";
    EXPECT_LT(*upstream.closed_at() - left, 500ms);
    EXPECT_EQ(upstream.sent().size(), 1u) << "nothing more was sent for the departed client";
    EXPECT_TRUE(sluice.wait_for_log("path=/events", 2s)) << sluice.log_text();
    EXPECT_NE(sluice.log_text().find("end=client_left"), std::string::npos) << sluice.log_text();
}

/// A chunked body as it came on the wire: its data, and how many chunks (the last one aside)
/// carried it; nullopt if the bytes are not a whole chunked body.
struct dechunked {
    std::string data;
    std::size_t chunks = 0;
};

std::optional<dechunked> dechunk(std::string_view wire) {
    dechunked out;
    for (;;) {
        const auto eol = wire.find("\r\n");
        if (eol == std::string_view::npos) {
            return std::nullopt;
        }
        std::size_t size = 0;
        const auto digits = wire.substr(0, eol);
        const auto [end, err] =
            std::from_chars(digits.data(), digits.data() + digits.size(), size, 16);
        if (err != std::errc{} || end != digits.data() + digits.size()) {
            return std::nullopt;
        }
        wire.remove_prefix(eol + 2);
        if (size == 0) {
            return wire == "\r\n" ? std::optional(out) : std::nullopt;
        }
        if (wire.size() < size + 2 || wire.substr(size, 2) != "\r\n") {
            return std::nullopt;
        }
        out.data.append(wire.substr(0, size));
        ++out.chunks;
        wire.remove_prefix(size + 2);
    }
}

// The chunked body after the header in `message`.
std::optional<dechunked> body_of(const std::string& message) {
    const auto end = message.find("\r\n\r\n");
    return end == std::string::npos ? std::nullopt
                                    : dechunk(std::string_view(message).substr(end + 4));
}

// How many one-byte chunks the tests below send in one write (12,005 bytes on the wire), and the
// most writes sluice may make of them: each block it forwards is one chunk of its own framing,
// so the chunks that arrive count its writes. A write per read is the most: a read takes 512
// bytes at least (Beast's read_size; sluice's buffers of about 1 KiB read 1,020 bytes, 12
// writes here), and the bound allows reads of half that. A write per parsed piece made one per
// chunk, 2,000.
constexpr std::size_t tiny_chunks = 2000;
constexpr std::size_t most_writes = tiny_chunks * 6 / 256;

// A request body of one-byte chunks that came in one write goes upstream in a write or a few, not
// one per chunk: what a read brought is parsed whole before the block is forwarded. A first
// chunk, sent alone and seen upstream, puts the rest on the relay's path (not the first block's,
// read before the upstream is contacted). The body arrives intact.
TEST(Streaming, BufferedChunksOfAnUploadGoUpstreamInOneWrite) {
    std::atomic<bool> first_arrived = false;
    std::mutex mutex;
    std::string received;
    one_connection_server upstream([&](int fd) {
        fd_stream stream(fd);
        stream.timeout(10s);
        std::string text;
        const bool first = read_until(stream, text, "\r\n\r\n1\r\nF\r\n");
        first_arrived = first;
        if (first && read_until(stream, text, "\r\n0\r\n\r\n")) {
            error_code ignored;
            stream.write_all("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", ignored);
        }
        std::lock_guard lock(mutex);
        received = text;
    });
    sluice_process sluice(compose_yaml(upstream.url(), roomy_fallback_yaml()));
    auto client = fd_stream::connect_loopback(sluice.port());
    client.timeout(10s);
    client.write_all("POST /upload HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "1\r\nF\r\n");
    ASSERT_TRUE(eventually([&] { return first_arrived.load(); }, 5s))
        << "the first chunk never reached the upstream";
    client.write_all(chunk_encode(pattern_string(1, tiny_chunks), 1));
    std::string response;
    ASSERT_TRUE(read_until(client, response, "\r\n\r\nok")) << response;
    EXPECT_TRUE(response.starts_with("HTTP/1.1 200")) << response;
    std::lock_guard lock(mutex);
    const auto body = body_of(received);
    ASSERT_TRUE(body) << received.substr(0, 2000);
    EXPECT_EQ(body->data, "F" + pattern_string(1, tiny_chunks));
    EXPECT_GE(body->chunks, 2u); // the first chunk went alone
    EXPECT_LE(body->chunks, 1 + most_writes);
}

// The mirror: a response body of one-byte chunks that came in one read goes to the client in a
// write or a few. A first chunk, sent alone and seen by the client, puts the rest on the relay's
// loop (not the first write, which takes what came with the header).
TEST(Streaming, BufferedChunksOfAResponseGoToTheClientInOneWrite) {
    std::atomic<bool> go = false;
    one_connection_server upstream([&](int fd) {
        fd_stream stream(fd);
        stream.timeout(10s);
        std::string text;
        if (!read_until(stream, text, "\r\n\r\n")) {
            return;
        }
        error_code ec;
        stream.write_all("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nF\r\n", ec);
        if (!ec && eventually([&] { return go.load(); }, 5s)) {
            stream.write_all(chunk_encode(pattern_string(1, tiny_chunks), 1), ec);
        }
        read_until(stream, text, "never sent: wait for sluice to close");
    });
    sluice_process sluice(compose_yaml(upstream.url(), roomy_fallback_yaml()));
    auto client = fd_stream::connect_loopback(sluice.port());
    client.timeout(10s);
    client.write_all("GET /download HTTP/1.1\r\nHost: test\r\n\r\n");
    std::string response;
    ASSERT_TRUE(read_until(client, response, "\r\n\r\n1\r\nF\r\n")) << response;
    go = true;
    ASSERT_TRUE(read_until(client, response, "\r\n0\r\n\r\n")) << response.substr(0, 2000);
    EXPECT_TRUE(response.starts_with("HTTP/1.1 200")) << response.substr(0, 2000);
    const auto body = body_of(response);
    ASSERT_TRUE(body) << response.substr(0, 2000);
    EXPECT_EQ(body->data, "F" + pattern_string(1, tiny_chunks));
    EXPECT_GE(body->chunks, 2u);
    EXPECT_LE(body->chunks, 1 + most_writes);
}

/// Serves an upstream connection: reads the request's header, sends `reply` (a response cut
/// short, say) and closes.
void answer_and_close(int fd, std::string_view reply) {
    fd_stream stream(fd);
    stream.timeout(10s);
    std::string text;
    if (read_until(stream, text, "\r\n\r\n")) {
        error_code ignored;
        stream.write_all(reply, ignored);
    }
}

/// What a client got until its connection ended, and how it ended: eof for a FIN,
/// connection_reset for a reset.
struct connection_end {
    std::string text;
    error_code ec;
};

connection_end read_to_the_end(std::uint16_t port, std::string_view request) {
    auto client = fd_stream::connect_loopback(port);
    client.timeout(10s);
    client.write_all(request);
    connection_end end;
    char buffer[4096];
    while (!end.ec) {
        const auto n = client.read_some(boost::asio::buffer(buffer), end.ec);
        end.text.append(buffer, n);
    }
    return end;
}

constexpr std::string_view chunked_cut_short =
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";

// An HTTP/1.0 client gets a body without a length as one that ends with the connection: when the
// upstream breaks mid-body (here: a chunked body closed before its last chunk), the connection
// ends with a reset, which the client reads as an error. A FIN made the half body look whole.
TEST(Streaming, ABodyThatEndsWithTheConnectionCutShortEndsWithAReset) {
    one_connection_server upstream([](int fd) { answer_and_close(fd, chunked_cut_short); });
    sluice_process sluice(compose_yaml(upstream.url(), roomy_fallback_yaml()));
    const auto end = read_to_the_end(sluice.port(), "GET /cut HTTP/1.0\r\nHost: test\r\n\r\n");
    EXPECT_EQ(end.ec, boost::asio::error::connection_reset) << end.ec.message() << "\n" << end.text;
    EXPECT_TRUE(sluice.wait_for_log("path=/cut", 5s)) << sluice.log_text();
    EXPECT_NE(sluice.log_text().find("end=upstream_broke"), std::string::npos) << sluice.log_text();
}

// What a client can tell cut short by itself ends with a FIN, as before: an HTTP/1.1 client's
// chunked body lacks its last chunk, and an HTTP/1.0 client's body has its Content-Length.
TEST(Streaming, ABodyCutShortThatTheClientCanTellEndsWithAFin) {
    {
        one_connection_server upstream([](int fd) { answer_and_close(fd, chunked_cut_short); });
        sluice_process sluice(compose_yaml(upstream.url(), roomy_fallback_yaml()));
        const auto end = read_to_the_end(sluice.port(), "GET /cut HTTP/1.1\r\nHost: test\r\n\r\n");
        EXPECT_EQ(end.ec, boost::asio::error::eof) << end.ec.message() << "\n" << end.text;
        EXPECT_NE(end.text.find("Transfer-Encoding: chunked"), std::string::npos) << end.text;
        EXPECT_EQ(end.text.find("\r\n0\r\n\r\n"), std::string::npos) << end.text;
    }
    one_connection_server upstream([](int fd) {
        answer_and_close(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello");
    });
    sluice_process sluice(compose_yaml(upstream.url(), roomy_fallback_yaml()));
    const auto end = read_to_the_end(sluice.port(), "GET /cut HTTP/1.0\r\nHost: test\r\n\r\n");
    EXPECT_EQ(end.ec, boost::asio::error::eof) << end.ec.message() << "\n" << end.text;
    EXPECT_NE(end.text.find("Content-Length: 100"), std::string::npos) << end.text;
}

INSTANTIATE_TEST_SUITE_P(Stores,
                         StreamingTest,
                         ::testing::Values(streaming_case{"memory", "shape"},
                                           streaming_case{"memory", "police"},
                                           streaming_case{"memory", "concurrency"},
                                           streaming_case{"redis", "shape"},
                                           streaming_case{"redis", "police"},
                                           streaming_case{"redis", "concurrency"}),
                         [](const auto& param_info) {
                             return std::string(param_info.param.store) + "_" +
                                    param_info.param.limiter;
                         });

} // namespace
} // namespace sluice::test
