// SPDX-License-Identifier: Apache-2.0
// redis::cluster_client against a real Redis Cluster of 3 primaries and 3 replicas started by
// the test (tests/support/redis_cluster): routing by slot, MOVED after a reshard, ASK during a
// migration, seeds that are gone.
#include "sluice/redis/cluster_client.hpp"
#include "sluice/redis/command_writer.hpp"
#include "support/captured_log.hpp"
#include "support/redis_cluster.hpp"
#include "support/resp_client.hpp"
#include "support/run_coro.hpp"
#include "support/temp_dir.hpp"

#include <boost/asio/io_context.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <atomic>
#include <functional>
#include <future>
#include <mutex>
#include <netinet/in.h>
#include <optional>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <vector>

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using result = std::tuple<error_code, reply>;

std::string resp(const std::vector<std::string>& args) {
    std::string out;
    command_writer w(out, args.size());
    for (const auto& a : args) {
        w.arg(std::string_view(a));
    }
    return out;
}

/// The first key "<prefix><n>" that hashes to `slot`.
std::string key_in_slot(std::uint16_t slot, const std::string& prefix = "k") {
    for (int n = 0;; ++n) {
        auto key = prefix + std::to_string(n);
        if (key_slot(key) == slot) {
            return key;
        }
    }
}

class ClusterClient : public ::testing::Test {
protected:
    void SetUp() override {
        if (!test::redis_cluster::available()) {
            GTEST_SKIP() << "redis-server or redis-cli is not on PATH";
        }
        cluster_.emplace();
    }

    std::unique_ptr<cluster_client> make_client(std::vector<config::endpoint_address> seeds) {
        cluster_options o;
        o.seeds = std::move(seeds);
        o.node.command_timeout = 2s;
        o.node.reconnect_min = 20ms;
        o.node.reconnect_max = 200ms;
        auto c = std::make_unique<cluster_client>(executor{ioc_.get_executor()}, std::move(o));
        c->start();
        return c;
    }

    bool wait_healthy(cluster_client& c) {
        return test::run_until(
            ioc_, [&] { return c.healthy(); }, 15s);
    }

    result run(cluster_client& c, const std::string& key, const std::vector<std::string>& args) {
        return test::run_coro(ioc_, c.async_formatted(key_slot(key), resp(args)));
    }

    /// The value of `key` read straight from node `i` (ASKING first: it may be importing it).
    std::string read_on(std::size_t i, const std::string& key) {
        test::resp_client direct(cluster_->node(i).port());
        direct.command({"ASKING"});
        return direct.command({"GET", key}).text;
    }

    /// The lowest slot node `i` owns, by the client's map.
    std::uint16_t first_slot_of(const cluster_client& c, std::size_t i) {
        const auto map = c.map();
        for (std::uint16_t s = 0; s < cluster_slots; ++s) {
            if (const auto* owner = map->owner_of(s);
                owner && owner->port == cluster_->node(i).port()) {
                return s;
            }
        }
        ADD_FAILURE() << "node " << i << " owns no slot";
        return 0;
    }

    net::io_context ioc_;
    std::optional<test::redis_cluster> cluster_;
};

TEST_F(ClusterClient, RoutesEachCommandToItsSlotsPrimary) {
    // One seed is enough: it gives the whole map.
    auto c = make_client({cluster_->addresses().front()});
    ASSERT_TRUE(wait_healthy(*c));
    ASSERT_TRUE(c->map());
    EXPECT_EQ(c->map()->covered(), cluster_slots);
    EXPECT_EQ(c->map()->primaries.size(), 3u);

    std::vector<std::size_t> owners_seen;
    for (int i = 0; i < 30; ++i) {
        const auto key = "user:" + std::to_string(i);
        auto [ec, r] = run(*c, key, {"SET", key, "v" + std::to_string(i)});
        ASSERT_FALSE(ec) << key << ": " << ec.message() << " " << r.str;
        const auto owner = cluster_->owner_of(key_slot(key));
        ASSERT_TRUE(owner);
        EXPECT_EQ(read_on(*owner, key), "v" + std::to_string(i)) << key;
        if (std::find(owners_seen.begin(), owners_seen.end(), *owner) == owners_seen.end()) {
            owners_seen.push_back(*owner);
        }
    }
    EXPECT_EQ(owners_seen.size(), 3u) << "30 keys should reach all three primaries";
    // Routed by the map: Redis never had to redirect one.
    EXPECT_EQ(c->counters().moved.load(), 0u);
    EXPECT_EQ(c->counters().ask.load(), 0u);
}

