// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/errc.hpp"
#include "sluice/io/coarse_clock.hpp"
#include "sluice/upstream/pool.hpp"
#include "support/fake_dns.hpp"
#include "support/run_coro.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <sys/socket.h>
#include <tuple>
#include <vector>

namespace sluice::upstream {
namespace {

using std::chrono::milliseconds;

/// A loopback listener that accepts and keeps every connection until told to close them.
class fake_upstream {
public:
    explicit fake_upstream(net::io_context& ioc)
        : acceptor_(ioc.get_executor(), tcp::endpoint(net::ip::address_v4::loopback(), 0)) {
        net::co_spawn(ioc, accept_all(), net::detached);
    }

    std::uint16_t port() const { return acceptor_.local_endpoint().port(); }

    std::size_t accepted() const { return accepted_.size(); }

    void close_all() {
        for (auto& s : accepted_) {
            error_code ignored;
            s.close(ignored);
        }
    }

    /// Writes `bytes` on every connection accepted.
    void send_all(std::string_view bytes) {
        for (auto& s : accepted_) {
            net::write(s, net::buffer(bytes));
        }
    }

    void stop() {
        error_code ignored;
        acceptor_.close(ignored);
    }

private:
    awaitable<void> accept_all() {
        for (;;) {
            auto [ec, socket] = co_await acceptor_.async_accept();
            if (ec) {
                co_return;
            }
            accepted_.push_back(std::move(socket));
        }
    }

