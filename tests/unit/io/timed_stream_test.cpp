// SPDX-License-Identifier: Apache-2.0
#include "sluice/io/connect_in_turn.hpp"
#include "sluice/io/timed_stream.hpp"
#include "support/run_coro.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <optional>
#include <poll.h>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// A timed_stream connected over loopback to a plain socket (the peer).
class TimedStreamTest : public ::testing::Test {
protected:
    TimedStreamTest() {
        tcp::acceptor acceptor(ioc_, tcp::endpoint(net::ip::address_v4::loopback(), 0));
        stream_.socket().connect(acceptor.local_endpoint());
        acceptor.accept(peer_);
        error_code ec;
        enable_drained_reads(stream_.socket(), ec); // as the session and the upstream pool do
        EXPECT_FALSE(ec) << ec.message();
    }

    /// Runs the event loop until the reactor has taken the event of what the peer sent since a
    /// read emptied the socket (bytes, its end), with nothing to complete: what a read or a wait
    /// started afterwards must still see. Without drained reads the stream cannot tell, and this
    /// returns at once.
    void until_the_reactor_takes_the_event() {
        ASSERT_TRUE(test::run_until(
            ioc_, [this] { return stream_.event_since_emptied(); }, 5s))
            << "the reactor never took the event";
    }

    /// Starts a read on the stream; `result` is set when it completes.
    void start_read() {
        stream_.async_read_some(net::buffer(in_), [this](error_code ec, std::size_t n) {
            result_ = ec;
            read_ = n;
        });
    }

    /// Runs the io_context until the read completes; returns how long that took.
    steady::duration wait_for_read(steady::time_point since) {
        EXPECT_TRUE(test::run_until(
            ioc_, [this] { return result_.has_value(); }, 10s));
        return steady::now() - since;
    }

    /// The peer sends "last" and closes its side; the reactor takes the edge of both with nothing
    /// to complete, then a read takes the bytes (the end stays behind them, with no new edge).
    void read_last_bytes_with_the_end() {
        stream_.expires_after(10s);
        net::write(peer_, net::buffer(std::string_view("last")));
        peer_.shutdown(tcp::socket::shutdown_send);
        // A new connection has had an event (event_since_emptied is true before any read), so
        // the loop runs a while instead: bytes written over loopback are there at once, and the
        // reactor's first look takes their edge.
        peer_timer_.expires_after(100ms);
        peer_timer_.async_wait([](error_code) {});
        ioc_.run_for(50ms);
        start_read();
        wait_for_read(steady::now());
        ASSERT_FALSE(*result_) << result_->message();
        ASSERT_EQ(std::string_view(in_.data(), read_), "last");
    }

    /// Sends `text` from the peer after `delay`.
    void peer_sends_after(steady::duration delay, std::string_view text) {
        peer_timer_.expires_after(delay);
        peer_timer_.async_wait([this, text](error_code) { net::write(peer_, net::buffer(text)); });
    }

    net::io_context ioc_;
    timed_stream stream_{ioc_.get_executor()};
    tcp::socket peer_{ioc_};
    net::steady_timer peer_timer_{ioc_};
    std::array<char, 64> in_{};
    std::optional<error_code> result_;
    std::size_t read_ = 0;
};

TEST_F(TimedStreamTest, ReadFailsWithTimeoutAfterTheDeadline) {
    const auto start = steady::now();
    stream_.expires_after(100ms);
    start_read();
    const auto took = wait_for_read(start);
    EXPECT_EQ(*result_, beast::error::timeout);
    EXPECT_GE(took, 100ms);
    EXPECT_LT(took, 5s); // the watchdog fires once the deadline has passed, not much later
}

TEST_F(TimedStreamTest, MovingTheDeadlineLaterKeepsAPendingReadAlive) {
    const auto start = steady::now();
    stream_.expires_after(100ms);
    start_read();
    // Before the first deadline, push it far out: the watchdog must sleep again, not cancel.
    net::steady_timer later(ioc_, 20ms);
    later.async_wait([this](error_code) { stream_.expires_after(10s); });
    peer_sends_after(300ms, "hello");
    wait_for_read(start);
    EXPECT_FALSE(*result_) << result_->message();
    EXPECT_EQ(std::string_view(in_.data(), read_), "hello");
}