TEST_F(ClusterClient, FollowsMovedAfterAReshardAndLearnsTheNewMap) {
    auto c = make_client(cluster_->addresses());
    ASSERT_TRUE(wait_healthy(*c));
    const auto primaries = cluster_->primaries();
    ASSERT_EQ(primaries.size(), 3u);
    const auto from = primaries[0];
    const auto to = primaries[1];
    // The reshard takes the source's lowest slots first.
    const auto moved_slot = first_slot_of(*c, from);
    cluster_->move_slots(from, to, 10);
    ASSERT_EQ(cluster_->owner_of(moved_slot), to) << "slot " << moved_slot;

    // The worker's map still says `from`: the command is redirected once and succeeds.
    const auto key = key_in_slot(moved_slot);
    auto [ec, r] = run(*c, key, {"SET", key, "after-reshard"});
    ASSERT_FALSE(ec) << ec.message() << " " << r.str;
    EXPECT_EQ(read_on(to, key), "after-reshard");
    EXPECT_GE(c->counters().moved.load(), 1u);

    // The refresh that MOVED asked for brings the whole move in: a neighbour is routed directly.
    ASSERT_TRUE(test::run_until(
        ioc_,
        [&] {
            const auto map = c->map();
            return map && map->owner_of(moved_slot + 9) != nullptr &&
                   map->owner_of(moved_slot + 9)->port == cluster_->node(to).port();
        },
        5s));
    const auto moved_before = c->counters().moved.load();
    const auto neighbour = key_in_slot(static_cast<std::uint16_t>(moved_slot + 9));
    auto [ec2, r2] = run(*c, neighbour, {"SET", neighbour, "direct"});
    ASSERT_FALSE(ec2) << ec2.message() << " " << r2.str;
    EXPECT_EQ(c->counters().moved.load(), moved_before);
    EXPECT_GE(c->counters().refreshes_changed.load(), 2u); // the first map, then the reshard's
}

TEST_F(ClusterClient, FollowsAskWhileASlotMigrates) {
    auto c = make_client(cluster_->addresses());
    ASSERT_TRUE(wait_healthy(*c));
    const auto primaries = cluster_->primaries();
    const auto source = primaries[0];
    const auto target = primaries[1];
    const auto slot = first_slot_of(*c, source);
    // Half a migration, as `redis-cli --cluster reshard` leaves it while it moves keys.
    test::resp_client on_target(cluster_->node(target).port());
    test::resp_client on_source(cluster_->node(source).port());
    const auto s = std::to_string(slot);
    ASSERT_EQ(
        on_target.command({"CLUSTER", "SETSLOT", s, "IMPORTING", cluster_->node_id(source)}).text,
        "OK");
    ASSERT_EQ(
        on_source.command({"CLUSTER", "SETSLOT", s, "MIGRATING", cluster_->node_id(target)}).text,
        "OK");

    // A key the source does not hold is asked for on the target.
    const auto key = key_in_slot(slot, "migrating:");
    auto [ec, r] = run(*c, key, {"SET", key, "asked"});
    ASSERT_FALSE(ec) << ec.message() << " " << r.str;
    EXPECT_EQ(c->counters().ask.load(), 1u);
    EXPECT_EQ(read_on(target, key), "asked");
    // ASK changes no map: the slot is still the source's.
    EXPECT_EQ(c->map()->owner_of(slot)->port, cluster_->node(source).port());
}

