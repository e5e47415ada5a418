// SPDX-License-Identifier: Apache-2.0
#include "redis/asio_adapter_detail.hpp"
#include "sluice/redis/backoff.hpp"
#include "sluice/redis/client.hpp"
#include "sluice/redis/command_writer.hpp"
#include "support/captured_log.hpp"
#include "support/redis_server.hpp"
#include "support/resp_client.hpp"
#include "support/run_coro.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <thread>
#include <tuple>
#include <unistd.h>

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using result = std::tuple<error_code, reply>;

// PINGs until the outcome is the wanted one (success, or `redis_unavailable`), or the deadline.
awaitable<bool> ping_until(client* c, bool want_success, steady::time_point deadline) {
    auto ex = co_await net::this_coro::executor;
    steady_timer pause(ex);
    const std::vector<std::string> ping{"PING"};
    while (steady::now() < deadline) {
        auto [ec, r] = co_await c->async_command(ping);
        if (want_success ? !ec : ec == errc::redis_unavailable) {
            co_return true;
        }
        pause.expires_after(10ms);
        co_await pause.async_wait();
    }
    co_return false;
}

class RedisClient : public ::testing::Test {
protected:
    void SetUp() override {
        if (!test::redis_server::available()) {
            GTEST_SKIP() << "redis-server is not on PATH";
        }
    }

    void start_server(test::redis_server::options o = {}) { server_.emplace(std::move(o)); }

    client_options options() const { return options_for(server_->port()); }

    static client_options options_for(std::uint16_t port) {
        client_options o;
        o.host = "127.0.0.1";
        o.port = port;
        o.command_timeout = 2s;
        o.reconnect_min = 20ms;
        o.reconnect_max = 200ms;
        return o;
    }

    /// A client subscribed to "slots" (its messages dropped), reconnecting within 10 to 20 ms.
    std::unique_ptr<client> make_subscriber(client_options o) {
        o.reconnect_min = 10ms;
        o.reconnect_max = 20ms;
        auto c = std::make_unique<client>(executor{ioc_.get_executor()}, std::move(o));
        c->subscribe("slots", [](const std::string&) {});
        c->start();
        return c;
    }

    std::unique_ptr<client> make_client(client_options o) {
        auto c = std::make_unique<client>(executor{ioc_.get_executor()}, std::move(o));
        c->start();
        return c;
    }

    /// Stops `c` and runs the io_context until it runs out of work (at most 10 s, and then the
    /// test fails): how long that took.
    steady::duration stop_and_run_out(client& c) {
        c.stop();
        const auto start = steady::now();
        ioc_.restart();
        ioc_.run_for(10s);
        EXPECT_TRUE(ioc_.stopped());
        return steady::now() - start;
    }

    result run(client& c, std::vector<std::string> args) {
        return test::run_coro(ioc_, c.async_command(std::move(args)));
    }

    net::io_context ioc_;
    std::optional<test::redis_server> server_;
};

TEST_F(RedisClient, PingSetGetAndErrorReplies) {
    start_server();
    auto c = make_client(options());

    auto [ec, pong] = run(*c, {"PING"});
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(pong.type, reply::kind::status);
    EXPECT_EQ(pong.str, "PONG");

    const std::string binary("v\0w\r\n", 5);
    auto [set_ec, ok] = run(*c, {"SET", "k", binary});
    ASSERT_FALSE(set_ec);
    EXPECT_EQ(ok.str, "OK");
    auto [get_ec, value] = run(*c, {"GET", "k"});
    ASSERT_FALSE(get_ec);
    EXPECT_EQ(value.type, reply::kind::string);
    EXPECT_EQ(value.str, binary);

    auto [missing_ec, missing] = run(*c, {"GET", "no-such-key"});
    ASSERT_FALSE(missing_ec);
    EXPECT_TRUE(missing.is_nil());

    auto [push_ec, pushed] = run(*c, {"RPUSH", "list", "a", "b"});
    ASSERT_FALSE(push_ec);
    EXPECT_EQ(pushed.type, reply::kind::integer);
    EXPECT_EQ(pushed.integer, 2);
    auto [range_ec, range] = run(*c, {"LRANGE", "list", "0", "-1"});
    ASSERT_FALSE(range_ec);
    ASSERT_EQ(range.type, reply::kind::array);
    ASSERT_EQ(range.elements.size(), 2u);
    EXPECT_EQ(range.elements[1].str, "b");

    // An error reply completes with bad_reply and keeps the text.
    auto [incr_ec, error] = run(*c, {"INCR", "k"});
    EXPECT_EQ(incr_ec, errc::bad_reply);
    EXPECT_TRUE(error.is_error());
    EXPECT_TRUE(error.str.starts_with("ERR")) << error.str;

    EXPECT_TRUE(c->connected());
    EXPECT_EQ(c->connection_count(), 1u);
}

// Replies many times larger than one read of the socket (the adapter reads 16 KiB at a time and
// feeds hiredis's reader), pipelined so that one read ends inside a reply and the next read starts
// the following one: each arrives whole and in order, on TCP and on a Unix socket.
void expect_large_replies_whole(net::io_context& ioc, client& c) {
    std::string big(1 << 20, '\0');
    for (std::size_t i = 0; i < big.size(); ++i) {
        big[i] = static_cast<char>('a' + (i * 7919) % 26);
    }
    auto [set_ec, ok] = test::run_coro(ioc, c.async_command({"SET", "big", big}));
    ASSERT_FALSE(set_ec) << set_ec.message();
    EXPECT_EQ(ok.str, "OK");
    std::vector<std::string> seen;
    int failures = 0;
    for (int i = 0; i < 8; ++i) {
        c.async_command({"GETRANGE", "big", std::to_string(i), "-1"}, [&](error_code ec, reply r) {
            failures += ec ? 1 : 0;
            seen.push_back(std::move(r.str));
        });
    }
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return seen.size() == 8; }, 20s));
    EXPECT_EQ(failures, 0);
    for (std::size_t i = 0; i < seen.size(); ++i) {
        ASSERT_EQ(seen[i].size(), big.size() - i) << "reply " << i;
        EXPECT_TRUE(seen[i] == std::string_view(big).substr(i)) << "reply " << i;
    }
}