TEST_F(TimedStreamTest, AnEarlierDeadlineTakesEffect) {
    const auto start = steady::now();
    stream_.expires_after(30s);
    stream_.expires_after(100ms); // the watchdog sleeps until 30 s: it must be woken earlier
    start_read();
    const auto took = wait_for_read(start);
    EXPECT_EQ(*result_, beast::error::timeout);
    EXPECT_LT(took, 5s);
}

TEST_F(TimedStreamTest, ExpiresNeverLiftsTheDeadline) {
    const auto start = steady::now();
    stream_.expires_after(100ms);
    stream_.expires_never();
    start_read();
    peer_sends_after(300ms, "late");
    wait_for_read(start);
    EXPECT_FALSE(*result_) << result_->message();
    EXPECT_EQ(std::string_view(in_.data(), read_), "late");
}

TEST_F(TimedStreamTest, ATimeoutDoesNotCarryOverToTheNextRead) {
    const auto start = steady::now();
    stream_.expires_after(50ms);
    start_read();
    wait_for_read(start);
    ASSERT_EQ(*result_, beast::error::timeout);

    result_.reset();
    stream_.expires_after(10s);
    start_read();
    peer_sends_after(10ms, "next");
    wait_for_read(steady::now());
    EXPECT_FALSE(*result_) << result_->message();
    EXPECT_EQ(std::string_view(in_.data(), read_), "next");
}

// The session waits for a keep-alive connection's next request with async_wait_readable and no
// look at the socket first: bytes that came while nothing waited (their edge already taken by
// the reactor) must complete the wait, not leave it until the deadline.
TEST_F(TimedStreamTest, AReadableWaitSeesBytesThatCameBeforeIt) {
    stream_.expires_after(10s);
    start_read();
    peer_sends_after(0ms, "first");
    wait_for_read(steady::now());
    ASSERT_FALSE(*result_) << result_->message();

    // The next bytes arrive while no operation waits; the reactor hears of them (a timer keeps
    // it polling) and has nothing to complete.
    net::write(peer_, net::buffer(std::string_view("second")));
    until_the_reactor_takes_the_event();

    std::optional<error_code> waited;
    stream_.async_wait_readable([&waited](error_code ec) { waited = ec; });
    const auto start = steady::now();
    ASSERT_TRUE(test::run_until(
        ioc_, [&waited] { return waited.has_value(); }, 5s));
    EXPECT_FALSE(*waited) << waited->message();
    EXPECT_LT(steady::now() - start, 5s);
    EXPECT_TRUE(stream_.readable_now());
}

// async_wait_event, the wait for a keep-alive connection's next request: after a read that
// emptied the socket it starts without a look (drained_read.hpp) and must still see what comes.

/// Starts an async_wait_event (or, verified, an async_wait_readable); `waited` is set when it
/// completes.
void start_wait(timed_stream& stream, std::optional<error_code>& waited, bool verified = false) {
    auto done = [&waited](error_code ec) {
        waited = ec;
    };
    if (verified) {
        stream.async_wait_readable(done);
    } else {
        stream.async_wait_event(done);
    }
}

TEST_F(TimedStreamTest, AnEventWaitAfterAnEmptyingReadCompletesWhenBytesCome) {
    stream_.expires_after(10s);
    start_read();
    peer_sends_after(0ms, "first");
    wait_for_read(steady::now());
    ASSERT_FALSE(*result_) << result_->message();
    ASSERT_EQ(read_, 5u); // short: the socket is empty

    std::optional<error_code> waited;
    start_wait(stream_, waited);
    ioc_.run_for(100ms);
    EXPECT_FALSE(waited.has_value()) << "completed with nothing to read";
    peer_sends_after(0ms, "second");
    ASSERT_TRUE(test::run_until(
        ioc_, [&waited] { return waited.has_value(); }, 5s));
    EXPECT_FALSE(*waited) << waited->message();
    EXPECT_TRUE(stream_.readable_now());
}