TEST_F(ClusterClient, ASeedThatIsGoneIsSkipped) {
    auto seeds = cluster_->addresses();
    seeds.insert(seeds.begin(), config::endpoint_address{"127.0.0.1", test::free_port()});
    auto c = make_client(seeds);
    ASSERT_TRUE(wait_healthy(*c));
    const auto key = std::string("after-a-dead-seed");
    auto [ec, r] = run(*c, key, {"SET", key, "1"});
    EXPECT_FALSE(ec) << ec.message() << " " << r.str;
}

// A map read is allowed connect-timeout, not the per-decision timeout: the first one, held on
// each seed through a set-up (here a connect command of 300 ms) that outlasts the 50 ms timeout,
// gives the map. It timed out on every seed, and the map came only from the next read.
TEST_F(ClusterClient, TheFirstMapReadIsAllowedTheConnectTimeout) {
    cluster_options o;
    o.seeds = cluster_->addresses();
    o.node.command_timeout = 50ms;
    o.node.connect_timeout = 5s;
    cluster_client c(executor{ioc_.get_executor()}, o);
    // Busy for 300 ms, on any node: no key, so no slot to be redirected for.
    c.add_connect_command({"EVAL",
                           "local t = redis.call('TIME') "
                           "local start = t[1] * 1000000 + t[2] "
                           "repeat t = redis.call('TIME') "
                           "until t[1] * 1000000 + t[2] - start >= 300000 "
                           "return 1",
                           "0"});
    c.start();
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return c.map() != nullptr; }, 10s));
    EXPECT_EQ(c.counters().refreshes_failed.load(), 0u);
    EXPECT_EQ(c.counters().refreshes_changed.load(), 1u);
}

TEST_F(ClusterClient, WithoutAMapCommandsFailAtOnce) {
    cluster_options o;
    o.seeds = {config::endpoint_address{"127.0.0.1", test::free_port()}};
    o.node.command_timeout = 2s;
    cluster_client c(executor{ioc_.get_executor()}, o);
    c.start();
    const auto started = std::chrono::steady_clock::now();
    auto [ec, r] = test::run_coro(ioc_, c.async_formatted(0, resp({"PING"})));
    EXPECT_EQ(ec, errc::redis_unavailable);
    // At once, not after the command timeout: the failure mode applies without waiting.
    EXPECT_LT(std::chrono::steady_clock::now() - started, 1s);
    EXPECT_FALSE(c.healthy());
}

//------------------------------------------------------------------------------
// Against a fake node, for what a healthy cluster does not do.

/**
 * A fake node: each command (a RESP array of bulk strings, as hiredis sends them) is answered
 * with what `answer` returns for it, raw RESP, and may be delayed there. One thread per
 * connection, blocking sockets; the destructor shuts them all down.
 */
class fake_node {
public:
    using answer_function = std::function<std::string(const std::vector<std::string>&)>;

    explicit fake_node(answer_function answer)
        : answer_(std::move(answer)) {
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
            throw std::runtime_error("fake_node: cannot listen");
        }
        port_ = ntohs(address.sin_port);
        acceptor_ = std::thread([this] { accept_loop(); });
    }

    ~fake_node() {
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

    fake_node(const fake_node&) = delete;
    fake_node& operator=(const fake_node&) = delete;

    config::endpoint_address address() const { return {"127.0.0.1", port_}; }

    /// `CLUSTER SLOTS` naming this node the owner of every slot.
    std::string whole_map() const {
        return fmt::format("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:{}\r\n", port_);
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
            const auto size = line(); // "$<n>"; the arguments here never hold CRLF
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
            const auto answer = answer_(args);
            ::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
        }
    }

    answer_function answer_;
    int listener_ = -1;
    std::uint16_t port_ = 0;
    std::thread acceptor_;
    std::mutex mutex_;
    std::vector<int> connections_;
    std::vector<std::thread> handlers_;
};