TEST_F(RedisClient, RepliesLargerThanOneReadArriveWholeOverTcp) {
    start_server();
    auto c = make_client(options());
    expect_large_replies_whole(ioc_, *c);
}

TEST_F(RedisClient, RepliesLargerThanOneReadArriveWholeOverAUnixSocket) {
    start_server({.requirepass = {}, .unix_socket = true});
    auto o = options();
    o.host = server_->unix_socket();
    auto c = make_client(o);
    expect_large_replies_whole(ioc_, *c);
}

TEST(CommandWriter, WritesRespBulkStrings) {
    std::string out;
    command_writer w(out, 4);
    w.arg("SET");
    w.arg(std::string_view("k\0\r\n", 4));
    w.arg(std::int64_t{-42});
    w.begin_arg(5);
    w.append("ab");
    w.append("cde");
    w.end_arg();
    EXPECT_EQ(out,
              std::string("*4\r\n$3\r\nSET\r\n$4\r\nk\0\r\n\r\n$3\r\n-42\r\n$5\r\nabcde\r\n", 43));
}

TEST_F(RedisClient, FormattedCommandsAreSentAsIs) {
    start_server();
    auto c = make_client(options());

    const std::string binary("v\0w\r\n", 5);
    std::string set;
    command_writer w(set, 3);
    w.arg("SET");
    w.arg("formatted");
    w.arg(binary);
    auto [set_ec, ok] = test::run_coro(ioc_, c->async_formatted(set));
    ASSERT_FALSE(set_ec) << ok.describe();
    EXPECT_EQ(ok.str, "OK");

    auto [get_ec, value] = run(*c, {"GET", "formatted"});
    ASSERT_FALSE(get_ec);
    EXPECT_EQ(value.str, binary);

    // Whatever is formatted reaches Redis unchanged: a wrong command is Redis's error.
    std::string wrong;
    command_writer(wrong, 1).arg("NO-SUCH-COMMAND");
    auto [wrong_ec, error] = test::run_coro(ioc_, c->async_formatted(wrong));
    EXPECT_EQ(wrong_ec, errc::bad_reply);
    EXPECT_TRUE(error.str.starts_with("ERR")) << error.str;
}

TEST_F(RedisClient, PipelinedCommandsCompleteInOrder) {
    start_server();
    auto c = make_client(options());
    ASSERT_FALSE(std::get<0>(run(*c, {"PING"})));

    // All 1000 are written before any reply is read: one connection, pipelined.
    std::vector<std::int64_t> seen;
    int failures = 0;
    for (int i = 0; i < 1000; ++i) {
        c->async_command({"INCR", "counter"}, [&](error_code ec, reply r) {
            failures += ec ? 1 : 0;
            seen.push_back(r.integer);
        });
    }
    EXPECT_TRUE(seen.empty()); // completions are never inline
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return seen.size() == 1000; }, 20s));
    EXPECT_EQ(failures, 0);
    for (std::size_t i = 0; i < seen.size(); ++i) {
        ASSERT_EQ(seen[i], static_cast<std::int64_t>(i + 1)) << "at " << i;
    }
}

TEST_F(RedisClient, CommandTimesOutOnPausedServerAndLateRepliesAreDropped) {
    start_server();
    auto o = options();
    o.command_timeout = 100ms;
    auto c = make_client(o);
    ASSERT_FALSE(std::get<0>(run(*c, {"SET", "k", "before"})));

    server_->pause();
    // Two more in flight behind the awaited one, so that several late replies arrive at once.
    int late_timeouts = 0;
    for (int i = 0; i < 2; ++i) {
        c->async_command({"GET", "k"}, [&](error_code ec, reply) {
            late_timeouts += ec == errc::redis_timeout ? 1 : 0;
        });
    }
    const auto start = steady::now();
    auto [ec, r] = run(*c, {"GET", "k"});
    const auto elapsed = steady::now() - start;
    EXPECT_EQ(ec, errc::redis_timeout) << ec.message();
    EXPECT_GE(elapsed, o.command_timeout);
    // The deadline timer fires at the deadline; the tolerance covers a loaded two-core machine.
    EXPECT_LT(elapsed, o.command_timeout + 400ms);
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return late_timeouts == 2; }, 2s));

    // The three late GET replies arrive now and are dropped: the next command gets its own.
    server_->resume();
    auto [echo_ec, echo] = run(*c, {"ECHO", "after"});
    ASSERT_FALSE(echo_ec) << echo_ec.message();
    EXPECT_EQ(echo.str, "after");
    auto [get_ec, value] = run(*c, {"GET", "k"});
    ASSERT_FALSE(get_ec);
    EXPECT_EQ(value.str, "before");
    EXPECT_EQ(c->connection_count(), 1u);
}