// event_since_emptied, the upstream pool's check of an idle connection: after a read that
// emptied the socket, false until the reactor has taken an event; asking changes nothing.
TEST_F(TimedStreamTest, EventSinceEmptiedTellsWhetherTheEventLoopSawSomethingCome) {
    if constexpr (!drained_reads) {
        GTEST_SKIP() << "not this Boost's epoll reactor: the stream cannot tell, and says true";
    }
    stream_.expires_after(10s);
    start_read();
    peer_sends_after(0ms, "first");
    wait_for_read(steady::now());
    ASSERT_FALSE(*result_) << result_->message();
    EXPECT_FALSE(stream_.event_since_emptied());

    // Come, but the event loop has not looked since: unseen.
    net::write(peer_, net::buffer(std::string_view("second")));
    EXPECT_FALSE(stream_.event_since_emptied());
    until_the_reactor_takes_the_event();
    EXPECT_TRUE(stream_.event_since_emptied()); // asked twice: still there

    result_.reset();
    start_read();
    wait_for_read(steady::now());
    ASSERT_FALSE(*result_) << result_->message();
    EXPECT_EQ(std::string_view(in_.data(), read_), "second");
    EXPECT_FALSE(stream_.event_since_emptied());
}

// A look's operation is allocated in its stream's memory while that is free, and in the heap
// while an earlier look's operation is still there.
TEST(LookAllocator, TakesItsStreamsMemoryWhileFreeAndTheHeapOtherwise) {
    detail::look_memory memory;
    detail::look_allocator<std::array<char, 128>> small(&memory);
    auto* first = small.allocate(1);
    EXPECT_EQ(static_cast<void*>(first), static_cast<void*>(memory.bytes));
    auto* second = small.allocate(1);
    EXPECT_NE(static_cast<void*>(second), static_cast<void*>(memory.bytes));
    small.deallocate(second, 1);
    small.deallocate(first, 1);
    EXPECT_FALSE(memory.taken);

    detail::look_allocator<std::array<char, sizeof(memory.bytes) + 1>> large(small);
    auto* more = large.allocate(1);
    EXPECT_NE(static_cast<void*>(more), static_cast<void*>(memory.bytes)) << "too large";
    large.deallocate(more, 1);
    EXPECT_FALSE(memory.taken);
}

// The look's operation fits the stream's memory, and keeps it: looks whose operations are still
// queued when the stream goes run after it on memory still theirs (ASan, in the sanitized
// build, would report a use after free).
TEST(TimedStreamLook, OperationsQueuedPastTheStreamsEndRunSafely) {
    if constexpr (!drained_reads) {
        GTEST_SKIP() << "not this Boost's epoll reactor: a look queues no operation";
    }
    net::io_context ioc;
    tcp::acceptor acceptor(ioc, tcp::endpoint(net::ip::address_v4::loopback(), 0));
    tcp_socket client(ioc);
    client.connect(acceptor.local_endpoint());
    tcp_socket peer(ioc);
    acceptor.accept(peer);
    {
        timed_stream stream(std::move(client));
        error_code ec;
        enable_drained_reads(stream.socket(), ec);
        ASSERT_FALSE(ec) << ec.message();
        stream.event_since_emptied();
        EXPECT_TRUE(stream.look_in_own_memory_for_test()) << "the look's operation did not fit";
        stream.event_since_emptied(); // the first's operation not run yet: the heap
        stream.event_since_emptied();
    }
    EXPECT_EQ(ioc.poll(), 3u) << "each look's operation runs once";
}

TEST_F(TimedStreamTest, AnEventWaitSeesBytesThatCameBeforeIt) {
    stream_.expires_after(10s);
    start_read();
    peer_sends_after(0ms, "first");
    wait_for_read(steady::now());
    ASSERT_FALSE(*result_) << result_->message();

    // As for async_wait_readable below: the reactor takes the next bytes' edge with nothing to
    // complete.
    net::write(peer_, net::buffer(std::string_view("second")));
    until_the_reactor_takes_the_event();

    std::optional<error_code> waited;
    start_wait(stream_, waited);
    ASSERT_TRUE(test::run_until(
        ioc_, [&waited] { return waited.has_value(); }, 5s));
    EXPECT_FALSE(*waited) << waited->message();
    EXPECT_TRUE(stream_.readable_now());
}