bool is_cluster_slots(const std::vector<std::string>& args) {
    return args.size() == 2 && args[0] == "CLUSTER" && args[1] == "SLOTS";
}

/// Starts `c` and runs `ioc` until it is healthy (false if not within 5 s).
bool started_healthy(net::io_context& ioc, cluster_client& c) {
    c.start();
    return test::run_until(
        ioc, [&] { return c.healthy(); }, 5s);
}

/// Options with `seed` for seed and no map read but the first within 2 s: what a test that
/// calls through the first map sees.
cluster_options no_reads_soon(const fake_node& seed) {
    cluster_options o;
    o.seeds = {seed.address()};
    o.node.command_timeout = 2s;
    o.trouble_interval = 2s;
    o.moved_interval = 2s;
    return o;
}

/// A node that owns every slot and answers anything but ASKING with a redirection (`kind`: ASK
/// or MOVED) of slot n to the nth of three ports where nothing listens, round: a broken or hostile
/// node. `options()` has it for seed.
struct redirecting_node {
    explicit redirecting_node(std::string kind)
        : node([this, kind](const std::vector<std::string>& args) -> std::string {
            if (is_cluster_slots(args)) {
                return node.whole_map();
            }
            if (args[0] == "ASKING") {
                return "+OK\r\n";
            }
            const auto n = redirections++ % nowhere.size();
            return fmt::format("-{} {} 127.0.0.1:{}\r\n", kind, n, nowhere[n]);
        }) {}

    cluster_options options() const {
        cluster_options o;
        o.seeds = {node.address()};
        o.node.command_timeout = 2s;
        o.node.reconnect_min = 20ms;
        o.node.reconnect_max = 200ms;
        o.trouble_interval = 2s; // no refresh before the redirections are in
        o.moved_interval = 2s;
        o.refresh_interval = 1s; // and the read after that one
        return o;
    }

    const std::vector<std::uint16_t> nowhere{
        test::free_port(), test::free_port(), test::free_port()};
    std::atomic<std::size_t> redirections{0};
    fake_node node;
};

// A node an ASK named, outside the map, is dropped at the first map read that finds no ASK named
// it since the read before, although the map did not change: only a changed map retired nodes,
// so a node answering ASK with ever new hosts had each worker keep a connection (reconnecting
// forever) to every one of them.
TEST(ClusterClientNodes, ANodeOnlyAnAskNamedIsDroppedAtTheFirstReadNoAskNamedItBefore) {
    net::io_context ioc;
    redirecting_node asking("ASK");
    const auto& nowhere = asking.nowhere;
    const auto o = asking.options();
    cluster_client c(executor{ioc.get_executor()}, o);
    ASSERT_TRUE(started_healthy(ioc, c));
    EXPECT_EQ(c.node_count(), 1u);

    for (std::size_t i = 0; i < nowhere.size(); ++i) {
        auto [ec, r] = test::run_coro(ioc, c.async_formatted(0, resp({"GET", "k"})));
        EXPECT_EQ(ec, errc::redis_unavailable) << ec.message() << " " << r.str;
    }
    EXPECT_EQ(c.counters().ask.load(), nowhere.size());
    EXPECT_EQ(c.node_count(), 1u + nowhere.size());

    // The lost ASK targets make the map be read again soon: the same map. The nodes it does not
    // name stay while an ASK named them since the read before (a migration's target may own no
    // slot yet), and are gone at the read after, no ASK having named them again.
    const auto unchanged = c.counters().refreshes_unchanged.load();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return c.counters().refreshes_unchanged.load() > unchanged; }, 5s));
    EXPECT_EQ(c.node_count(), 1u + nowhere.size());
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return c.counters().refreshes_unchanged.load() > unchanged + 1; }, 5s));
    EXPECT_EQ(c.node_count(), 1u);
    EXPECT_TRUE(c.healthy());
}