TEST_F(RedisClient, ReconnectsAfterServerRestart) {
    start_server();
    auto c = make_client(options());
    ASSERT_FALSE(std::get<0>(run(*c, {"SET", "k", "v"})));

    server_->stop();
    auto lost = ping_until(c.get(), false, steady::now() + 5s);
    ASSERT_TRUE(test::run_coro(ioc_, std::move(lost))) << "commands kept succeeding";
    EXPECT_FALSE(c->connected());

    server_->restart();
    auto back = ping_until(c.get(), true, steady::now() + 10s);
    ASSERT_TRUE(test::run_coro(ioc_, std::move(back))) << "no reconnection";
    EXPECT_TRUE(c->connected());
    EXPECT_EQ(c->connection_count(), 2u);
    // A new server without persistence: the old key is gone, and commands work again.
    auto [ec, value] = run(*c, {"GET", "k"});
    ASSERT_FALSE(ec);
    EXPECT_TRUE(value.is_nil());
}

TEST_F(RedisClient, ReplacesAStalledConnection) {
    start_server();
    auto o = options();
    o.command_timeout = 50ms;
    o.stall_timeout = 100ms;
    auto c = make_client(o);
    ASSERT_FALSE(std::get<0>(run(*c, {"PING"})));

    // A hung server: the kernel still accepts connections, but nothing answers.
    server_->pause();
    auto [ec, r] = run(*c, {"PING"});
    EXPECT_EQ(ec, errc::redis_timeout);
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return c->connection_count() >= 2; }, 5s))
        << "the stalled connection was kept";

    server_->resume();
    auto back = ping_until(c.get(), true, steady::now() + 5s);
    EXPECT_TRUE(test::run_coro(ioc_, std::move(back)));
}

TEST_F(RedisClient, AuthenticatesWithPasswordAndUsername) {
    start_server({.requirepass = "s3cret", .unix_socket = false});
    auto o = options();
    o.password = "s3cret";
    auto with_password = make_client(o);
    auto [ec, pong] = run(*with_password, {"PING"});
    ASSERT_FALSE(ec) << pong.describe();
    EXPECT_EQ(pong.str, "PONG");

    o.username = "default";
    auto with_user = make_client(o);
    auto [user_ec, user_pong] = run(*with_user, {"PING"});
    ASSERT_FALSE(user_ec) << user_pong.describe();

    auto anonymous = make_client(options());
    auto [anon_ec, refused] = run(*anonymous, {"PING"});
    EXPECT_EQ(anon_ec, errc::bad_reply);
    EXPECT_TRUE(refused.str.starts_with("NOAUTH")) << refused.str;

    // A refused AUTH is a failed connection (issue 12): the commands held behind it fail as
    // unavailable, none of them is sent, and the client is not connected.
    o.username.clear();
    o.password = "wrong";
    auto wrong = make_client(o);
    auto [wrong_ec, wrong_reply] = run(*wrong, {"PING"});
    EXPECT_EQ(wrong_ec, errc::redis_unavailable) << wrong_reply.describe();
    EXPECT_FALSE(wrong->connected());
    EXPECT_EQ(wrong->connection_count(), 0u);
}

// Issue 12: a connection counts as made only once its set-up commands succeeded; a refused one
// (here a connect command Redis rejects) is dropped and retried on the backoff's schedule, and
// the commands sent meanwhile fail as unavailable instead of following the refused set-up.
TEST_F(RedisClient, ARefusedSetUpIsRetriedOnTheBackoffSchedule) {
    start_server();
    auto o = options();
    o.reconnect_min = 40ms;
    o.reconnect_max = 160ms;
    auto c = std::make_unique<client>(executor{ioc_.get_executor()}, o);
    c->add_connect_command({"NO-SUCH-COMMAND"});
    c->start();
    auto [ec, r] = run(*c, {"PING"});
    EXPECT_EQ(ec, errc::redis_unavailable) << r.describe();
    EXPECT_FALSE(c->connected());

    test::resp_client cli(server_->port());
    const auto connections = [&] {
        return test::info_count(cli.command({"INFO", "stats"}).text, "total_connections_received:");
    };
    // Any 800 ms hold at most as many attempts as the backoff's shortest waits allow.
    const auto window = 800ms;
    const auto before = connections();
    const auto window_end = steady::now() + window;
    while (!test::run_until(
        ioc_, [&] { return steady::now() >= window_end; }, 2s)) {
    }
    const auto made = connections() - before;
    const auto most = most_attempts_within(window, o.reconnect_min, o.reconnect_max);
    EXPECT_EQ(most, 12); // 20 + 40 + 80 ms, then 80 ms each: 11 waits fit in 800 ms
    EXPECT_GE(made, 1) << "no retry";
    EXPECT_LE(made, most) << "set-up failures retried faster than the backoff allows";
    EXPECT_EQ(c->connection_count(), 0u);
}

// A connect command registered `carry_on` (FUNCTION LOAD, which Redis before 7 refuses) may be
// refused: the set-up goes on, the commands after it in the set-up still run, and the client
// is connected on its first attempt.
TEST_F(RedisClient, AConnectCommandThatMayBeRefusedLeavesTheSetUpGoingOn) {
    start_server();
    auto c = std::make_unique<client>(executor{ioc_.get_executor()}, options());
    c->add_connect_command({"NO-SUCH-COMMAND"}, if_refused::carry_on);
    c->add_connect_command({"SET", "after-refused", "1"});
    c->start();
    auto [ec, r] = run(*c, {"GET", "after-refused"});
    ASSERT_FALSE(ec) << ec.message() << ": " << r.describe();
    EXPECT_EQ(r.str, "1");
    EXPECT_TRUE(c->connected());
    EXPECT_EQ(c->connection_count(), 1u);

    // Registered on a connection already up: refused again, and still nothing fails.
    c->add_connect_command({"ALSO-NO-SUCH-COMMAND"}, if_refused::carry_on);
    auto [ping_ec, pong] = run(*c, {"PING"});
    ASSERT_FALSE(ping_ec) << pong.describe();
    EXPECT_EQ(c->connection_count(), 1u);
}