// A read that filled its buffer may have left bytes: the wait after it must find them.
TEST_F(TimedStreamTest, AnEventWaitAfterAReadThatFilledItsBufferSeesWhatIsLeft) {
    stream_.expires_after(10s);
    const std::string sent(in_.size() + 3, 'x');
    net::write(peer_, net::buffer(sent));
    start_read();
    wait_for_read(steady::now());
    ASSERT_FALSE(*result_) << result_->message();
    ASSERT_EQ(read_, in_.size());

    std::optional<error_code> waited;
    start_wait(stream_, waited);
    ASSERT_TRUE(test::run_until(
        ioc_, [&waited] { return waited.has_value(); }, 5s));
    EXPECT_FALSE(*waited) << waited->message();
    result_.reset();
    start_read();
    wait_for_read(steady::now());
    EXPECT_FALSE(*result_) << result_->message();
    EXPECT_EQ(read_, 3u);
}

TEST_F(TimedStreamTest, AnEventWaitSeesThePeerLeave) {
    stream_.expires_after(10s);
    start_read();
    peer_sends_after(0ms, "last");
    wait_for_read(steady::now());
    ASSERT_FALSE(*result_) << result_->message();

    std::optional<error_code> waited;
    start_wait(stream_, waited);
    ioc_.run_for(50ms);
    ASSERT_FALSE(waited.has_value());
    peer_.close();
    ASSERT_TRUE(test::run_until(
        ioc_, [&waited] { return waited.has_value(); }, 5s));
    EXPECT_FALSE(*waited) << waited->message(); // readable: the read says what it is
    result_.reset();
    start_read();
    wait_for_read(steady::now());
    EXPECT_EQ(*result_, net::error::eof);
}

// The end of the stream that came with the last bytes, its edge taken by the reactor before the
// read that took them: a short read must not report the socket empty (the close would go unseen
// until the deadline), which the kernel's count of what is left (TCP_INQ) tells apart.
TEST_F(TimedStreamTest, AReadAfterTheLastBytesSeesTheEndThatCameWithThem) {
    ASSERT_NO_FATAL_FAILURE(read_last_bytes_with_the_end());
    const auto start = steady::now();
    result_.reset();
    start_read();
    wait_for_read(start);
    EXPECT_EQ(*result_, net::error::eof) << result_->message();
    EXPECT_LT(steady::now() - start, 5s) << "the end was seen only at the deadline";
}

TEST_F(TimedStreamTest, AnEventWaitAfterTheLastBytesSeesTheEndThatCameWithThem) {
    ASSERT_NO_FATAL_FAILURE(read_last_bytes_with_the_end());
    const auto start = steady::now();
    std::optional<error_code> waited;
    start_wait(stream_, waited);
    ASSERT_TRUE(test::run_until(
        ioc_, [&waited] { return waited.has_value(); }, 10s));
    EXPECT_FALSE(*waited) << waited->message();
    EXPECT_LT(steady::now() - start, 5s) << "the end was seen only at the deadline";
    result_.reset();
    start_read();
    wait_for_read(start);
    EXPECT_EQ(*result_, net::error::eof) << result_->message();
}