// A call redirected to a node whose connection is still being set up ends at its own deadline,
// and its copy held there is never sent: held to a full timeout counted from the resend, it
// was sent once the set-up was done, charging Redis for a request decided already.
TEST(ClusterClientNodes, AResendHeldOnANewConnectionEndsWithTheCall) {
    net::io_context ioc;
    std::mutex mutex;
    std::vector<std::string> reached; // what the target was sent, AUTH aside
    std::atomic<bool> set_up{false};
    // The set-up ends once the call has ended at its deadline (the test says so): before a
    // timeout counted from the resend, 1.5 s later, would end the copy held there.
    std::promise<void> call_ended;
    const std::shared_future<void> call_ended_seen = call_ended.get_future().share();
    fake_node target([&](const std::vector<std::string>& args) -> std::string {
        if (args[0] == "AUTH") {
            call_ended_seen.wait_for(10s); // bounded, should the test end early
            set_up = true;
            return "+OK\r\n";
        }
        const std::lock_guard lock(mutex);
        reached.push_back(args.size() > 1 ? args[0] + " " + args[1] : args[0]);
        return "+OK\r\n";
    });
    fake_node* self = nullptr;
    fake_node source([&](const std::vector<std::string>& args) -> std::string {
        if (is_cluster_slots(args)) {
            return self->whole_map();
        }
        if (args[0] == "AUTH") {
            return "+OK\r\n";
        }
        // The ASK comes halfway through the call's 3 s (a stall of up to 1.5 s still lets it
        // in): a timeout counted from the resend ends 1.5 s after the call's, time enough for
        // the set-up to end and a held copy to go out.
        std::this_thread::sleep_for(1500ms);
        return fmt::format("-ASK 0 127.0.0.1:{}\r\n", target.address().port);
    });
    self = &source;
    cluster_options o;
    o.seeds = {source.address()};
    o.node.password = "secret"; // a set-up step on every connection
    o.node.command_timeout = 3s;
    o.node.connect_timeout = 5s;
    cluster_client c(executor{ioc.get_executor()}, o);
    ASSERT_TRUE(started_healthy(ioc, c));

    auto [ec, r] = test::run_coro(ioc, c.async_formatted(0, resp({"INCR", "first"})));
    EXPECT_FALSE(set_up) << "the set-up ended before the call";
    call_ended.set_value();
    EXPECT_EQ(ec, errc::redis_timeout) << ec.message() << " " << r.str;
    EXPECT_EQ(c.counters().ask.load(), 1u);

    // The next call is asked there too, once the connection is up: whatever the first one left
    // held there was sent before it, on the same connection.
    auto [ec2, r2] = test::run_coro(ioc, c.async_formatted(0, resp({"INCR", "second"})));
    ASSERT_FALSE(ec2) << ec2.message() << " " << r2.str;
    EXPECT_TRUE(set_up);
    const std::lock_guard lock(mutex);
    EXPECT_EQ(reached, (std::vector<std::string>{"ASKING", "INCR second"}));
}

// Between map reads, at most max_other_nodes nodes outside the map are connected to: an ASK
// naming one more fails the call at once, and the map read it asks for retires the others.
TEST(ClusterClientNodes, AsksToNodesOutsideTheMapAreCapped) {
    test::captured_log log; // declared first: it outlives the client
    net::io_context ioc;
    redirecting_node asking("ASK");
    const auto& nowhere = asking.nowhere;
    auto o = asking.options();
    o.max_other_nodes = 2;
    cluster_client c(executor{ioc.get_executor()}, o);
    ASSERT_TRUE(started_healthy(ioc, c));

    for (std::size_t i = 0; i < nowhere.size(); ++i) {
        auto [ec, r] = test::run_coro(ioc, c.async_formatted(0, resp({"GET", "k"})));
        EXPECT_EQ(ec, errc::redis_unavailable) << ec.message() << " " << r.str;
    }
    EXPECT_EQ(c.counters().ask.load(), nowhere.size());
    EXPECT_EQ(c.node_count(), 1u + o.max_other_nodes);
    EXPECT_EQ(log.lines_with("nodes outside the slot map").size(), 1u) << log.text();

    // Retired at the first map read that finds no ASK named them since the read before.
    const auto unchanged = c.counters().refreshes_unchanged.load();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return c.counters().refreshes_unchanged.load() > unchanged + 1; }, 5s));
    EXPECT_EQ(c.node_count(), 1u);
}