    tcp_acceptor acceptor_;
    std::vector<tcp_socket> accepted_;
};

class PoolTest : public ::testing::Test {
protected:
    PoolTest() {
        settings_.host = "127.0.0.1";
        settings_.port = upstream_.port();
        settings_.connect_timeout = milliseconds(2'000);
        settings_.max_idle = 4;
        settings_.idle_timeout = milliseconds(60'000);
    }

    connection_ptr acquire() {
        auto [ec, conn] = test::run_coro(ioc_, pool_.acquire(settings_));
        EXPECT_FALSE(ec) << ec.message();
        return std::move(conn);
    }

    std::uint16_t local_port(const connection_ptr& c) {
        return c->stream.socket().local_endpoint().port();
    }

    bool wait_accepted(std::size_t n) {
        return test::run_until(ioc_, [&] { return upstream_.accepted() >= n; });
    }

    /// The upstream answers on `conn`, which reads it all as a response is read: the read leaves
    /// the socket empty, and the event loop knows it (timed_stream::event_since_emptied).
    void read_what_the_upstream_sends(connection& conn) {
        upstream_.send_all("ok");
        std::optional<error_code> done;
        conn.stream.expires_after(milliseconds(5'000));
        conn.stream.async_read_some(conn.buffer.prepare(64), [&](error_code ec, std::size_t n) {
            conn.buffer.commit(n);
            done = ec;
        });
        ASSERT_TRUE(test::run_until(ioc_, [&] { return done.has_value(); }));
        ASSERT_FALSE(*done) << done->message();
        conn.buffer.consume(conn.buffer.size());
        conn.stream.expires_never();
    }

    using connect_result = std::optional<std::tuple<error_code, connection_ptr>>;

    /// Starts `pool_.connect(settings)` (`settings_` by default; it must outlive the call) as a
    /// coroutine of its own: `out` holds its result once it has one (a caller that waits for a
    /// place has none yet).
    void start_connect(connect_result& out, const config::upstream_settings* settings = nullptr) {
        const auto* chosen = settings != nullptr ? settings : &settings_;
        net::co_spawn(
            ioc_,
            [this, &out, chosen]() -> awaitable<void> { out = co_await pool_.connect(*chosen); },
            net::detached);
    }

    net::io_context ioc_;
    fake_upstream upstream_{ioc_};
    pool pool_{ioc_.get_executor()};
    config::upstream_settings settings_;
};

TEST_F(PoolTest, ConnectsThenReusesAReleasedConnection) {
    auto first = acquire();
    ASSERT_TRUE(first);
    EXPECT_FALSE(first->reused);
    const auto port = local_port(first);
    pool_.release(std::move(first), settings_);
    EXPECT_EQ(pool_.idle_count(), 1u);

    auto second = acquire();
    ASSERT_TRUE(second);
    EXPECT_TRUE(second->reused);
    EXPECT_EQ(local_port(second), port);
    EXPECT_EQ(pool_.idle_count(), 0u);
    ASSERT_TRUE(wait_accepted(1));
    EXPECT_EQ(upstream_.accepted(), 1u);
}

TEST_F(PoolTest, DropsAConnectionTheUpstreamClosed) {
    auto first = acquire();
    ASSERT_TRUE(wait_accepted(1));
    pool_.release(std::move(first), settings_);
    // On loopback the FIN is queued on our socket by the time close() returns.
    upstream_.close_all();

    auto second = acquire();
    ASSERT_TRUE(second);
    EXPECT_FALSE(second->reused);
    ASSERT_TRUE(wait_accepted(2));
}

TEST_F(PoolTest, HandsOutARecentlyUsedConnectionUncheckedWhenTheCallerCanRetry) {
    auto first = acquire();
    ASSERT_TRUE(wait_accepted(1));
    const auto port = local_port(first);
    read_what_the_upstream_sends(*first);
    pool_.release(std::move(first), settings_);
    // Closed now, but the event loop has not run since: it has seen nothing come.
    upstream_.close_all();

    // Idle for less than recheck_after, with no event since its last read emptied it: no
    // liveness syscall (which would have found the close); the caller's retry covers a
    // connection the upstream closed meanwhile.
    auto again = pool_.try_take(settings_, true);
    ASSERT_TRUE(again);
    EXPECT_TRUE(again->reused);
    EXPECT_EQ(local_port(again), port);
}

// Bytes the upstream sent unasked (or its close), once the event loop has seen them come, get
// the connection looked at, and dropped: they would be taken for the next request's response.
TEST_F(PoolTest, LooksAtARecentlyUsedConnectionOnWhichSomethingCame) {
    auto first = acquire();
    ASSERT_TRUE(wait_accepted(1));
    read_what_the_upstream_sends(*first);
    auto& idle = first->stream; // the pool keeps it until try_take below
    pool_.release(std::move(first), settings_);
    upstream_.send_all("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    ASSERT_TRUE(test::run_until(
        ioc_, [&idle] { return idle.event_since_emptied(); }, milliseconds(5'000)))
        << "the reactor never took the bytes' event";

    EXPECT_FALSE(pool_.try_take(settings_, true));
    EXPECT_EQ(pool_.idle_count(), 0u);
}

TEST_F(PoolTest, TryTakeIsEmptyWithoutAnIdleConnection) {
    EXPECT_FALSE(pool_.try_take(settings_, true));
    EXPECT_FALSE(pool_.try_take(settings_, false));
}

TEST_F(PoolTest, DropsAConnectionWithUnreadBytes) {
    auto first = acquire();
    first->buffer.commit(net::buffer_copy(first->buffer.prepare(3), net::buffer("abc", 3)));
    pool_.release(std::move(first), settings_);
    EXPECT_EQ(pool_.idle_count(), 0u);
}

TEST_F(PoolTest, ExpiresIdleConnections) {
    settings_.idle_timeout = milliseconds(0);
    pool_.release(acquire(), settings_);
    auto again = acquire();
    EXPECT_FALSE(again->reused);
}

TEST_F(PoolTest, KeepsAtMostMaxIdle) {
    settings_.max_idle = 2;
    std::vector<connection_ptr> held;
    for (int i = 0; i < 3; ++i) {
        held.push_back(acquire());
    }
    for (auto& c : held) {
        pool_.release(std::move(c), settings_);
    }
    EXPECT_EQ(pool_.idle_count(), 2u);

    settings_.max_idle = 0;
    pool_.release(acquire(), settings_);
    EXPECT_EQ(pool_.idle_count(), 1u); // one was taken, none returned
}

TEST_F(PoolTest, ClosesIdleConnectionsWhenTheUpstreamChanges) {
    pool_.release(acquire(), settings_);
    ASSERT_EQ(pool_.idle_count(), 1u);

    fake_upstream other(ioc_);
    settings_.port = other.port();
    auto conn = acquire();
    EXPECT_FALSE(conn->reused);
    EXPECT_EQ(conn->stream.socket().remote_endpoint().port(), other.port());
    EXPECT_EQ(pool_.idle_count(), 0u);
}

TEST_F(PoolTest, ReportsARefusedConnection) {
    upstream_.stop();
    auto [ec, conn] = test::run_coro(ioc_, pool_.acquire(settings_));
    EXPECT_EQ(ec, net::error::connection_refused);
    EXPECT_FALSE(conn);
}

TEST_F(PoolTest, ResolvesAHostName) {
    settings_.host = "localhost";
    auto [ec, conn] = test::run_coro(ioc_, pool_.connect(settings_));
    // localhost may resolve to ::1 first; the pool tries every address in turn.
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(conn->stream.socket().remote_endpoint().port(), upstream_.port());
}

// upstream.max-connections (issue 11, item 18): a third connect with two open and a cap of 2
// waits, and gets a place when one closes.
TEST_F(PoolTest, WaitsForAPlaceAtMaxConnections) {
    settings_.max_connections = 2;
    auto first = acquire();
    auto second = acquire();
    ASSERT_TRUE(wait_accepted(2));
    EXPECT_EQ(pool_.open_count(), 2u);

    connect_result third;
    start_connect(third);
    EXPECT_FALSE(test::run_until(
        ioc_, [&] { return third.has_value(); }, milliseconds(200)));
    EXPECT_EQ(pool_.waiting_count(), 1u);
    EXPECT_EQ(upstream_.accepted(), 2u);

    first.reset(); // closing one gives its place to the waiter
    ASSERT_TRUE(test::run_until(ioc_, [&] { return third.has_value(); }));
    ASSERT_FALSE(std::get<0>(*third)) << std::get<0>(*third).message();
    EXPECT_FALSE(std::get<1>(*third)->reused);
    ASSERT_TRUE(wait_accepted(3));
    EXPECT_EQ(pool_.open_count(), 2u);
    EXPECT_EQ(pool_.waiting_count(), 0u);
}

// A connection released while someone waits goes to the waiter instead of the idle list.
TEST_F(PoolTest, HandsAReleasedConnectionToAWaiter) {
    settings_.max_connections = 1;
    auto first = acquire();
    const auto port = local_port(first);

    connect_result second;
    start_connect(second);
    EXPECT_FALSE(test::run_until(
        ioc_, [&] { return second.has_value(); }, milliseconds(100)));

    pool_.release(std::move(first), settings_);
    ASSERT_TRUE(test::run_until(ioc_, [&] { return second.has_value(); }));
    const auto& conn = std::get<1>(*second);
    ASSERT_TRUE(conn);
    EXPECT_TRUE(conn->reused);
    EXPECT_EQ(local_port(conn), port);
    EXPECT_EQ(pool_.idle_count(), 0u);
    EXPECT_EQ(upstream_.accepted(), 1u);
}

// A released connection on which the upstream sent something after its response (a stray
// answer, a close) is not handed to a waiter: its bytes would be taken for the waiter's response,
// another client's. It closes, and its place goes to the waiter, which connects anew.
TEST_F(PoolTest, HandsAWaiterANewConnectionWhenTheReleasedOneHasStrayBytes) {
    settings_.max_connections = 1;
    auto first = acquire();
    const auto port = local_port(first);
    ASSERT_TRUE(wait_accepted(1));

    connect_result second;
    start_connect(second);
    EXPECT_FALSE(test::run_until(
        ioc_, [&] { return second.has_value(); }, milliseconds(100)));

    upstream_.send_all("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    const auto fd = first->stream.socket().native_handle();
    ASSERT_TRUE(test::run_until(ioc_, [fd] {
        char byte = 0;
        return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
    })) << "the stray bytes never came";
    pool_.release(std::move(first), settings_);
    ASSERT_TRUE(test::run_until(ioc_, [&] { return second.has_value(); }));
    const auto& [ec, conn] = *second;
    ASSERT_FALSE(ec) << ec.message();
    ASSERT_TRUE(conn);
    EXPECT_FALSE(conn->reused);
    EXPECT_NE(local_port(conn), port);
    EXPECT_TRUE(wait_accepted(2));
}

// During a reload that moved the upstream, a connection released to the old one is not handed to
// a request waiting to reach the new one: it closes, and its place goes to that waiter, which
// connects to its own upstream.
TEST_F(PoolTest, AWaiterForAnotherUpstreamGetsThePlaceNotTheConnection) {
    settings_.max_connections = 1;
    auto first = acquire();
    fake_upstream moved(ioc_);
    auto moved_settings = settings_;
    moved_settings.port = moved.port();

    connect_result second;
    start_connect(second, &moved_settings);
    EXPECT_FALSE(test::run_until(
        ioc_, [&] { return second.has_value(); }, milliseconds(100)));

    pool_.release(std::move(first), settings_);
    ASSERT_TRUE(test::run_until(ioc_, [&] { return second.has_value(); }));
    const auto& [ec, conn] = *second;
    ASSERT_FALSE(ec) << ec.message();
    ASSERT_TRUE(conn);
    EXPECT_FALSE(conn->reused);
    EXPECT_EQ(conn->stream.socket().remote_endpoint().port(), moved.port());
    EXPECT_TRUE(test::run_until(ioc_, [&] { return moved.accepted() == 1; }));
}

// A reload that lowers max-idle-connections brings the idle connections down to it at the next
// release, not one per release.
TEST_F(PoolTest, ALoweredMaxIdleClosesEveryIdleConnectionOverIt) {
    std::vector<connection_ptr> held;
    for (int i = 0; i < 4; ++i) {
        held.push_back(acquire());
    }
    for (std::size_t i = 0; i < 3; ++i) {
        pool_.release(std::move(held[i]), settings_);
    }
    EXPECT_EQ(pool_.idle_count(), 3u);
    settings_.max_idle = 1;
    pool_.release(std::move(held[3]), settings_);
    EXPECT_EQ(pool_.idle_count(), 1u);
}

// A waiter that gets no place within upstream.timeout gives up with upstream_exhausted.
TEST_F(PoolTest, GivesUpAfterTheTimeoutAtMaxConnections) {
    settings_.max_connections = 1;
    settings_.timeout = milliseconds(100);
    auto first = acquire();

    const auto start = std::chrono::steady_clock::now();
    auto [ec, conn] = test::run_coro(ioc_, pool_.connect(settings_));
    EXPECT_EQ(ec, errc::upstream_exhausted);
    EXPECT_FALSE(conn);
    EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(100));
    EXPECT_EQ(pool_.waiting_count(), 0u);
    EXPECT_EQ(pool_.open_count(), 1u);
}

// An idle connection counts against the cap, and makes room for a new one at once.
TEST_F(PoolTest, ClosesAnIdleConnectionToMakeRoom) {
    settings_.max_connections = 1;
    pool_.release(acquire(), settings_);
    ASSERT_EQ(pool_.idle_count(), 1u);
    EXPECT_EQ(pool_.open_count(), 1u);

    auto [ec, conn] = test::run_coro(ioc_, pool_.connect(settings_), milliseconds(2'000));
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_FALSE(conn->reused);
    EXPECT_EQ(pool_.idle_count(), 0u);
    EXPECT_EQ(pool_.open_count(), 1u);
}

// A reload that lowers max-connections below what is open: connections released close until
// the count is within the new cap, and then a waiter gets the next one, rather than the extra
// ones going idle (reused, the count never came down, and the waiter waited out its timeout).
TEST_F(PoolTest, ALoweredCapClosesReleasedConnectionsUntilWithinIt) {
    settings_.max_connections = 3;
    auto a = acquire();
    auto b = acquire();
    auto c = acquire();
    ASSERT_TRUE(wait_accepted(3));
    settings_.max_connections = 1; // reloaded

    connect_result waiting;
    start_connect(waiting);
    EXPECT_FALSE(test::run_until(
        ioc_, [&] { return waiting.has_value(); }, milliseconds(100)));
    ASSERT_EQ(pool_.waiting_count(), 1u);

    pool_.release(std::move(a), settings_);
    pool_.release(std::move(b), settings_);
    EXPECT_EQ(pool_.idle_count(), 0u) << "kept above the cap";
    EXPECT_EQ(pool_.open_count(), 1u);
    EXPECT_FALSE(waiting.has_value()) << "served above the cap";
    pool_.release(std::move(c), settings_);
    ASSERT_TRUE(test::run_until(ioc_, [&] { return waiting.has_value(); }));
    ASSERT_FALSE(std::get<0>(*waiting)) << std::get<0>(*waiting).message();
    EXPECT_TRUE(std::get<1>(*waiting)->reused) << "the released connection, handed over";
    EXPECT_EQ(pool_.open_count(), 1u);
    EXPECT_EQ(pool_.waiting_count(), 0u);
}

// A reload that raises max-connections gives the new room to those waiting first: a caller
// that comes after them does not take it ahead of them.
TEST_F(PoolTest, ARaisedCapServesTheWaitersFirst) {
    settings_.max_connections = 1;
    auto first = acquire();
    connect_result waiting;
    start_connect(waiting);
    EXPECT_FALSE(test::run_until(
        ioc_, [&] { return waiting.has_value(); }, milliseconds(100)));

    settings_.max_connections = 2; // reloaded
    connect_result later;
    start_connect(later);
    ASSERT_TRUE(test::run_until(ioc_, [&] { return waiting.has_value(); }));
    ASSERT_FALSE(std::get<0>(*waiting)) << std::get<0>(*waiting).message();
    EXPECT_FALSE(later.has_value()) << "came later, served first";
    EXPECT_EQ(pool_.waiting_count(), 1u);
    EXPECT_EQ(pool_.open_count(), 2u);
    first.reset(); // its place to the later one: no coroutine outlives the pool
    ASSERT_TRUE(test::run_until(ioc_, [&] { return later.has_value(); }));
    EXPECT_FALSE(std::get<0>(*later)) << std::get<0>(*later).message();
}

// A failed connect gives its place back.
TEST_F(PoolTest, AFailedConnectGivesItsPlaceBack) {
    settings_.max_connections = 1;
    upstream_.stop();
    auto [ec, conn] = test::run_coro(ioc_, pool_.connect(settings_));
    EXPECT_TRUE(ec);
    EXPECT_EQ(pool_.open_count(), 0u);
}

/// The pool with its lookups going to a `test::fake_dns`, for an upstream named by a host name.
class PoolLookupTest : public PoolTest {
protected:
    PoolLookupTest() {
        settings_.host = "upstream.test";
        settings_.max_connections = 1;
        settings_.timeout = milliseconds(100);
    }

    ~PoolLookupTest() override {
        // No lookup thread outlives the test by more than its last steps.
        named_.reset();
        dns_->release();
    }

    std::tuple<error_code, connection_ptr> connect() {
        return test::run_coro(ioc_, named_->connect(settings_), milliseconds(10'000));
    }

    /// Lets the lookup in flight, if any, answer, and waits until the pool has its answer.
    bool answer_lookups() {
        dns_->release();
        return test::run_until(ioc_, [&] { return !named_->addresses().lookup_in_flight(); });
    }

    /// Waits until the addresses found so far are older than `settings_.resolve_interval`.
    void wait_until_stale() {
        const auto since = coarse_clock::now();
        ASSERT_TRUE(test::run_until(
            ioc_, [&] { return coarse_clock::now() - since > settings_.resolve_interval; }));
    }

    std::shared_ptr<test::fake_dns> dns_ = std::make_shared<test::fake_dns>();
    std::atomic<std::uint64_t> lookup_failures_{0};
    std::unique_ptr<pool> named_ =
        std::make_unique<pool>(ioc_.get_executor(), test::lookups_of(dns_), &lookup_failures_);
};

// A DNS that does not answer: the connect fails within connect-timeout (before, it waited for
// Asio's resolver thread, tens of seconds), gives its place back, and the lookup goes on to
// fill the cache for the connects that come after it.
TEST_F(PoolLookupTest, ALookupThatNeverAnswersFailsTheConnectWithinConnectTimeout) {
    dns_->hold(settings_.host);
    settings_.connect_timeout = milliseconds(200);

    const auto start = std::chrono::steady_clock::now();
    auto [ec, conn] = connect();
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(ec, errc::upstream_unresolved) << ec.message();
    EXPECT_FALSE(conn);
    EXPECT_GE(took, settings_.connect_timeout);
    // The deadline is kept on the coarse clock, two ticks late at most; the rest is the time a
    // loaded, sanitized build takes to run the timer's handler (generous: the lookup it no
    // longer waits for is held until the test ends).
    EXPECT_LT(took,
              settings_.connect_timeout + 2 * coarse_clock::resolution() + milliseconds(1'000));
    EXPECT_EQ(named_->open_count(), 0u);

    // Its place came back: a second connect, at max-connections 1, is not refused for capacity,
    // and waits for the same lookup rather than starting another.
    auto [again, none] = connect();
    EXPECT_EQ(again, errc::upstream_unresolved) << again.message();
    EXPECT_EQ(named_->open_count(), 0u);
    EXPECT_EQ(named_->addresses().lookups_started(), 1u);
    EXPECT_EQ(lookup_failures_, 0u) << "a lookup that has not ended has not failed";

    // When DNS answers, the next connect goes out at once.
    ASSERT_TRUE(answer_lookups());
    auto [ok, live] = connect();
    ASSERT_FALSE(ok) << ok.message();
    EXPECT_EQ(live->stream.socket().remote_endpoint().port(), upstream_.port());
    EXPECT_EQ(named_->addresses().lookups_started(), 1u);
}

// Fresh addresses are used without a lookup; stale ones too, while exactly one lookup refreshes
// them in the background.
TEST_F(PoolLookupTest, ConnectsToCachedAddressesAndRefreshesThemInTheBackground) {
    settings_.max_connections = 8;
    auto [first_ec, first] = connect();
    ASSERT_FALSE(first_ec) << first_ec.message();
    auto [second_ec, second] = connect();
    ASSERT_FALSE(second_ec) << second_ec.message();
    EXPECT_EQ(named_->addresses().lookups_started(), 1u);
    EXPECT_FALSE(named_->addresses().lookup_in_flight());

    settings_.resolve_interval = milliseconds(20); // reloaded
    wait_until_stale();
    dns_->hold(settings_.host);
    for (int i = 0; i < 3; ++i) {
        auto [ec, conn] = connect();
        ASSERT_FALSE(ec) << ec.message();
        EXPECT_EQ(conn->stream.socket().remote_endpoint().port(), upstream_.port());
    }
    EXPECT_TRUE(named_->addresses().lookup_in_flight());
    EXPECT_EQ(named_->addresses().lookups_started(), 2u);
    ASSERT_TRUE(wait_accepted(5));

    settings_.resolve_interval = milliseconds(60'000);
    ASSERT_TRUE(answer_lookups());
    auto [later_ec, later] = connect();
    ASSERT_FALSE(later_ec) << later_ec.message();
    EXPECT_EQ(named_->addresses().lookups_started(), 2u);
}

// A refresh that fails keeps the addresses found before (and is tried again later).
TEST_F(PoolLookupTest, AFailedRefreshKeepsTheOldAddresses) {
    auto [first_ec, first] = connect();
    ASSERT_FALSE(first_ec) << first_ec.message();
    first.reset();

    dns_->fail_from_now(true);
    settings_.resolve_interval = milliseconds(20);
    wait_until_stale();
    auto [during_ec, during] = connect(); // starts the refresh
    ASSERT_FALSE(during_ec) << during_ec.message();
    during.reset();
    ASSERT_TRUE(answer_lookups());
    EXPECT_EQ(named_->addresses().last_error(settings_.host), net::error::host_not_found_try_again);
    EXPECT_EQ(named_->addresses().lookups_started(), 2u);
    EXPECT_EQ(lookup_failures_, 1u) << "the failed refresh is counted, the first lookup is not";

    auto [after_ec, after] = connect();
    ASSERT_FALSE(after_ec) << after_ec.message();
    EXPECT_EQ(after->stream.socket().remote_endpoint().port(), upstream_.port());
    ASSERT_TRUE(wait_accepted(3));
}

// With no address found before, a failed lookup fails the connect with its error (a 502).
TEST_F(PoolLookupTest, AFailedFirstLookupFailsTheConnectWithItsError) {
    dns_->fail_from_now(true);
    auto [ec, conn] = connect();
    EXPECT_EQ(ec, net::error::host_not_found_try_again) << ec.message();
    EXPECT_EQ(named_->open_count(), 0u);
    EXPECT_EQ(lookup_failures_, 1u);
}

// A reload that changes the host forgets the old host's addresses: a connect waits for the new
// host's lookup rather than going to the old upstream.
TEST_F(PoolLookupTest, AReloadThatChangesTheHostDoesNotUseTheOldAddresses) {
    auto [first_ec, first] = connect();
    ASSERT_FALSE(first_ec) << first_ec.message();
    first.reset();
    ASSERT_TRUE(wait_accepted(1));

    settings_.host = "moved.test"; // reloaded
    settings_.connect_timeout = milliseconds(100);
    dns_->hold(settings_.host);
    auto [ec, conn] = connect();
    EXPECT_EQ(ec, errc::upstream_unresolved) << ec.message();
    EXPECT_EQ(named_->addresses().lookups_started(), 2u);
    EXPECT_FALSE(test::run_until(
        ioc_, [&] { return upstream_.accepted() > 1; }, milliseconds(100)));
}

// After a reload that changed the host, a request of the old configuration (held by shaping,
// say) still finds its host's addresses, and takes nothing from the new host's wait: each host
// is kept apart (before, the cache held one host, and the two took it from each other).
TEST_F(PoolLookupTest, AfterAReloadEachConfigurationFindsItsOwnHostsAddresses) {
    const auto old_settings = settings_;
    auto [first_ec, first] = connect();
    ASSERT_FALSE(first_ec) << first_ec.message();
    first.reset();

    settings_.host = "moved.test"; // reloaded
    settings_.connect_timeout = milliseconds(100);
    dns_->hold(settings_.host);
    auto [moved_ec, moved] = connect();
    EXPECT_EQ(moved_ec, errc::upstream_unresolved) << moved_ec.message();

    auto [old_ec, old] = test::run_coro(ioc_, named_->connect(old_settings), milliseconds(10'000));
    EXPECT_FALSE(old_ec) << old_ec.message();
    old.reset();
    // The new host's lookup is the one started for it, still held: none started again.
    EXPECT_TRUE(named_->addresses().lookup_in_flight(settings_.host));
    EXPECT_EQ(named_->addresses().lookups_started(), 2u);
    ASSERT_TRUE(answer_lookups());
    auto [later_ec, later] = connect();
    EXPECT_FALSE(later_ec) << later_ec.message();
}

// A new host is looked up at once, even while the old host's refresh is stuck in DNS (before,
// one lookup at a time per pool made it wait for that one to return).
TEST_F(PoolLookupTest, ANewHostIsLookedUpWhileTheOldHostsLookupIsStuck) {
    auto [first_ec, first] = connect();
    ASSERT_FALSE(first_ec) << first_ec.message();
    first.reset();
    settings_.resolve_interval = milliseconds(20);
    wait_until_stale();
    dns_->hold(settings_.host);
    auto [stale_ec, stale] = connect(); // the old addresses, and a refresh that hangs
    ASSERT_FALSE(stale_ec) << stale_ec.message();
    stale.reset();
    ASSERT_TRUE(named_->addresses().lookup_in_flight(settings_.host));

    settings_.host = "moved.test"; // reloaded; its name answers
    auto [moved_ec, moved] = connect();
    EXPECT_FALSE(moved_ec) << moved_ec.message();
    EXPECT_EQ(named_->addresses().lookups_started(), 3u);
}

// The exit does not wait for a lookup stuck in DNS: destroying the pool abandons it, and its
// answer, when it comes, touches nothing of the pool (AddressSanitizer would tell).
TEST_F(PoolLookupTest, DestroyingThePoolDoesNotWaitForAStuckLookup) {
    dns_->hold(settings_.host);
    settings_.connect_timeout = milliseconds(50);
    auto [ec, conn] = connect();
    EXPECT_EQ(ec, errc::upstream_unresolved);
    ASSERT_TRUE(named_->addresses().lookup_in_flight());

    const auto start = std::chrono::steady_clock::now();
    named_.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1'000));

    dns_->release();
    ASSERT_TRUE(dns_->wait_returned(1));
    test::run_until(
        ioc_, [] { return false; }, milliseconds(50)); // a posted answer would run here
}

} // namespace
} // namespace sluice::upstream