// A command held while the connection is set up that times out before the set-up ends is never
// sent: its caller has applied its failure mode, and a late INCR (a limit's charge) would count
// the request again.
TEST_F(RedisClient, ACommandThatTimedOutWhileHeldIsNeverSent) {
    start_server();
    auto o = options();
    o.command_timeout = 100ms;
    auto c = std::make_unique<client>(executor{ioc_.get_executor()}, o);
    // A set-up that takes half a second: the list never fills, BLPOP answers nil when it ends.
    c->add_connect_command({"BLPOP", "nothing-comes", "0.5"});
    c->start();
    auto [ec, r] = run(*c, {"INCR", "charged"});
    EXPECT_EQ(ec, errc::redis_timeout) << r.describe();
    ASSERT_TRUE(test::run_coro(ioc_, ping_until(c.get(), true, steady::now() + 5s)));
    auto [get_ec, value] = run(*c, {"GET", "charged"});
    ASSERT_FALSE(get_ec) << get_ec.message();
    EXPECT_TRUE(value.is_nil()) << "the timed-out INCR reached Redis: " << value.describe();
}

// A command's own deadline, later than command_timeout, is its own: it is answered after the
// timeout has passed, while a command sent after it, with the usual deadline, still times out
// at that deadline (deadlines were taken to grow along the queue).
TEST_F(RedisClient, ACommandWithALaterDeadlineOfItsOwnOutlastsTheTimeout) {
    start_server();
    auto o = options();
    o.command_timeout = 100ms;
    // The connection counts as stalled stall_timeout after the BLPOP's ordinary deadline
    // (100 ms): longer than the BLPOP's 2 s, so that it is answered on the connection it went on.
    o.stall_timeout = 10s;
    auto c = make_client(o);
    ASSERT_FALSE(std::get<0>(run(*c, {"PING"})));

    // BLPOP on a list that never fills answers nil at its own timeout, 2 s, before its deadline.
    std::optional<result> slow;
    c->async_command_until(steady::now() + 5s,
                           {"BLPOP", "nothing-comes", "2"},
                           [&](error_code ec, reply r) { slow.emplace(ec, std::move(r)); });
    const auto start = steady::now();
    std::optional<error_code> usual;
    c->async_command({"PING"}, [&](error_code ec, reply) { usual = ec; });
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return usual.has_value(); }, 8s));
    EXPECT_EQ(*usual, errc::redis_timeout);
    // Due at 100 ms. The defect (deadlines taken to grow along the queue) ends the PING at the
    // BLPOP's deadline, 5 s, or with its answer at 2 s (not a timeout, then): 1.5 s lies 1.4 s
    // past the PING's deadline, room for a timer late on a loaded sanitized run, and 0.5 s
    // short of the defect's earliest.
    EXPECT_LT(steady::now() - start, 1500ms) << "the PING waited for the BLPOP";
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return slow.has_value(); }, 8s));
    EXPECT_FALSE(std::get<0>(*slow)) << std::get<0>(*slow).message();
    EXPECT_TRUE(std::get<1>(*slow).is_nil()) << std::get<1>(*slow).describe();
    EXPECT_EQ(c->connection_count(), 1u) << "taken for stalled";
}

// A command with an earlier deadline of its own, held through a slow set-up, times out at that
// deadline (not the client's later one) and is never sent: a redirected cluster call ends with
// the call, and Redis must not be charged for a request decided already.
TEST_F(RedisClient, AHeldCommandEndsAtAnEarlierDeadlineOfItsOwnAndIsNeverSent) {
    start_server();
    auto o = options();     // command_timeout 2 s
    o.connect_timeout = 5s; // longer than the set-up's 2 s
    auto c = std::make_unique<client>(executor{ioc_.get_executor()}, o);
    // A set-up that takes 2 s: the list never fills, BLPOP answers nil when it ends.
    c->add_connect_command({"BLPOP", "nothing-comes", "2"});
    c->start();
    const auto start = steady::now();
    auto [ec, r] =
        test::run_coro(ioc_, c->async_command_until(steady::now() + 100ms, {"INCR", "charged"}));
    EXPECT_EQ(ec, errc::redis_timeout) << r.describe();
    // Due at 100 ms. The defect (the client's deadline, or the end of the set-up) ends it at
    // 2 s at the earliest: 1.5 s leaves 1.4 s for a late timer and is 0.5 s short of that.
    EXPECT_LT(steady::now() - start, 1500ms) << "the INCR waited for the set-up";
    ASSERT_TRUE(test::run_coro(ioc_, ping_until(c.get(), true, steady::now() + 8s)));
    auto [get_ec, value] = run(*c, {"GET", "charged"});
    ASSERT_FALSE(get_ec) << get_ec.message();
    EXPECT_TRUE(value.is_nil()) << "the timed-out INCR reached Redis: " << value.describe();
}

/// A server on 127.0.0.1 that hands each connection it accepts to `serve` (on its own thread,
/// one connection at a time), then closes it. Counts the connections it accepted.
class scripted_server {
public:
    explicit scripted_server(std::function<void(int)> serve)
        : serve_(std::move(serve))
        , fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t length = sizeof address;
        // The sockaddr casts are how the BSD socket API is spelled.
        if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
            ::listen(fd_, 64) != 0 ||
            ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
            throw std::runtime_error("scripted_server: cannot listen");
        }
        port_ = ntohs(address.sin_port);
        thread_ = std::thread([this] { run(); });
    }

    ~scripted_server() {
        stop_ = true;
        thread_.join();
        ::close(fd_);
    }

    std::uint16_t port() const { return port_; }

    long long accepted() const { return accepted_; }

    bool stopping() const { return stop_; }

