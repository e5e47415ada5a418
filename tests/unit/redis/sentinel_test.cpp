// SPDX-License-Identifier: Apache-2.0
// Sentinel (issue 16, slice 6): the replies it reads, the client's connect check and retarget,
// and the watcher against three real Sentinels (tests/support/redis_sentinel).
#include "reply_builders.hpp"
#include "sluice/redis/client.hpp"
#include "sluice/redis/sentinel.hpp"
#include "support/captured_log.hpp"
#include "support/redis_sentinel.hpp"
#include "support/redis_server.hpp"
#include "support/resp_client.hpp"
#include "support/run_coro.hpp"
#include "support/temp_dir.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <optional>
#include <stdexcept>
#include <sys/socket.h>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <vector>

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using result = std::tuple<error_code, reply>;

using test::array_reply;
using test::integer_reply;
using test::string_reply;

TEST(SentinelReplies, MasterAddressIsHostAndPortOrNothing) {
    const auto found =
        parse_master_address(array_reply({string_reply("10.0.0.8"), string_reply("6380")}));
    ASSERT_TRUE(found);
    EXPECT_EQ(found->host, "10.0.0.8");
    EXPECT_EQ(found->port, 6380);
    EXPECT_FALSE(parse_master_address(reply{})); // nil: that Sentinel does not know the name
    EXPECT_FALSE(parse_master_address(array_reply({string_reply("10.0.0.8")})));
    EXPECT_FALSE(parse_master_address(array_reply({string_reply("10.0.0.8"), string_reply("0")})));
    EXPECT_FALSE(
        parse_master_address(array_reply({string_reply("10.0.0.8"), string_reply("65536")})));
    EXPECT_FALSE(
        parse_master_address(array_reply({string_reply("10.0.0.8"), string_reply("63x")})));
    EXPECT_FALSE(parse_master_address(array_reply({string_reply(""), string_reply("6379")})));
    EXPECT_FALSE(parse_master_address({reply::kind::error, 0, "ERR unknown", {}}));
}

TEST(SentinelReplies, SwitchMasterNamesOldAndNew) {
    const auto s = parse_switch_master("sluice 127.0.0.1 7201 127.0.0.1 7202");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->name, "sluice");
    EXPECT_EQ(s->from, (config::endpoint_address{"127.0.0.1", 7201}));
    EXPECT_EQ(s->to, (config::endpoint_address{"127.0.0.1", 7202}));
    EXPECT_FALSE(parse_switch_master(""));
    EXPECT_FALSE(parse_switch_master("sluice 127.0.0.1 7201 127.0.0.1"));
    EXPECT_FALSE(parse_switch_master("sluice 127.0.0.1 7201 127.0.0.1 x"));
    EXPECT_FALSE(parse_switch_master("sluice 127.0.0.1 7201 127.0.0.1 7202 extra"));
}

// A message may be up to 16 MiB: one of more than five words is refused whatever follows the
// sixth (read no further), and spaces alone after the fifth add no word.
TEST(SentinelReplies, ASwitchMasterOfManyWordsIsRefused) {
    const std::string valid = "sluice 127.0.0.1 7201 127.0.0.1 7202";
    std::string words(16u << 20, ' '); // " x x x ...": 8 Mi more words
    for (std::size_t i = 1; i < words.size(); i += 2) {
        words[i] = 'x';
    }
    EXPECT_FALSE(parse_switch_master(valid + words));
    EXPECT_FALSE(parse_switch_master(valid + " " + std::string(16u << 20, 'x')));
    EXPECT_TRUE(parse_switch_master(valid + std::string(1u << 20, ' ')));
}