#ifdef SLUICE_DRAINED_READS
// What drained reads rely on: with TCP_INQ, a read says how much is left behind it, and a
// non-zero count when only the end of the stream is.
TEST_F(TimedStreamTest, TheKernelSaysWhatIsLeftBehindARead) {
    const auto read_and_count = [this](std::size_t size) {
        int left = -1;
        EXPECT_GT(
            detail::recv_counting_left(stream_.socket().native_handle(), in_.data(), size, 0, left),
            0);
        return left;
    };
    stream_.socket().non_blocking(false);
    net::write(peer_, net::buffer(std::string_view("0123456789")));
    EXPECT_EQ(read_and_count(4), 6); // "456789" left
    EXPECT_EQ(read_and_count(in_.size()), 0);
    net::write(peer_, net::buffer(std::string_view("end")));
    peer_.shutdown(tcp::socket::shutdown_send);
    // Wait until the end has arrived behind the bytes, then read the bytes alone.
    ASSERT_TRUE(test::run_until(
        ioc_,
        [this] {
            ::pollfd p{stream_.socket().native_handle(), POLLRDHUP, 0};
            return ::poll(&p, 1, 0) == 1 && (p.revents & POLLRDHUP) != 0;
        },
        5s));
    EXPECT_EQ(read_and_count(in_.size()), 1); // nothing but the end
}
#endif

// Bytes and a reset in one event (the peer wrote and reset before the reactor looked): the
// read that takes the bytes may hear nothing is left (drained_read.hpp: the kernel's count
// leaves a reset out) and no event follows. A look and a read made at once still find the
// reset, which a held request's watch relies on (request_wait.cpp).
TEST_F(TimedStreamTest, ALookAndAReadNowFindAResetThatCameWithTheLastBytes) {
    stream_.expires_after(10s);
    start_read(); // queued: nothing to read yet
    net::write(peer_, net::buffer(std::string_view("last")));
    peer_.set_option(net::socket_base::linger(true, 0));
    peer_.close(); // a reset
    wait_for_read(steady::now());
    ASSERT_FALSE(*result_) << result_->message();
    ASSERT_EQ(std::string_view(in_.data(), read_), "last");

    EXPECT_TRUE(stream_.readable_now());
    error_code ec;
    EXPECT_EQ(stream_.read_now(net::buffer(in_), ec), 0u);
    // The look reported the reset and cleared it; the read finds the end behind it.
    EXPECT_TRUE(ec == net::error::eof || ec == net::error::connection_reset) << ec.message();
}

TEST_F(TimedStreamTest, ReadNowTakesWhatIsThereAndSaysWhenNothingIs) {
    error_code ec;
    EXPECT_EQ(stream_.read_now(net::buffer(in_), ec), 0u);
    EXPECT_EQ(ec, net::error::would_block);
    net::write(peer_, net::buffer(std::string_view("now")));
    ASSERT_TRUE(test::run_until(
        ioc_, [this] { return stream_.readable_now(); }, 5s));
    EXPECT_EQ(stream_.read_now(net::buffer(in_), ec), 3u);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(std::string_view(in_.data(), 3), "now");
    peer_.close();
    ASSERT_TRUE(test::run_until(
        ioc_, [this] { return stream_.readable_now(); }, 5s));
    EXPECT_EQ(stream_.read_now(net::buffer(in_), ec), 0u);
    EXPECT_EQ(ec, net::error::eof);
}

TEST_F(TimedStreamTest, AWaitEndsWithTimeoutAfterTheDeadline) {
    for (const bool verified : {false, true}) {
        // Before the deadline is set: it counts from a moment no earlier than this.
        const auto start = steady::now();
        stream_.expires_after(100ms);
        std::optional<error_code> waited;
        start_wait(stream_, waited, verified);
        ASSERT_TRUE(test::run_until(
            ioc_, [&waited] { return waited.has_value(); }, 5s));
        EXPECT_EQ(*waited, beast::error::timeout) << "verified " << verified;
        EXPECT_GE(steady::now() - start, 100ms);
    }
}

// The watchdog cancels what is pending when it fires. When the deadline passes between two
// operations (the coroutine awaited something else meanwhile), the next operation must still
// fail with timeout, not wait with no deadline at all: a peer that then sends nothing would
// hold its connection for ever.
TEST_F(TimedStreamTest, AReadStartedAfterTheWatchdogFiredFailsWithTimeout) {
    stream_.expires_after(50ms);
    net::write(peer_, net::buffer(std::string_view("first")));
    start_read();
    wait_for_read(steady::now());
    ASSERT_FALSE(*result_) << result_->message();

    // Nothing is pending but the watchdog: run() returns once it has fired for good.
    ioc_.restart();
    ioc_.run();

    result_.reset();
    const auto start = steady::now();
    start_read(); // the peer sends nothing more
    ASSERT_TRUE(test::run_until(
        ioc_, [this] { return result_.has_value(); }, 5s))
        << "a read started after the deadline waited with none";
    EXPECT_EQ(*result_, beast::error::timeout);
    EXPECT_LT(steady::now() - start, 1s);

    // A deadline set anew lifts it.
    result_.reset();
    stream_.expires_after(10s);
    start_read();
    peer_sends_after(0ms, "next");
    wait_for_read(steady::now());
    EXPECT_FALSE(*result_) << result_->message();
    EXPECT_EQ(std::string_view(in_.data(), read_), "next");
}