// A MOVED naming a node the worker is not connected to counts with the ASK targets against
// max_other_nodes until a map read answers: one more fails the call at once. Without a cap, a
// node answering MOVED with ever new hosts had the worker connect to each and add it to its map
// as a primary, each MOVED.
TEST(ClusterClientNodes, MovesToNodesOutsideTheMapAreCapped) {
    test::captured_log log; // declared first: it outlives the client
    net::io_context ioc;
    redirecting_node moving("MOVED");
    auto o = moving.options();
    o.max_other_nodes = 2;
    cluster_client c(executor{ioc.get_executor()}, o);
    ASSERT_TRUE(started_healthy(ioc, c));

    // Slot n is moved to the nth port: each call a new node.
    for (std::uint16_t slot = 0; slot < moving.nowhere.size(); ++slot) {
        auto [ec, r] = test::run_coro(ioc, c.async_formatted(slot, resp({"GET", "k"})));
        EXPECT_EQ(ec, errc::redis_unavailable) << ec.message() << " " << r.str;
    }
    EXPECT_EQ(c.counters().moved.load(), moving.nowhere.size());
    EXPECT_EQ(c.node_count(), 1u + o.max_other_nodes);
    EXPECT_EQ(c.map()->primaries.size(), 1u + o.max_other_nodes);
    EXPECT_EQ(c.map()->owner_of(2)->port, moving.node.address().port);
    EXPECT_EQ(log.lines_with("a MOVED named").size(), 1u) << log.text();

    // The map read it asked for gives the map as it was, and the count starts again.
    const auto unchanged = c.counters().refreshes_changed.load();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return c.counters().refreshes_changed.load() > unchanged; }, 5s));
    EXPECT_EQ(c.node_count(), 1u);
    EXPECT_EQ(c.map()->primaries.size(), 1u);
}

// Calls pipelined to one slot are each answered MOVED: the first patches the map, the others
// find it says so already and leave it as it is, where each copied the 16384 slots and rebuilt
// the routes. (Here the second call is on another slot, answered with the first one's MOVED.)
TEST(ClusterClientNodes, AMovedToTheSlotsOwnerLeavesTheMapAsItIs) {
    net::io_context ioc;
    fake_node target([](const std::vector<std::string>&) -> std::string { return "+OK\r\n"; });
    fake_node* self = nullptr;
    fake_node source([&](const std::vector<std::string>& args) -> std::string {
        if (is_cluster_slots(args)) {
            return self->whole_map();
        }
        return fmt::format("-MOVED 0 127.0.0.1:{}\r\n", target.address().port);
    });
    self = &source;
    cluster_client c(executor{ioc.get_executor()}, no_reads_soon(source));
    ASSERT_TRUE(started_healthy(ioc, c));

    auto [ec, r] = test::run_coro(ioc, c.async_formatted(0, resp({"SET", "k", "v"})));
    ASSERT_FALSE(ec) << ec.message() << " " << r.str;
    const auto patched = c.map();
    ASSERT_EQ(patched->owner_of(0)->port, target.address().port);

    auto [ec2, r2] = test::run_coro(ioc, c.async_formatted(1, resp({"SET", "k", "v"})));
    ASSERT_FALSE(ec2) << ec2.message() << " " << r2.str;
    EXPECT_EQ(c.counters().moved.load(), 2u);
    EXPECT_EQ(c.map().get(), patched.get());
}