// A Sentinel's host is checked as a Cluster node's is: a unix socket path (which the client
// would connect to and send AUTH), a control byte, a space or a huge text names no primary.
TEST(SentinelReplies, AHostThatIsNoHostNameOrAddressNamesNoPrimary) {
    const auto with_host = [](std::string host) {
        return parse_master_address(
            array_reply({string_reply(std::move(host)), string_reply("6379")}));
    };
    EXPECT_TRUE(with_host("redis-1.example_net"));
    EXPECT_TRUE(with_host("::1"));
    EXPECT_TRUE(with_host(std::string(253, 'a')));
    EXPECT_FALSE(with_host("/tmp/redis.sock"));
    EXPECT_FALSE(with_host("10.0.0.8\nforged log line"));
    EXPECT_FALSE(with_host("10.0.0.8 6380"));
    EXPECT_FALSE(with_host(std::string(254, 'a')));
    EXPECT_FALSE(with_host(std::string(16u << 20, 'a')));

    EXPECT_TRUE(parse_switch_master("sluice 10.0.0.7 6379 redis-2.example 6379"));
    EXPECT_FALSE(parse_switch_master("sluice 10.0.0.7 6379 /tmp/redis.sock 6379"));
    EXPECT_FALSE(parse_switch_master("sluice /tmp/redis.sock 6379 10.0.0.8 6379"));
    EXPECT_FALSE(parse_switch_master("sluice 10.0.0.7 6379 10.0.0.8\r\nx 6379"));
    EXPECT_FALSE(parse_switch_master("sluice 10.0.0.7 6379 " + std::string(254, 'a') + " 6379"));
    EXPECT_FALSE(parse_switch_master("sluice 10.0.0.7 6379 10.0.0.8 0"));
    EXPECT_FALSE(parse_switch_master("sluice 10.0.0.7 65536 10.0.0.8 6379"));
}

TEST(SentinelReplies, RoleCheckPassesOnlyAMaster) {
    const auto check = primary_role_check("sluice");
    ASSERT_EQ(check.command, std::vector<std::string>{"ROLE"});
    const std::string where = "10.0.0.8:6379";
    EXPECT_EQ(check.verdict(array_reply({string_reply("master"), integer_reply(0)}), where), "");
    EXPECT_EQ(check.verdict(array_reply({string_reply("slave"), string_reply("10.0.0.7")}), where),
              "redis: 10.0.0.8:6379 is a replica, not the primary of 'sluice'; asking the "
              "Sentinels again");
    EXPECT_NE(
        check.verdict(array_reply({string_reply("sentinel")}), where).find("answers ROLE sentinel"),
        std::string::npos);
    EXPECT_NE(check.verdict(reply{}, where), "");
    // A ROLE answer is the server's to shape: the verdict, logged, shows at most 128 bytes of
    // it (escaped), however large it is.
    for (const auto& huge : {array_reply({string_reply(std::string(100'000, 'r'))}),
                             array_reply(std::vector<reply>(10'000, integer_reply(7)))}) {
        const auto verdict = check.verdict(huge, where);
        EXPECT_LT(verdict.size(), 400u) << verdict.substr(0, 1000);
        EXPECT_NE(verdict.find("answers ROLE"), std::string::npos) << verdict.substr(0, 1000);
    }
}

//------------------------------------------------------------------------------
// The client's connect check, READONLY and retarget, on real servers.

class RedisClientRetarget : public ::testing::Test {
protected:
    void SetUp() override {
        if (!test::redis_server::available()) {
            GTEST_SKIP() << "redis-server is not on PATH";
        }
        primary_.emplace();
        test::redis_server::options replica;
        replica.extra_args = {"--replicaof", "127.0.0.1", std::to_string(primary_->port())};
        replica_.emplace(replica);
    }

    client_options options_for(const test::redis_server& server) {
        client_options o;
        o.host = "127.0.0.1";
        o.port = server.port();
        o.command_timeout = 2s;
        o.reconnect_min = 20ms;
        o.reconnect_max = 100ms;
        o.on_trouble = [this] {
            ++troubles_;
        };
        return o;
    }

    result run(client& c, std::vector<std::string> args) {
        return test::run_coro(ioc_, c.async_command(std::move(args)));
    }

    net::io_context ioc_;
    std::optional<test::redis_server> primary_;
    std::optional<test::redis_server> replica_;
    int troubles_ = 0;
};

// A replica fails the ROLE check: never set up, commands fail at once, the owner is told (again
// at each attempt); moved to the primary, it connects at once.
TEST_F(RedisClientRetarget, TheRoleCheckRefusesAReplicaUntilRetargetedToThePrimary) {
    auto o = options_for(*replica_);
    o.check = primary_role_check("sluice");
    std::vector<config::endpoint_address> refused;
    o.on_refused = [&](const config::endpoint_address& at) {
        refused.push_back(at);
    };
    client c(executor{ioc_.get_executor()}, o);
    c.start();
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return troubles_ >= 2 && refused.size() >= 2; }, 5s))
        << "the refusal was not reported at each attempt";
    EXPECT_EQ(refused.front(), (config::endpoint_address{"127.0.0.1", replica_->port()}));
    EXPECT_FALSE(c.connected());
    EXPECT_EQ(c.connection_count(), 0u);
    auto [ec, r] = run(c, {"PING"});
    EXPECT_TRUE(ec == errc::redis_unavailable) << ec.message();

    c.retarget("127.0.0.1", primary_->port());
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return c.connected(); }, 5s));
    auto [set_ec, ok] = run(c, {"SET", "k", "v"});
    EXPECT_FALSE(set_ec) << set_ec.message() << " " << ok.str;
}

// Without a check, a write to a replica is answered READONLY: an error reply as any other, and
// the owner is told (behind Sentinel: a switch may have been missed).
TEST_F(RedisClientRetarget, AReadOnlyReplyIsReported) {
    client c(executor{ioc_.get_executor()}, options_for(*replica_));
    c.start();
    auto [ec, r] = run(c, {"SET", "k", "v"});
    EXPECT_EQ(ec, errc::bad_reply);
    EXPECT_EQ(r.str.rfind("READONLY", 0), 0u) << r.str;
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return troubles_ >= 1; }, 2s));
}