TEST_F(TimedStreamTest, WaitsAndWritesStartedAfterTheWatchdogFiredFailWithTimeout) {
    stream_.expires_after(50ms);
    ioc_.run(); // the watchdog fires with nothing pending

    for (const bool verified : {false, true}) {
        std::optional<error_code> waited;
        start_wait(stream_, waited, verified);
        ASSERT_TRUE(test::run_until(
            ioc_, [&waited] { return waited.has_value(); }, 5s))
            << "verified " << verified;
        EXPECT_EQ(*waited, beast::error::timeout) << "verified " << verified;
    }
    std::optional<error_code> wrote;
    stream_.async_write_some(net::buffer(std::string_view("late")),
                             [&wrote](error_code ec, std::size_t) { wrote = ec; });
    ASSERT_TRUE(test::run_until(
        ioc_, [&wrote] { return wrote.has_value(); }, 5s));
    EXPECT_EQ(*wrote, beast::error::timeout);
}

// The wait of a parked connection or a held request, where waking with nothing to read costs a
// coroutine: an event whose bytes a read already took does not complete it.
TEST_F(TimedStreamTest, AReadableWaitDoesNotCompleteForBytesAReadAlreadyTook) {
    stream_.expires_after(10s);
    // The read's first try takes the bytes before the reactor has taken their edge.
    net::write(peer_, net::buffer(std::string_view("taken")));
    start_read();
    wait_for_read(steady::now());
    ASSERT_FALSE(*result_) << result_->message();
    ASSERT_EQ(std::string_view(in_.data(), read_), "taken");

    std::optional<error_code> waited;
    start_wait(stream_, waited, true);
    peer_timer_.expires_after(200ms);
    peer_timer_.async_wait([](error_code) {});
    ioc_.run_for(150ms); // the reactor takes the edge, if it had not
    EXPECT_FALSE(waited.has_value()) << "completed with nothing to read";
    peer_sends_after(0ms, "next");
    ASSERT_TRUE(test::run_until(
        ioc_, [&waited] { return waited.has_value(); }, 5s));
    EXPECT_FALSE(*waited) << waited->message();
}

// async_read_reply: the read of a reply to a request just written.

TEST_F(TimedStreamTest, AReplyReadGetsTheReplyToARequestJustWritten) {
    stream_.expires_after(10s);
    error_code ec;
    ASSERT_EQ(stream_.write_now(net::buffer(std::string_view("ping")), ec), 4u);
    std::optional<std::size_t> got;
    stream_.async_read_reply(net::buffer(in_), [&](error_code e, std::size_t n) {
        result_ = e;
        got = n;
    });
    std::array<char, 4> request{};
    net::read(peer_, net::buffer(request));
    peer_sends_after(10ms, "pong");
    wait_for_read(steady::now());
    EXPECT_FALSE(*result_) << result_->message();
    EXPECT_EQ(std::string_view(in_.data(), got.value_or(0)), "pong");
}

// Bytes that came before the read, their edge not yet taken by the reactor (no turn of the
// event loop in between), are seen: the edge is still pending.
TEST_F(TimedStreamTest, AReplyReadSeesBytesWhoseEventIsStillPending) {
    stream_.expires_after(10s);
    net::write(peer_, net::buffer(std::string_view("early")));
    std::optional<std::size_t> got;
    stream_.async_read_reply(net::buffer(in_), [&](error_code e, std::size_t n) {
        result_ = e;
        got = n;
    });
    wait_for_read(steady::now());
    EXPECT_FALSE(*result_) << result_->message();
    EXPECT_EQ(std::string_view(in_.data(), got.value_or(0)), "early");
}

