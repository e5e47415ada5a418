// SPDX-License-Identifier: Apache-2.0
// The client's connects to a Redis named by a DNS name, whose lookups a test::fake_dns answers
// (never the machine's resolver): before, each connect waited for Asio's resolver thread, which
// a DNS that does not answer holds for tens of seconds, uncancellable, and which the
// io_context's destruction joins.
#include "sluice/redis/client.hpp"
#include "support/fake_dns.hpp"
#include "support/redis_server.hpp"
#include "support/run_coro.hpp"
#include "support/temp_dir.hpp"

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// The time a loaded, sanitized build may take to run a timer's handler and the posted
/// `on_trouble` after it: generous, since what the bounds tell apart is an attempt that ends at
/// its connect timeout from one that waits for a lookup held until the test ends.
constexpr milliseconds handler_slack{1'000};

class RedisClientLookup : public ::testing::Test {
protected:
    ~RedisClientLookup() override {
        // The client's last handlers run (its wait for a lookup is cancelled), then the lookups
        // held answer into an abandoned cache.
        client_.reset();
        test::run_until(
            ioc_, [] { return false; }, 2s);
        dns_->release();
    }

    client_options options(std::uint16_t port) {
        client_options o;
        o.host = host_;
        o.port = port;
        o.command_timeout = 2s;
        o.connect_timeout = 200ms;
        o.reconnect_min = 20ms;
        o.reconnect_max = 40ms;
        o.lookup = test::lookups_of(dns_);
        o.on_trouble = [this] {
            troubles_.push_back(steady::now());
        };
        return o;
    }

    void start(client_options o) {
        client_ = std::make_unique<client>(executor{ioc_.get_executor()}, std::move(o));
        client_->start();
    }

    std::tuple<error_code, reply> ping() {
        return test::run_coro(ioc_, client_->async_command({"PING"}));
    }

    const std::string host_ = "redis.test"; // reserved (RFC 6761): never a real name
    net::io_context ioc_;
    std::shared_ptr<test::fake_dns> dns_ = std::make_shared<test::fake_dns>();
    /// When each `on_trouble` ran: a connect attempt failed.
    std::vector<steady::time_point> troubles_;
    std::unique_ptr<client> client_;
};

// A DNS that does not answer: a command fails at once (its caller applies its failure mode), and
// each connect attempt fails at its connect timeout, then backs off and waits for the same
// lookup again, rather than waiting for DNS or starting a lookup per attempt.
TEST_F(RedisClientLookup, ALookupThatNeverAnswersFailsEachConnectWithinConnectTimeout) {
    dns_->hold(host_);
    const auto o = options(test::free_port());
    const auto began = steady::now();
    start(o);

    auto [ec, r] = ping();
    EXPECT_EQ(ec, errc::redis_unavailable) << r.describe();
    EXPECT_LT(steady::now() - began, o.connect_timeout);

    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return troubles_.size() >= 2; }, 10s))
        << "no connect attempt ended";
    // The attempts' ends, from the start: the first at its connect timeout, the second a
    // backoff (half reconnect_min at least) and a connect timeout later.
    const auto first = troubles_[0] - began;
    EXPECT_GE(first, o.connect_timeout);
    EXPECT_LT(first, o.connect_timeout + handler_slack);
    const auto second = troubles_[1] - began;
    EXPECT_GE(second, 2 * o.connect_timeout + o.reconnect_min / 2);
    EXPECT_LT(second, 2 * o.connect_timeout + o.reconnect_max + 2 * handler_slack);
    EXPECT_EQ(dns_->lookups_asked(), 1);
    EXPECT_FALSE(client_->connected());
}

// Each failed lookup is counted where the options say (sluice_redis_lookup_failures_total), the
// retries a second apart too: the warnings are throttled, the count is not.
TEST_F(RedisClientLookup, EachFailedLookupIsCounted) {
    dns_->fail_from_now(true);
    std::atomic<std::uint64_t> failures{0};
    auto o = options(test::free_port());
    o.lookup_failures = &failures;
    start(o);
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return failures >= 2; }, 10s))
        << "failures counted: " << failures;
    // No failure counted twice (a lookup may have been asked and not yet have ended).
    EXPECT_LE(failures.load(), static_cast<std::uint64_t>(dns_->lookups_asked()));
    EXPECT_FALSE(client_->connected());
}

// Once the lookup answers (127.0.0.1), the next attempt connects and commands succeed.
TEST_F(RedisClientLookup, ConnectsOnceTheLookupAnswers) {
    if (!test::redis_server::available()) {
        GTEST_SKIP() << "redis-server is not on PATH";
    }
    test::redis_server server;
    dns_->hold(host_);
    start(options(server.port()));
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return !troubles_.empty(); }, 10s));
    EXPECT_FALSE(client_->connected());

    dns_->release();
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return client_->connected(); }, 10s));
    auto [ec, pong] = ping();
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(pong.str, "PONG");
    // One lookup, however many attempts it took (a loaded, sanitized build may need more than
    // one within the 200 ms connect timeout).
    EXPECT_EQ(dns_->lookups_asked(), 1);
}

// A reconnect goes to the addresses found before, stale ones too, at once, while a lookup
// refreshes them in the background (here stuck): a DNS outage does not take Redis away.
TEST_F(RedisClientLookup, AReconnectGoesToTheAddressesFoundBeforeWhileTheirRefreshIsStuck) {
    if (!test::redis_server::available()) {
        GTEST_SKIP() << "redis-server is not on PATH";
    }
    test::redis_server server;
    auto o = options(server.port());
    o.resolve_interval = 1ms;
    start(o);
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return client_->connected(); }, 10s));
    const auto connections = client_->connection_count();

    dns_->hold(host_);
    server.stop();
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return !client_->connected(); }, 10s));
    server.restart();
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return client_->connected(); }, 10s))
        << "waited for DNS";
    // A new connection (more than one if a loaded, sanitized build set one up slower than the
    // 200 ms connect timeout), to the address found before: the lookup is still held.
    EXPECT_GT(client_->connection_count(), connections);
    // The refresh (its thread may not have asked yet), one however many attempts.
    EXPECT_TRUE(test::run_until(
        ioc_, [&] { return dns_->lookups_asked() == 2; }, 5s));
    EXPECT_TRUE(dns_->lookup_held());
    auto [ec, pong] = ping();
    ASSERT_FALSE(ec) << ec.message();
}

// The exit does not wait for a lookup stuck in DNS: destroying the client leaves its worker
// nothing to run (no wait for the lookup), and destroying the worker's io_context joins no
// thread. The lookup's late answer touches nothing (AddressSanitizer would tell).
TEST_F(RedisClientLookup, DestroyingTheClientAndItsWorkerDoesNotWaitForAStuckLookup) {
    dns_->hold(host_);
    auto o = options(test::free_port());
    o.connect_timeout = 30s; // a wait left running would hold the worker this long
    std::optional<net::io_context> worker(std::in_place);
    auto c = std::make_unique<client>(executor{worker->get_executor()}, o);
    c->start();
    ASSERT_TRUE(test::run_until(
        *worker, [&] { return dns_->lookups_asked() == 1; }, 5s));

    const auto began = steady::now();
    c.reset();
    test::run_until(
        *worker, [] { return false; }, 5s);
    EXPECT_TRUE(worker->stopped()) << "work left after the client is gone";
    worker.reset();
    EXPECT_LT(steady::now() - began, 5s);

    dns_->release();
    ASSERT_TRUE(dns_->wait_returned(1));
}

} // namespace
} // namespace sluice::redis