// A map naming more than max_cluster_primaries primaries is refused as unusable, with a
// warning naming the count and the cap, and the map before it stays in use: it was installed,
// a connection to each of its primaries opened by each worker.
TEST(ClusterClientNodes, AMapNamingTooManyPrimariesIsRefusedAndTheLastOneKept) {
    test::captured_log log; // declared first: it outlives the client
    net::io_context ioc;
    std::atomic<bool> split{false};
    fake_node* self = nullptr;
    fake_node node([&](const std::vector<std::string>& args) -> std::string {
        if (!is_cluster_slots(args)) {
            return "+OK\r\n";
        }
        if (!split) {
            return self->whole_map();
        }
        // One slot each for the first primaries, the rest to the last.
        const auto primaries = max_cluster_primaries + 1;
        std::string map = fmt::format("*{}\r\n", primaries);
        for (std::size_t i = 0; i < primaries; ++i) {
            map += fmt::format("*3\r\n:{}\r\n:{}\r\n*2\r\n$9\r\n127.0.0.1\r\n:{}\r\n",
                               i,
                               i + 1 == primaries ? cluster_slots - 1 : i,
                               20000 + i);
        }
        return map;
    });
    self = &node;
    cluster_options o;
    o.seeds = {node.address()};
    o.refresh_interval = 100ms;
    cluster_client c(executor{ioc.get_executor()}, o);
    ASSERT_TRUE(started_healthy(ioc, c));
    const auto before = c.map();

    split = true;
    const auto failed = c.counters().refreshes_failed.load();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return c.counters().refreshes_failed.load() > failed; }, 5s));
    EXPECT_EQ(c.map().get(), before.get());
    EXPECT_EQ(c.node_count(), 1u);
    EXPECT_TRUE(c.healthy());
    // The map log says it at most once per 10 s, whatever said something before.
    const auto warning = fmt::format("it names {} primaries, more than the {}",
                                     max_cluster_primaries + 1,
                                     max_cluster_primaries);
    EXPECT_TRUE(test::run_until(
        ioc, [&] { return !log.lines_with(warning).empty(); }, 15s))
        << log.text();
    EXPECT_EQ(c.map().get(), before.get());
}

/// A fake node that answers every command `+OK`: a primary a call is redirected to.
struct ok_node {
    fake_node node{[](const std::vector<std::string>&) -> std::string {
        return "+OK\r\n";
    }};

    std::uint16_t port() const { return node.address().port; }
};

// A MOVED rebuilds the routes only; an ASK target keeps its mark until a map read: each MOVED
// cleared it, so that the second MOVED retired the target, and the next ASK there waited for a
// new connection (churn through a reshard that also migrates).
TEST(ClusterClientNodes, AMovedLeavesAnAskTargetConnected) {
    net::io_context ioc;
    ok_node asked;
    ok_node moved_to;
    fake_node* self = nullptr;
    fake_node source([&](const std::vector<std::string>& args) -> std::string {
        if (is_cluster_slots(args)) {
            return self->whole_map();
        }
        if (args[1] == "asked") {
            return fmt::format("-ASK 0 127.0.0.1:{}\r\n", asked.port());
        }
        return fmt::format("-MOVED {} 127.0.0.1:{}\r\n", args[1], moved_to.port());
    });
    self = &source;
    cluster_client c(executor{ioc.get_executor()}, no_reads_soon(source));
    ASSERT_TRUE(started_healthy(ioc, c));

    auto [ec, r] = test::run_coro(ioc, c.async_formatted(0, resp({"GET", "asked"})));
    ASSERT_FALSE(ec) << ec.message() << " " << r.str;
    // Two slots moved, one MOVED each: two patches.
    for (const std::uint16_t slot : {1, 2}) {
        auto [ec2, r2] =
            test::run_coro(ioc, c.async_formatted(slot, resp({"GET", std::to_string(slot)})));
        ASSERT_FALSE(ec2) << ec2.message() << " " << r2.str;
    }
    EXPECT_EQ(c.counters().moved.load(), 2u);
    EXPECT_EQ(c.map()->owner_of(2)->port, moved_to.port());
    EXPECT_EQ(c.node_count(), 3u) << "the source, the ASK's target, the MOVEDs' target";
}