// What the read skips, shown by the one case it does not cover (which its callers exclude):
// bytes whose edge the reactor took before the read began are read only with the next bytes.
// A plain read finds them at once.
TEST_F(TimedStreamTest, AReplyReadDoesNotTryTheSocketBeforeItsNextEvent) {
    if constexpr (!untried_reads) {
        GTEST_SKIP() << "not this Boost's epoll reactor: async_read_reply reads as any read";
    }
    stream_.expires_after(10s);
    start_read();
    peer_sends_after(0ms, "first");
    wait_for_read(steady::now());
    ASSERT_FALSE(*result_) << result_->message();

    net::write(peer_, net::buffer(std::string_view("stale")));
    until_the_reactor_takes_the_event(); // with nothing to complete

    result_.reset();
    std::optional<std::size_t> got;
    stream_.async_read_reply(net::buffer(in_), [&](error_code e, std::size_t n) {
        result_ = e;
        got = n;
    });
    ioc_.run_for(100ms);
    EXPECT_FALSE(result_.has_value()) << "the read tried the socket before its next event";
    net::write(peer_, net::buffer(std::string_view("+reply")));
    wait_for_read(steady::now());
    EXPECT_FALSE(*result_) << result_->message();
    EXPECT_EQ(std::string_view(in_.data(), got.value_or(0)), "stale+reply");
}

// A request written to a peer that had closed draws a reset: that is the event the read waits
// for, so it ends at once (the pool's unchecked connection whose upstream closed it).
TEST_F(TimedStreamTest, AReplyReadOnAConnectionThePeerClosedEndsAtOnce) {
    stream_.expires_after(10s);
    peer_.close();
    peer_timer_.expires_after(100ms);
    peer_timer_.async_wait([](error_code) {});
    ioc_.run_for(50ms); // the peer's FIN comes in, its edge taken with nothing to complete

    error_code ec;
    ASSERT_EQ(stream_.write_now(net::buffer(std::string_view("ping")), ec), 4u) << ec.message();
    std::optional<std::size_t> got;
    stream_.async_read_reply(net::buffer(in_), [&](error_code e, std::size_t n) {
        result_ = e;
        got = n;
    });
    const auto took = wait_for_read(steady::now());
    EXPECT_TRUE(*result_) << "read " << got.value_or(0) << " bytes from a closed peer";
    EXPECT_LT(took, 5s);
}