private:
    void run() {
        while (!stop_) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 10) != 1) {
                continue; // wakes every 10 ms to see whether to stop
            }
            const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (client < 0) {
                continue;
            }
            ++accepted_;
            serve_(client);
            ::close(client);
        }
    }

    std::function<void(int)> serve_;
    int fd_;
    std::uint16_t port_ = 0;
    std::atomic<bool> stop_{false};
    std::atomic<long long> accepted_{0};
    std::thread thread_;
};

/// A server that answers every connection as a Redis in protected mode does: an error, then
/// close.
scripted_server refusing_server() {
    return scripted_server([](int client) {
        static constexpr char denied[] = "-DENIED Redis is running in protected mode\r\n";
        (void)::send(client, denied, sizeof denied - 1, MSG_NOSIGNAL);
    });
}

// A server whose refusals differ in their text every time gets one line per step and kind of
// error per 10 s, not one per text: the throttle was keyed by the whole line, so each refusal
// was written (and pushed other lines' counts out of the throttle).
TEST_F(RedisClient, SetUpRefusalsAreLoggedByKindNotByText) {
    std::atomic<int> refusals{0};
    scripted_server refusing([&](int client) {
        char command[256];
        if (::recv(client, command, sizeof command, 0) <= 0) {
            return;
        }
        const auto error = "-WRONGPASS invalid password, attempt " +
                           std::to_string(refusals.fetch_add(1) + 1) + "\r\n";
        (void)::send(client, error.data(), error.size(), MSG_NOSIGNAL);
    });
    test::captured_log log;
    auto o = options_for(refusing.port());
    o.password = "wrong";
    o.reconnect_min = 10ms;
    o.reconnect_max = 20ms;
    auto c = make_client(o);
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return refusals >= 4; }, 10s));
    c->stop();
    const auto lines = log.lines_with("authentication failed");
    ASSERT_EQ(lines.size(), 1u) << log.text();
    EXPECT_NE(lines[0].find("WRONGPASS invalid password, attempt 1"), std::string::npos)
        << lines[0];
}

// A reply that never ends (a bulk string announced at a gigabyte, then bytes for as long as the
// client takes them) drops the connection once it passes max_reply_bytes, rather than growing
// the reader until the process dies; the command fails as on any lost connection.
TEST_F(RedisClient, AReplyThatNeverEndsDropsTheConnectionAtItsLimit) {
    // Whatever the client does, the server gives up at this, far above the limit.
    constexpr std::size_t ceiling = 256u * 1024 * 1024;
    std::atomic<std::size_t> sent{0};
    std::atomic<bool> peer_gone{false};
    scripted_server flooding([&](int client) {
        char command[256];
        if (::recv(client, command, sizeof command, 0) <= 0) {
            return;
        }
        static constexpr char head[] = "$1000000000\r\n";
        (void)::send(client, head, sizeof head - 1, MSG_NOSIGNAL);
        const std::string block(64 * 1024, 'x');
        while (sent < ceiling) {
            const auto n = ::send(client, block.data(), block.size(), MSG_NOSIGNAL);
            if (n <= 0) {
                peer_gone = true;
                return;
            }
            sent += static_cast<std::size_t>(n);
        }
    });
    auto o = options_for(flooding.port());
    o.command_timeout = 5s; // neither the timeout nor the stall check ends it first
    o.stall_timeout = 5s;
    auto c = make_client(o);
    auto [ec, r] = run(*c, {"PING"});
    EXPECT_EQ(ec, errc::redis_unavailable) << ec.message() << ": " << r.describe();
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return peer_gone.load(); }, 5s))
        << "the connection was not dropped; " << sent << " bytes sent";
    // The limit, plus what the two sockets' buffers held when the client stopped reading.
    EXPECT_LT(sent.load(), detail::max_reply_bytes + 16u * 1024 * 1024);
}

// Issue 12: a server that closes every connection right after accepting it (protected mode,
// nothing to set up) is retried on the backoff's schedule, not at its shortest wait forever: a
// connection lost at once does not reset the backoff.
TEST_F(RedisClient, AConnectionClosedAtOnceIsRetriedOnTheBackoffSchedule) {
    auto refusing = refusing_server();
    auto o = options_for(refusing.port());
    o.reconnect_min = 40ms;
    o.reconnect_max = 160ms;
    auto c = make_client(o);
    auto [ec, r] = run(*c, {"PING"});
    EXPECT_TRUE(ec) << r.describe();

    const auto window = 800ms;
    const auto before = refusing.accepted();
    const auto window_end = steady::now() + window;
    while (!test::run_until(
        ioc_, [&] { return steady::now() >= window_end; }, 2s)) {
    }
    const auto made = refusing.accepted() - before;
    const auto most = most_attempts_within(window, o.reconnect_min, o.reconnect_max);
    EXPECT_GE(made, 1) << "no retry";
    EXPECT_LE(made, most) << "retried faster than the backoff allows";
}

TEST_F(RedisClient, SelectsTheConfiguredDatabase) {
    start_server();
    auto o = options();
    o.db = 3;
    auto in_db3 = make_client(o);
    auto in_db0 = make_client(options());
    ASSERT_FALSE(std::get<0>(run(*in_db3, {"SET", "where", "db3"})));
    auto [ec0, from0] = run(*in_db0, {"GET", "where"});
    ASSERT_FALSE(ec0);
    EXPECT_TRUE(from0.is_nil());
    auto [ec3, from3] = run(*in_db3, {"GET", "where"});
    ASSERT_FALSE(ec3);
    EXPECT_EQ(from3.str, "db3");
}