// A primary the last map read retired is stopped, its replies still coming in, and freed at the
// next read: a MOVED freed it at once, and the calls pipelined on it failed as unavailable
// instead of being answered (here, redirected to the new primary).
TEST(ClusterClientNodes, AMovedLeavesARetiredPrimaryToDrain) {
    net::io_context ioc;
    ok_node moved_to;
    std::promise<void> release;
    const std::shared_future<void> released = release.get_future().share();
    std::atomic<bool> held{false};
    fake_node* old_self = nullptr;
    fake_node* new_self = nullptr;
    // The old primary holds "GET held" until the test releases it, then sends it on.
    fake_node old_primary([&](const std::vector<std::string>& args) -> std::string {
        if (is_cluster_slots(args)) {
            return old_self->whole_map();
        }
        held = true;
        released.wait_for(10s); // bounded, should the test end early
        return fmt::format("-MOVED 0 127.0.0.1:{}\r\n", new_self->address().port);
    });
    old_self = &old_primary;
    // The new primary owns every slot, and moves "trigger"'s slot 1 on.
    fake_node new_primary([&](const std::vector<std::string>& args) -> std::string {
        if (is_cluster_slots(args)) {
            return new_self->whole_map();
        }
        if (args[1] == "trigger") {
            return fmt::format("-MOVED 1 127.0.0.1:{}\r\n", moved_to.port());
        }
        return "+OK\r\n";
    });
    new_self = &new_primary;
    cluster_options o;
    o.seeds = {old_primary.address(), new_primary.address()};
    o.node.command_timeout = 5s;
    // The read held behind "GET held" on the old primary gives up soon, and the new one answers
    // it: the old one is retired. The read after it, 2 s later, frees it.
    o.node.connect_timeout = 300ms;
    o.refresh_interval = 2s;
    o.moved_interval = 5s;
    o.trouble_interval = 5s;
    cluster_client c(executor{ioc.get_executor()}, o);
    ASSERT_TRUE(started_healthy(ioc, c));
    ASSERT_EQ(c.map()->owner_of(0)->port, old_primary.address().port);

    std::optional<result> held_result;
    c.async_formatted(0, resp({"GET", "held"}), [&](error_code ec, reply r) {
        held_result.emplace(ec, std::move(r));
    });
    ASSERT_TRUE(test::run_until(
        ioc,
        [&] { return held && c.map()->owner_of(0)->port == new_primary.address().port; },
        10s));
    const auto reads = [&] {
        return c.counters().refreshes_changed.load() + c.counters().refreshes_unchanged.load();
    };
    const auto reads_before = reads();

    auto [ec, r] = test::run_coro(ioc, c.async_formatted(1, resp({"GET", "trigger"})));
    ASSERT_FALSE(ec) << ec.message() << " " << r.str;
    EXPECT_EQ(c.counters().moved.load(), 1u);
    EXPECT_FALSE(held_result) << "the held call ended before its node answered it";

    release.set_value();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return held_result.has_value(); }, 5s));
    const auto& [held_ec, held_reply] = *held_result;
    EXPECT_FALSE(held_ec) << held_ec.message() << " " << held_reply.str;
    EXPECT_EQ(held_reply.str, "OK");
    EXPECT_EQ(c.counters().moved.load(), 2u);
    EXPECT_EQ(reads(), reads_before) << "a map read came in between, and may free the node";
}

} // namespace
} // namespace sluice::redis