TEST_F(TimedStreamTest, WriteNowWritesWithoutRunningTheIoContext) {
    error_code ec;
    const auto n = stream_.write_now(net::buffer(std::string_view("ping")), ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(n, 4u);
    std::array<char, 4> got{};
    net::read(peer_, net::buffer(got));
    EXPECT_EQ(std::string_view(got.data(), got.size()), "ping");
}

// An address that takes no connection: a listener whose accept queue (backlog 0: one
// connection) a first client filled, so that its SYNs are dropped.
struct address_dropping_syns {
    explicit address_dropping_syns(net::io_context& ioc)
        : listener(ioc)
        , filler(ioc) {
        listener.open(tcp::v4());
        listener.bind(tcp::endpoint(net::ip::address_v4::loopback(), 0));
        listener.listen(0);
        filler.connect(listener.local_endpoint());
    }

    tcp::acceptor listener;
    tcp::socket filler;
};

/// Whether `live` has a connection waiting to be accepted.
bool was_connected_to(tcp::acceptor& live) {
    live.non_blocking(true);
    tcp::socket accepted(live.get_executor());
    error_code ec;
    live.accept(accepted, ec);
    return !ec;
}

// Several addresses (an upstream named by a DNS name): each gets a share of the deadline, so an
// address that drops SYNs costs its share and a live one after it is still reached in time. With
// Asio's range connect the first took the whole deadline, and after the watchdog's cancel the
// range connect went on to the next address with no deadline left. The connects that follow try
// it after the live one, for fail_timeout: each new connection cost it its share again, as long
// as it stayed down.
TEST(ConnectInTurn, AnAddressDroppingSynsCostsItsShareOnceAndTheNextIsReached) {
    net::io_context ioc;
    address_dropping_syns dropping(ioc);
    tcp::acceptor live(ioc, tcp::endpoint(net::ip::address_v4::loopback(), 0));
    const std::vector<tcp::endpoint> endpoints{dropping.listener.local_endpoint(),
                                               live.local_endpoint()};
    timed_stream stream(ioc.get_executor());
    recent_failures failures;
    const auto start = steady::now();
    const auto ec = test::run_coro(ioc, connect_in_turn(stream, endpoints, start + 1s, failures));
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_GE(steady::now() - start, 500ms) << "the first address had half of the deadline";
    EXPECT_LT(steady::now() - start, 1s);
    EXPECT_TRUE(was_connected_to(live));

    timed_stream next(ioc.get_executor());
    const auto again = steady::now();
    const auto next_ec =
        test::run_coro(ioc, connect_in_turn(next, endpoints, again + 1s, failures));
    EXPECT_FALSE(next_ec) << next_ec.message();
    EXPECT_LT(steady::now() - again, 400ms) << "the failed address was tried first again";
    EXPECT_TRUE(was_connected_to(live));
}

// Every address dropping SYNs: the connect ends at the deadline with a timeout, no later.
TEST(ConnectInTurn, EndsAtTheDeadlineWhenNoAddressAnswers) {
    net::io_context ioc;
    address_dropping_syns first(ioc);
    address_dropping_syns second(ioc);
    const std::vector<tcp::endpoint> endpoints{first.listener.local_endpoint(),
                                               second.listener.local_endpoint()};
    timed_stream stream(ioc.get_executor());
    recent_failures failures;
    const auto start = steady::now();
    const auto ec =
        test::run_coro(ioc, connect_in_turn(stream, endpoints, start + 400ms, failures));
    EXPECT_EQ(ec, beast::error::timeout) << ec.message();
    EXPECT_LT(steady::now() - start, 900ms) << "the kernel's SYN retry comes at 1 s";
}

// Tried last, never skipped, and first again once its failure is fail_timeout old or it
// connected; at most max_remembered failures are kept, the oldest forgotten first.
TEST(RecentFailures, AFailedAddressGoesLastForFailTimeout) {
    const tcp::endpoint a(net::ip::address_v4::loopback(), 1);
    const tcp::endpoint b(net::ip::address_v4::loopback(), 2);
    const tcp::endpoint c(net::ip::address_v4::loopback(), 3);
    const std::vector<tcp::endpoint> all{a, b, c};
    recent_failures failures;
    const auto t0 = steady::now();
    EXPECT_EQ(failures.order(all, t0), all);
    failures.failed(a, t0);
    EXPECT_EQ(failures.order(all, t0 + 9s), (std::vector{b, c, a}));
    EXPECT_EQ(failures.order(all, t0 + recent_failures::fail_timeout), all);
    failures.failed(b, t0);
    failures.failed(a, t0 + 1s);
    EXPECT_EQ(failures.order(all, t0 + 2s), (std::vector{c, a, b})) << "each group keeps its order";
    failures.succeeded(b);
    EXPECT_EQ(failures.order(all, t0 + 2s), (std::vector{b, c, a}));
    for (unsigned short port = 100; port < 100 + recent_failures::max_remembered; ++port) {
        failures.failed(tcp::endpoint(net::ip::address_v4::loopback(), port), t0 + 2s);
    }
    EXPECT_EQ(failures.order(all, t0 + 3s), all) << "a's failure, the oldest, was forgotten";
}

TEST(ConnectInTurn, NoAddressIsHostNotFound) {
    net::io_context ioc;
    timed_stream stream(ioc.get_executor());
    recent_failures failures;
    EXPECT_EQ(test::run_coro(ioc, connect_in_turn(stream, {}, steady::now() + 1s, failures)),
              net::error::host_not_found);
}

} // namespace
} // namespace sluice