// Commands pending on a hung server end at once with redis_unavailable when the client is
// retargeted (not after their 2 s timeout), and the next go to the new server.
TEST_F(RedisClientRetarget, RetargetEndsPendingCommandsAtOnceAndMovesToTheNewServer) {
    test::redis_server other;
    client c(executor{ioc_.get_executor()}, options_for(*primary_));
    c.start();
    ASSERT_FALSE(std::get<0>(run(c, {"PING"})));

    primary_->pause();
    std::optional<error_code> pending;
    c.async_command({"GET", "k"}, [&](error_code ec, reply) { pending = ec; });
    ASSERT_FALSE(test::run_until(
        ioc_, [&] { return pending.has_value(); }, 100ms));
    const auto moved = steady::now();
    c.retarget("127.0.0.1", other.port());
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return pending.has_value(); }, 1s));
    const auto ended = steady::now() - moved;
    EXPECT_EQ(*pending, errc::redis_unavailable);
    // Posted completions only: well under the 2 s command timeout on a loaded machine.
    EXPECT_LT(ended, 500ms);
    // The same address again changes nothing.
    c.retarget("127.0.0.1", other.port());

    auto [ec, r] = run(c, {"SET", "moved", "yes"});
    ASSERT_FALSE(ec) << ec.message();
    primary_->resume();
    test::resp_client on_other(other.port());
    EXPECT_TRUE(on_other.exists("moved"));
    test::resp_client on_primary(primary_->port());
    EXPECT_FALSE(on_primary.exists("moved"));
    EXPECT_EQ(troubles_, 0) << "a retarget the owner asked for is no trouble";
}

// A client started without an address connects nowhere; its first retarget connects it.
TEST_F(RedisClientRetarget, AClientWithoutAnAddressWaitsForItsFirstRetarget) {
    auto o = options_for(*primary_);
    o.host.clear();
    client c(executor{ioc_.get_executor()}, o);
    c.start();
    auto [ec, r] = run(c, {"PING"});
    EXPECT_EQ(ec, errc::redis_unavailable);
    c.retarget("127.0.0.1", primary_->port());
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return c.connected(); }, 5s));
    EXPECT_EQ(troubles_, 0);
}

//------------------------------------------------------------------------------
// The watcher against three Sentinels.