TEST_F(RedisClient, ConnectsOverUnixSocket) {
    start_server({.requirepass = {}, .unix_socket = true});
    auto o = options();
    o.host = server_->unix_socket();
    auto c = make_client(o);
    auto [ec, pong] = run(*c, {"PING"});
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(pong.str, "PONG");
}

TEST_F(RedisClient, FailsFastWhenNothingListens) {
    client_options o;
    o.port = test::free_port();
    o.command_timeout = 5s;
    o.reconnect_min = 20ms;
    o.reconnect_max = 50ms;
    auto c = make_client(o);
    const auto start = steady::now();
    auto [ec, r] = run(*c, {"PING"});
    // Refused at once on loopback: unavailable, long before the command timeout.
    EXPECT_EQ(ec, errc::redis_unavailable);
    EXPECT_LT(steady::now() - start, 1s);
    EXPECT_FALSE(c->connected());
    EXPECT_EQ(c->connection_count(), 0u);
}

TEST_F(RedisClient, PendingCommandsCompleteWhenTheClientIsDestroyed) {
    start_server();
    auto c = make_client(options());
    ASSERT_FALSE(std::get<0>(run(*c, {"PING"})));
    server_->pause();
    std::optional<error_code> outcome;
    c->async_command({"PING"}, [&](error_code ec, reply) { outcome = ec; });
    c.reset();
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return outcome.has_value(); }, 2s));
    EXPECT_EQ(*outcome, errc::redis_unavailable);
    server_->resume();
}

TEST_F(RedisClient, StopDrainsRepliesInFlightAndRefusesNewCommands) {
    start_server();
    auto c = make_client(options());
    ASSERT_FALSE(std::get<0>(run(*c, {"PING"})));
    std::optional<result> in_flight;
    c->async_command({"ECHO", "last"}, [&](error_code ec, reply r) { in_flight.emplace(ec, r); });
    c->stop();
    auto [ec, r] = run(*c, {"PING"});
    EXPECT_EQ(ec, errc::redis_unavailable);
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return in_flight.has_value(); }, 2s));
    EXPECT_FALSE(std::get<0>(*in_flight));
    EXPECT_EQ(std::get<1>(*in_flight).str, "last");
}

// A stop() that drains a connection to a hung server (SIGSTOPped) with a command outstanding:
// the drain ends once that command is as late as a stalled connection's, and then nothing of the
// client is left on the io_context, so that run() returns (the process exits). It waited for
// the reply forever, its deadline timer firing in a loop.
TEST_F(RedisClient, StopOnAHungServerEndsOnceItsCommandsAreStalled) {
    start_server();
    auto o = options();
    o.command_timeout = 100ms;
    o.stall_timeout = 200ms;
    auto c = make_client(o);
    ASSERT_FALSE(std::get<0>(run(*c, {"PING"})));

    server_->pause();
    std::optional<error_code> outcome;
    c->async_command({"PING"}, [&](error_code ec, reply) { outcome = ec; });
    c->stop();
    // The command's deadline plus the stall allowance, and room for a loaded machine.
    const auto bound = o.command_timeout + o.stall_timeout + 2s;
    const auto start = steady::now();
    ioc_.restart();
    const auto handlers = ioc_.run_for(bound);
    const auto elapsed = steady::now() - start;
    server_->resume();
    EXPECT_TRUE(ioc_.stopped()) << "the io_context still had work after " << handlers
                                << " handlers";
    EXPECT_LT(elapsed, bound);
    ASSERT_TRUE(outcome.has_value());
    EXPECT_EQ(*outcome, errc::redis_timeout);
}

// A command answered before a deadline of its own leaves nothing to wake for: after a stop, the
// io_context runs out of work at once, where the timer waited for that deadline (a cluster
// node's answered map read held a worker's exit up to connect-timeout).
TEST_F(RedisClient, AnAnsweredCommandsOwnDeadlineHoldsNoTimerAfterStop) {
    start_server();
    auto o = options();
    o.command_timeout = 100ms;
    auto c = make_client(o);
    ASSERT_FALSE(std::get<0>(run(*c, {"PING"})));
    auto [ec, r] = test::run_coro(ioc_, c->async_command_until(steady::now() + 30s, {"PING"}));
    ASSERT_FALSE(ec) << ec.message();
    // In flight at the stop: it times out (the timer re-arms), and its reply ends the drain.
    c->async_command({"BLPOP", "nothing-comes", "0.3"}, [](error_code, reply) {});
    EXPECT_LT(stop_and_run_out(*c), 5s) << "the stop waited for the answered command's deadline";
}

// Deadlines of their own end their commands in their order, not the order sent, and the ones
// of commands answered long before wake nothing: neither while others wait, nor after a stop.
// (They are a heap with answered entries dropped when they come to its top, where a list was
// searched on every command and every reply.)
TEST_F(RedisClient, OwnDeadlinesEndTheirCommandsInTheirOrder) {
    start_server();
    auto o = options();
    o.command_timeout = 5s; // later than every deadline of their own but the answered ones'
    o.stall_timeout = 10s;  // the paused server is not taken for stalled
    auto c = make_client(o);
    ASSERT_FALSE(std::get<0>(run(*c, {"PING"})));

    constexpr int answered_count = 2000;
    int answered = 0;
    for (int i = 0; i < answered_count; ++i) {
        c->async_command_until(
            steady::now() + 30s, {"PING"}, [&](error_code ec, reply) { answered += !ec ? 1 : 0; });
    }
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return answered == answered_count; }, 10s));

    server_->pause();
    std::vector<int> ended; // each command's tag, as it ends with a timeout
    const auto start = steady::now();
    for (const int tag : {3, 1, 2}) {
        c->async_command_until(start + tag * 100ms, {"PING"}, [&, tag](error_code ec, reply) {
            ended.push_back(ec == errc::redis_timeout ? tag : -tag);
        });
    }
    std::optional<error_code> ordinary;
    c->async_command({"PING"}, [&](error_code ec, reply) { ordinary = ec; });
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return ended.size() == 3; }, 4s));
    EXPECT_EQ(ended, (std::vector<int>{1, 2, 3}));
    EXPECT_FALSE(ordinary) << "the ordinary deadline is 5 s away";

    server_->resume();
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return ordinary.has_value(); }, 5s));
    EXPECT_FALSE(*ordinary) << ordinary->message();
    EXPECT_LT(stop_and_run_out(*c), 5s) << "the stop waited for an answered command's deadline";
}

TEST_F(RedisClient, RefusesCommandsBeyondMaxPending) {
    start_server();
    auto o = options();
    o.max_pending = 5;
    o.command_timeout = 200ms;
    auto c = make_client(o);
    ASSERT_FALSE(std::get<0>(run(*c, {"PING"})));
    server_->pause();
    int timeouts = 0;
    for (int i = 0; i < 5; ++i) {
        c->async_command(
            {"PING"}, [&](error_code ec, reply) { timeouts += ec == errc::redis_timeout ? 1 : 0; });
    }
    auto [ec, r] = run(*c, {"PING"});
    EXPECT_EQ(ec, errc::redis_unavailable);
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return timeouts == 5; }, 2s));
    // Timed out but unanswered, they still count until their replies arrive.
    auto [still_ec, still] = run(*c, {"PING"});
    EXPECT_EQ(still_ec, errc::redis_unavailable);
    server_->resume();
    auto back = ping_until(c.get(), true, steady::now() + 5s);
    EXPECT_TRUE(test::run_coro(ioc_, std::move(back)));
}

// Issue 11 item 15: while a stalled server answers nothing, every command ends within its own
// timeout, including one sent while the client waits to call the connection stalled (the wake
// armed for that check used to be kept: 990 ms for a 50 ms timeout).
TEST_F(RedisClient, EveryCommandEndsWithinItsTimeoutDuringAStall) {
    start_server();
    auto o = client_options::from_settings(config::redis_settings{});
    o.host = server_->host();
    o.port = server_->port();
    ASSERT_EQ(o.command_timeout, 50ms);
    ASSERT_EQ(o.stall_timeout, 1s);
    auto c = make_client(o);
    ASSERT_FALSE(std::get<0>(run(*c, {"PING"})));

    server_->pause();
    // Sequential commands for two stall periods: through the first timeouts, the stall check,
    // the reconnection (the kernel still accepts) and the timeouts on the new connection.
    // Tolerance: a timer fires late by a scheduling delay only. About 40 commands each get a
    // chance to meet a stall of the host, so the bound is for the worst of them: 500 ms, ten
    // times the timeout, covers a loaded sanitized run. The defect (the wake armed for the
    // stall check kept, 1 s after the first timeout) ends the command sent right after the
    // first timeout there, about 990 ms after it was sent: 550 ms stays 440 ms below that.
    const auto tolerance = 500ms;
    const auto until = steady::now() + 2 * o.stall_timeout + 500ms;
    int commands = 0;
    steady::duration longest{0};
    while (steady::now() < until) {
        const auto start = steady::now();
        auto [ec, r] = run(*c, {"PING"});
        const auto elapsed = steady::now() - start;
        longest = std::max(longest, elapsed);
        ++commands;
        EXPECT_TRUE(ec == errc::redis_timeout || ec == errc::redis_unavailable) << ec.message();
        EXPECT_LE(elapsed, o.command_timeout + tolerance)
            << "command " << commands << ": " << ec.message() << " after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms";
    }
    EXPECT_GE(c->connection_count(), 2u) << "the stalled connection was kept";
    std::printf("stall: %d commands, the longest took %lld ms\n",
                commands,
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(longest).count()));
    server_->resume();
}