/// A watcher on its own thread, recording every primary it reports.
class watcher_harness {
public:
    explicit watcher_harness(redis::sentinel_options o)
        : watcher_(executor{ioc_.get_executor()},
                   std::move(o),
                   [this](const config::endpoint_address& a) {
                       const std::lock_guard lock(mutex_);
                       seen_.push_back({a, steady::now()});
                   }) {
        net::post(ioc_, [this] { watcher_.start(); });
        thread_ = std::thread([this] { ioc_.run(); });
    }

    ~watcher_harness() {
        net::post(ioc_, [this] { watcher_.stop(); });
        work_.reset();
        thread_.join();
    }

    /// The primaries reported so far, with when.
    std::vector<std::pair<config::endpoint_address, steady::time_point>> seen() const {
        const std::lock_guard lock(mutex_);
        return seen_;
    }

    sentinel_watcher& watcher() { return watcher_; }

    /// Runs `f` on the watcher's thread, after everything posted there before it.
    void post(std::function<void()> f) { net::post(ioc_, std::move(f)); }

private:
    net::io_context ioc_;
    net::executor_work_guard<net::io_context::executor_type> work_{ioc_.get_executor()};
    mutable std::mutex mutex_;
    std::vector<std::pair<config::endpoint_address, steady::time_point>> seen_;
    sentinel_watcher watcher_;
    std::thread thread_;
};

bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit) {
    const auto deadline = steady::now() + limit;
    while (!done()) {
        if (steady::now() >= deadline) {
            return false;
        }
        // Polling another thread's state: nothing to block on.
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

class SentinelWatcher : public ::testing::Test {
protected:
    void SetUp() override {
        if (!test::redis_sentinel::available()) {
            GTEST_SKIP() << "redis-server is not on PATH";
        }
        deployment_.emplace();
    }

    sentinel_options options() const {
        auto o = sentinel_options::from_settings(deployment_->settings());
        o.sentinel.connect_timeout = 500ms;
        o.sentinel.command_timeout = 500ms;
        return o;
    }

    config::endpoint_address node_address(std::size_t i) {
        return {"127.0.0.1", deployment_->node(i).port()};
    }

    std::optional<test::redis_sentinel> deployment_;
};

// The primary is found (past a Sentinel that is down, first in the list), the switch heard,
// and the new primary reported within the 10 s of SENTINEL FAILOVER.
TEST_F(SentinelWatcher, FindsThePrimaryAndFollowsAFailover) {
    auto o = options();
    o.nodes.insert(o.nodes.begin(), {"127.0.0.1", test::free_port()}); // nothing listens
    watcher_harness h(o);
    ASSERT_TRUE(eventually([&] { return h.seen().size() == 1; }, 5s));
    EXPECT_EQ(h.seen().front().first, node_address(0));
    EXPECT_EQ(h.watcher().primary(), node_address(0));
    ASSERT_TRUE(eventually([&] { return h.watcher().listening(); }, 5s));

    const auto asked = steady::now();
    deployment_->failover();
    ASSERT_TRUE(eventually([&] { return h.seen().size() == 2; }, 10s));
    const auto [address, at] = h.seen().back();
    EXPECT_EQ(address, node_address(1));
    EXPECT_EQ(h.watcher().switches(), 1u);
    const auto followed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(at - asked);
    RecordProperty("failover_to_followed_ms", static_cast<int>(followed_ms.count()));
    std::printf("SENTINEL FAILOVER to the new primary reported: %lld ms\n",
                static_cast<long long>(followed_ms.count()));
}

// A name no Sentinel monitors gives no primary; the watcher keeps asking (with its backoff)
// and reports nothing.
TEST_F(SentinelWatcher, AnUnknownNameGivesNoPrimary) {
    auto o = options();
    o.master = "unknown";
    watcher_harness h(o);
    EXPECT_FALSE(eventually([&] { return !h.seen().empty(); }, 1s));
    EXPECT_FALSE(h.watcher().primary());
}

//------------------------------------------------------------------------------
// The watcher's own rules, against a fake Sentinel whose answers the test sets.

/**
 * Speaks just enough RESP for the watcher: answers `SENTINEL get-master-addr-by-name` with the
 * address set by `name` (nil when none), `SUBSCRIBE` with its confirmation, anything else
 * `+OK`; `publish_switch` sends a `+switch-master` message to every subscribed connection.
 * `hold` keeps the questions that come, unanswered, until `release` (`held` counts them). One
 * thread per connection, blocking sockets; the destructor shuts them all down.
 */
class fake_sentinel {
public:
    fake_sentinel() {
        listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t length = sizeof address;
        // The sockaddr casts are how the BSD socket API is spelled.
        if (listener_ < 0 ||
            ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
            ::listen(listener_, 16) != 0 ||
            ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
            throw std::runtime_error("fake_sentinel: cannot listen");
        }
        port_ = ntohs(address.sin_port);
        acceptor_ = std::thread([this] { accept_loop(); });
    }

    ~fake_sentinel() {
        release();
        ::shutdown(listener_, SHUT_RDWR);
        acceptor_.join();
        {
            const std::lock_guard lock(mutex_);
            for (const int fd : connections_) {
                ::shutdown(fd, SHUT_RDWR);
            }
        }
        for (auto& t : handlers_) {
            t.join();
        }
        for (const int fd : connections_) {
            ::close(fd);
        }
        ::close(listener_);
    }

    fake_sentinel(const fake_sentinel&) = delete;
    fake_sentinel& operator=(const fake_sentinel&) = delete;

    std::uint16_t port() const { return port_; }

    void name(std::optional<config::endpoint_address> primary) {
        const std::lock_guard lock(mutex_);
        primary_ = std::move(primary);
    }

    /// `get-master-addr-by-name` questions answered so far.
    int asked() const {
        const std::lock_guard lock(mutex_);
        return asked_;
    }

    bool subscribed() const {
        const std::lock_guard lock(mutex_);
        return !subscribers_.empty();
    }

    void hold() {
        const std::lock_guard lock(mutex_);
        holding_ = true;
    }

    /// Answers the questions held, with the address named then.
    void release() {
        {
            const std::lock_guard lock(mutex_);
            holding_ = false;
        }
        released_.notify_all();
    }

    /// Questions held unanswered now.
    int held() const {
        const std::lock_guard lock(mutex_);
        return held_;
    }

    void publish_switch(const std::string& master,
                        const config::endpoint_address& from,
                        const config::endpoint_address& to) {
        const auto payload =
            fmt::format("{} {} {} {} {}", master, from.host, from.port, to.host, to.port);
        const auto message =
            fmt::format("*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n${}\r\n{}\r\n",
                        payload.size(),
                        payload);
        const std::lock_guard lock(mutex_);
        for (const int fd : subscribers_) {
            ::send(fd, message.data(), message.size(), MSG_NOSIGNAL);
        }
    }

private:
    void accept_loop() {
        for (;;) {
            const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) {
                return; // shut down
            }
            const std::lock_guard lock(mutex_);
            connections_.push_back(fd);
            handlers_.emplace_back([this, fd] { serve(fd); });
        }
    }

    // Reads one RESP array of bulk strings (what hiredis sends); empty at the end.
    static std::vector<std::string> read_command(int fd, std::string& buffer) {
        const auto line = [&]() -> std::optional<std::string> {
            for (;;) {
                if (const auto end = buffer.find("\r\n"); end != std::string::npos) {
                    auto text = buffer.substr(0, end);
                    buffer.erase(0, end + 2);
                    return text;
                }
                char chunk[4096];
                const auto n = ::recv(fd, chunk, sizeof chunk, 0);
                if (n <= 0) {
                    return std::nullopt;
                }
                buffer.append(chunk, static_cast<std::size_t>(n));
            }
        };
        const auto head = line();
        if (!head || head->empty() || (*head)[0] != '*') {
            return {};
        }
        std::vector<std::string> args;
        for (int i = std::stoi(head->substr(1)); i > 0; --i) {
            const auto size = line(); // "$<n>"; the bulk strings here never hold CRLF
            const auto arg = line();
            if (!size || !arg) {
                return {};
            }
            args.push_back(*arg);
        }
        return args;
    }

    void serve(int fd) {
        std::string buffer;
        for (;;) {
            const auto args = read_command(fd, buffer);
            if (args.empty()) {
                return;
            }
            std::string answer = "+OK\r\n";
            std::unique_lock lock(mutex_);
            if (args.size() == 3 && args[0] == "SENTINEL") {
                ++held_;
                released_.wait(lock, [&] { return !holding_; });
                --held_;
                ++asked_;
                answer = "*-1\r\n";
                if (primary_) {
                    const auto port = std::to_string(primary_->port);
                    answer = fmt::format("*2\r\n${}\r\n{}\r\n${}\r\n{}\r\n",
                                         primary_->host.size(),
                                         primary_->host,
                                         port.size(),
                                         port);
                }
            } else if (args.size() == 2 && args[0] == "SUBSCRIBE") {
                subscribers_.push_back(fd);
                answer = fmt::format(
                    "*3\r\n$9\r\nsubscribe\r\n${}\r\n{}\r\n:1\r\n", args[1].size(), args[1]);
            }
            ::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
        }
    }

    int listener_ = -1;
    std::uint16_t port_ = 0;
    std::thread acceptor_;
    mutable std::mutex mutex_;
    std::vector<int> connections_;
    std::vector<std::thread> handlers_;
    std::vector<int> subscribers_;
    std::optional<config::endpoint_address> primary_;
    int asked_ = 0;
    bool holding_ = false;
    int held_ = 0;
    std::condition_variable released_;
};

// A switch heard moves the primary; a Sentinel that then still names the address switched from
// (it has not heard of the switch yet) is ignored, until the primary switched to refuses to be
// one, while an answer naming any other address is followed, as is every switch heard.
TEST(SentinelWatcherRules, AnAnswerNamingTheAddressJustSwitchedFromIsIgnored) {
    fake_sentinel sentinel;
    const config::endpoint_address a{"127.0.0.1", 7001};
    const config::endpoint_address b{"127.0.0.1", 7002};
    const config::endpoint_address c{"127.0.0.1", 7003};
    sentinel.name(a);
    sentinel_options o;
    o.master = "sluice";
    o.nodes = {{"127.0.0.1", sentinel.port()}};
    o.sentinel.command_timeout = 500ms;
    o.sentinel.connect_timeout = 500ms;
    o.min_interval = 10ms;
    watcher_harness h(o);
    ASSERT_TRUE(eventually([&] { return h.seen().size() == 1 && sentinel.subscribed(); }, 5s));
    EXPECT_EQ(h.seen().back().first, a);

    sentinel.publish_switch("other", a, c); // another name: not ours
    sentinel.publish_switch("sluice", a, b);
    ASSERT_TRUE(eventually([&] { return h.seen().size() == 2; }, 5s));
    EXPECT_EQ(h.seen().back().first, b);
    EXPECT_EQ(h.watcher().switches(), 1u);

    // Still names a: asked, and ignored. The watcher asks in rounds, one at a time, and a
    // round ends only once its answer was handled (on_primary, which records `seen`, runs
    // within that): so once the Sentinel is asked a second time, the first answer naming a has
    // been handled, and a followed a would be in `seen` already. rediscover() while a round is
    // under way does nothing (that round answers for now): asked again until a round comes.
    const auto before = sentinel.asked();
    ASSERT_TRUE(eventually(
        [&] {
            h.watcher().rediscover();
            return sentinel.asked() >= before + 2;
        },
        5s));
    EXPECT_EQ(h.seen().size(), 2u) << "an answer naming the address switched from was followed";
    EXPECT_EQ(h.watcher().primary(), b);

    // b refuses to be the primary (a data client's ROLE check): the primary failed back to a,
    // its announcement missed. The Sentinel naming a is believed again, within stale_hold.
    h.watcher().refused(b);
    ASSERT_TRUE(eventually(
        [&] {
            h.watcher().rediscover();
            return h.seen().size() >= 3;
        },
        5s));
    EXPECT_EQ(h.seen().back().first, a);

    // Names c: followed (asked again until a round begins after the one under way, if any).
    sentinel.name(c);
    ASSERT_TRUE(eventually(
        [&] {
            h.watcher().rediscover();
            return h.seen().size() >= 4;
        },
        5s));
    EXPECT_EQ(h.seen().size(), 4u);
    EXPECT_EQ(h.seen().back().first, c);
    EXPECT_EQ(h.watcher().switches(), 3u);
}

/// Two Sentinels midway through a failover: the first, cut off from the others, names the old
/// primary; the second names the new one.
struct failover_midway {
    fake_sentinel cut_off;
    fake_sentinel current;
    config::endpoint_address old_primary{"127.0.0.1", 7001};
    config::endpoint_address new_primary{"127.0.0.1", 7002};

    failover_midway() {
        cut_off.name(old_primary);
        current.name(new_primary);
    }

    /// Both Sentinels, the cut-off one first.
    sentinel_options options() const {
        sentinel_options o;
        o.master = "sluice";
        o.nodes = {{"127.0.0.1", cut_off.port()}, {"127.0.0.1", current.port()}};
        return o;
    }

    /// `options`, with no round but those asked for, and time for a question held.
    sentinel_options held_round_options() const {
        auto o = options();
        o.sentinel.command_timeout = 5s; // a held question must not time out
        o.sentinel.connect_timeout = 500ms;
        o.min_interval = 10ms;
        o.recheck_interval = 60s;
        return o;
    }

    /// Starts a round whose question to `cut_off` is held, and reports a ROLE refusal of
    /// `old_primary` meanwhile; returns once the refusal has landed on the watcher's thread (it
    /// is posted there: something posted after it runs after it), the question still held.
    void refuse_while_a_round_is_out(watcher_harness& h) {
        cut_off.hold();
        h.watcher().rediscover();
        ASSERT_TRUE(eventually([&] { return cut_off.held() == 1; }, 5s)) << "no round out";
        h.watcher().refused(old_primary);
        std::promise<void> handled;
        h.post([&] { handled.set_value(); });
        handled.get_future().wait();
    }
};

// A Sentinel cut off from the others during a failover (first in the list) goes on naming the
// old primary: once the ROLE check refuses that address, the next round starts with the
// Sentinel after it, and later rounds with the one that answered, so the new primary is
// followed and kept. A refusal of an address not followed, as one reported late, moves nothing.
TEST(SentinelWatcherRules, ARefusedPrimaryHasTheNextSentinelAskedFirst) {
    failover_midway f;
    auto& [cut_off, current, old_primary, new_primary] = f;
    auto o = f.options();
    o.sentinel.command_timeout = 500ms;
    o.sentinel.connect_timeout = 500ms;
    o.min_interval = 10ms;
    o.recheck_interval = 20ms;
    watcher_harness h(o);
    ASSERT_TRUE(eventually([&] { return h.seen().size() == 1; }, 5s));
    EXPECT_EQ(h.seen().back().first, old_primary);

    // Reported by every worker: the start moves once, past the Sentinel that named it.
    for (int worker = 0; worker < 4; ++worker) {
        h.watcher().refused(old_primary);
    }
    ASSERT_TRUE(eventually([&] { return h.seen().size() == 2; }, 5s));
    EXPECT_EQ(h.seen().back().first, new_primary);

    // The rechecks that follow ask the Sentinel that answered first: still the new primary.
    const auto before = current.asked();
    ASSERT_TRUE(eventually([&] { return current.asked() >= before + 3; }, 5s));
    EXPECT_EQ(h.seen().size(), 2u);
    EXPECT_EQ(h.watcher().primary(), new_primary);

    // A refusal of the old primary, late, is not about the primary followed: nothing moves.
    const auto cut_off_asked = cut_off.asked();
    h.watcher().refused(old_primary);
    const auto asked = current.asked();
    ASSERT_TRUE(eventually([&] { return current.asked() >= asked + 3; }, 5s));
    EXPECT_EQ(cut_off.asked(), cut_off_asked);
    EXPECT_EQ(h.watcher().primary(), new_primary);
}

// A refusal that comes while a round is out, its question to the Sentinel that named the refused
// primary: that Sentinel names it again, and the round asks the next, which names the new one.
// The refusal was lost: the round's answer set the start back to the stale Sentinel and the
// next round came after recheck_interval, so the stale primary stayed followed until a worker's
// ROLE check, after its reconnect backoff, refused it once more.
TEST(SentinelWatcherRules, ARefusalWhileARoundIsOutHasItAskTheNextSentinel) {
    failover_midway f;
    auto& [cut_off, current, old_primary, new_primary] = f;
    watcher_harness h(f.held_round_options());
    ASSERT_TRUE(eventually([&] { return h.seen().size() == 1; }, 5s));
    EXPECT_EQ(h.seen().back().first, old_primary);

    f.refuse_while_a_round_is_out(h);
    cut_off.release();
    ASSERT_TRUE(eventually([&] { return h.seen().size() == 2; }, 3s))
        << "the refused primary is still followed";
    EXPECT_EQ(h.seen().back().first, new_primary);
}

// A refusal while a round is out, of the node every Sentinel names (a new primary that ROLE
// refused before its promotion was done): the round takes the answer it passed over rather than
// end as if no Sentinel knew the primary, with a warning saying so and the backoff after it.
TEST(SentinelWatcherRules, ARoundWhoseEveryAnswerNamesTheRefusedNodeTakesIt) {
    test::captured_log log; // declared first: it outlives the watcher's thread
    failover_midway f;
    f.current.name(f.old_primary);
    watcher_harness h(f.held_round_options());
    ASSERT_TRUE(eventually([&] { return h.seen().size() == 1; }, 5s));

    f.refuse_while_a_round_is_out(h);
    const auto asked = [&] {
        return f.cut_off.asked() + f.current.asked();
    };
    const auto before = asked();
    f.cut_off.release();
    // The held round asks both; a later one, which begins once it has ended (whichever way it
    // ended), asks one more.
    ASSERT_TRUE(eventually(
        [&] {
            h.watcher().rediscover();
            return asked() >= before + 3;
        },
        5s));
    EXPECT_TRUE(log.lines_with("no Sentinel named the primary").empty()) << log.text();
    EXPECT_EQ(h.watcher().primary(), f.old_primary);
}

// A Sentinel naming no host (here a unix socket path, which the client would connect to and send
// AUTH to) does not know the primary: nothing is followed. Its answers differ every time, yet
// the warning comes once per 10 s: it was keyed by the whole line, quoting each answer.
TEST(SentinelWatcherRules, AnAnswerThatNamesNoHostIsNotFollowedAndLoggedOnce) {
    test::captured_log log; // declared first: it outlives the watcher's thread
    fake_sentinel sentinel;
    sentinel.name(config::endpoint_address{"/tmp/redis-0.sock", 6379});
    sentinel_options o;
    o.master = "sluice";
    o.nodes = {{"127.0.0.1", sentinel.port()}};
    o.sentinel.command_timeout = 500ms;
    o.sentinel.connect_timeout = 500ms;
    o.sentinel.reconnect_min = 10ms;
    o.sentinel.reconnect_max = 20ms;
    o.min_interval = 10ms;
    watcher_harness h(o);
    int named = 0;
    ASSERT_TRUE(eventually(
        [&] {
            if (const int asked = sentinel.asked(); asked > named) {
                named = asked;
                sentinel.name(config::endpoint_address{
                    "/tmp/redis-" + std::to_string(named) + ".sock", 6379});
            }
            return named >= 4;
        },
        10s));
    EXPECT_TRUE(h.seen().empty());
    EXPECT_FALSE(h.watcher().primary());
    const auto lines = log.lines_with("does not know the primary");
    EXPECT_EQ(lines.size(), 1u) << log.text();
}

} // namespace
} // namespace sluice::redis