// Issue 11 item 15: with the default backoff, commands succeed again soon after Redis comes back,
// however long the outage was (the ceiling used to be 5 s: waits of 2.5 to 5 s).
//
// The bound: when Redis comes back the client is somewhere in a wait, at most the ceiling
// (500 ms) long, then connects and sets up (a few ms on loopback), and ping_until sees it within
// 10 ms: 1.5 s leaves a second for timers late on a loaded sanitized run. The defect's waits are
// 2.5 to 5 s (mean 3.75 s), and the restart falls at a random point of one: what remains of it
// is under 1.5 s with probability about E[min(W, 1.5)] / E[W] = 1.5 / 3.75 = 0.4, so each outage
// catches it with probability 0.6, and three outages with 1 - 0.4^3 = 94% (two outages with a
// 1 s bound: 1 - (1 / 3.75)^2 = 93%).
TEST_F(RedisClient, RecoversWithinASecondOfARestart) {
    start_server();
    auto o = client_options::from_settings(config::redis_settings{});
    o.host = server_->host();
    o.port = server_->port();
    auto c = make_client(o);
    ASSERT_FALSE(std::get<0>(run(*c, {"PING"})));
    for (int outage = 0; outage < 3; ++outage) {
        server_->stop();
        auto lost = ping_until(c.get(), false, steady::now() + 5s);
        ASSERT_TRUE(test::run_coro(ioc_, std::move(lost))) << "commands kept succeeding";
        // An outage long enough for the backoff to reach its ceiling (2^5 x 100 ms > 5 s).
        // The client retries meanwhile: run its io_context through the whole outage.
        const auto outage_end = steady::now() + 4s;
        while (!test::run_until(
            ioc_, [&] { return steady::now() >= outage_end; }, 5s)) {
        }
        server_->restart(); // returns once the server answers
        const auto back_at = steady::now();
        auto back = ping_until(c.get(), true, back_at + 10s);
        ASSERT_TRUE(test::run_coro(ioc_, std::move(back))) << "no reconnection";
        const auto waited = steady::now() - back_at;
        std::printf("outage %d: commands succeeded %lld ms after the restart\n",
                    outage,
                    static_cast<long long>(
                        std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
        EXPECT_LT(waited, 1500ms)
            << "outage " << outage << ": commands failed for "
            << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
            << " ms after the restart";
    }
}

// A subscriber whose connection is lost after its SUBSCRIBE went but before the confirmation
// came reconnects at the usual pace, as does one that Redis turns away at its client cap (an
// error reply, but no refusal of the channel): only a NOPERM is waited out. The loss was taken
// for a NOPERM, and the subscriber waited 30 s before it tried again.
TEST_F(RedisClient, ASubscriptionLostBeforeItsConfirmationIsRetriedAtOnce) {
    std::atomic<int> served{0};
    scripted_server server([&](int client) {
        std::string got;
        char buffer[256];
        while (got.find("SUBSCRIBE") == std::string::npos) {
            const auto n = ::recv(client, buffer, sizeof buffer, 0);
            if (n <= 0) {
                return;
            }
            got.append(buffer, static_cast<std::size_t>(n));
        }
        const int nth = served.fetch_add(1);
        if (nth == 0) {
            return; // closed unconfirmed
        }
        if (nth == 1) {
            static constexpr char full[] = "-ERR max number of clients reached\r\n";
            (void)::send(client, full, sizeof full - 1, MSG_NOSIGNAL);
            return;
        }
        static constexpr char confirmed[] = "*3\r\n$9\r\nsubscribe\r\n$5\r\nslots\r\n:1\r\n";
        (void)::send(client, confirmed, sizeof confirmed - 1, MSG_NOSIGNAL);
        // Held until the subscriber closes it (it is destroyed before the server).
        pollfd gone{client, POLLRDHUP, 0};
        (void)::poll(&gone, 1, 10'000);
    });
    auto subscriber = make_subscriber(options_for(server.port()));
    // Within 30 times the longest backoff; a refusal's wait is 30 s.
    EXPECT_TRUE(test::run_until(
        ioc_, [&] { return subscriber->subscription_count() == 1; }, 3s))
        << served.load() << " connections served";
    EXPECT_EQ(served.load(), 3);
    subscriber->stop();
}

// A subscriber that Redis refuses (an ACL without the channel: NOPERM) says why and tries again
// rarely, not at the backoff's pace: a connection every few milliseconds would be for nothing.
TEST_F(RedisClient, ARefusedSubscriptionSaysWhyAndIsRetriedRarely) {
    start_server();
    auto admin = make_client(options());
    auto [acl_ec, acl] =
        run(*admin, {"ACL", "SETUSER", "deaf", "on", ">secret", "~*", "+@all", "resetchannels"});
    ASSERT_FALSE(acl_ec) << acl.describe();
    test::captured_log log;
    auto o = options();
    o.username = "deaf";
    o.password = "secret";
    auto subscriber = make_subscriber(o);
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return !log.lines_with("cannot subscribe to slots").empty(); }, 5s))
        << log.text();
    EXPECT_NE(log.lines_with("cannot subscribe to slots")[0].find("NOPERM"), std::string::npos)
        << log.text();
    // 25 times the longest backoff: at the usual pace, that many connections would follow.
    const auto window_end = steady::now() + 500ms;
    (void)test::run_until(
        ioc_, [&] { return steady::now() >= window_end; }, 2s);
    EXPECT_EQ(subscriber->connection_count(), 1u);
    EXPECT_EQ(subscriber->subscription_count(), 0u);
    subscriber->stop();
}

// A subscribing client hears every message published on its channel, in order, and subscribes
// again on its own after the server restarts (messages published meanwhile are lost: Redis
// keeps none for an absent subscriber).
TEST_F(RedisClient, ASubscriberHearsItsChannelAndSubscribesAgainAfterARestart) {
    start_server();
    auto o = options();
    std::vector<std::string> heard;
    auto subscriber = std::make_unique<client>(executor{ioc_.get_executor()}, o);
    subscriber->subscribe("slots", [&heard](const std::string& m) { heard.push_back(m); });
    subscriber->start();
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return subscriber->subscription_count() == 1; }, 5s));
    auto publisher = make_client(o);
    for (const auto* m : {"a", "b\0c"}) {
        auto [ec, r] = run(*publisher, {"PUBLISH", "slots", std::string(m, m[0] == 'b' ? 3 : 1)});
        ASSERT_FALSE(ec) << ec.message();
        EXPECT_EQ(r.integer, 1) << "one subscriber received it";
    }
    auto [other_ec, other] = run(*publisher, {"PUBLISH", "another-channel", "x"});
    ASSERT_FALSE(other_ec);
    EXPECT_EQ(other.integer, 0);
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return heard.size() >= 2; }, 5s));
    EXPECT_EQ(heard, (std::vector<std::string>{"a", std::string("b\0c", 3)}));

    server_->stop();
    server_->restart();
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return subscriber->subscription_count() == 2; }, 10s))
        << "did not subscribe again";
    auto back = ping_until(publisher.get(), true, steady::now() + 10s);
    ASSERT_TRUE(test::run_coro(ioc_, std::move(back)));
    auto [ec, r] = run(*publisher, {"PUBLISH", "slots", "after"});
    ASSERT_FALSE(ec);
    EXPECT_EQ(r.integer, 1);
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return heard.size() >= 3; }, 5s));
    EXPECT_EQ(heard.back(), "after");
}

} // namespace
} // namespace sluice::redis
