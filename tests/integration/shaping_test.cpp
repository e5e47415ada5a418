// SPDX-License-Identifier: Apache-2.0
// Shaping (mode: shape) end to end, measured where it matters: at the upstream. Every test runs
// on both stores. The page's worked example, a sustained overload, clients that leave while
// held, the held-request cap, max-delay, and the truth of Retry-After and RateLimit.
//
// Timing rules used throughout: while its queue never empties, a leaky bucket releases its k-th
// request at L + k x T (T = 1000 / flowRate ms, L the head's leak time), and timers never fire
// early, so arrivals may be late (scheduling) but never early. L itself is bracketed by the
// client: after the head request was sent, before its response came back.

#include "integration_util.hpp"
#include "support/arrivals.hpp"
#include "support/limited_sluice.hpp"
#include "support/redis_server.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using clock_type = std::chrono::steady_clock;

// An arrival may be this much later than its slot; never earlier, which expect_on_slots checks
// exactly (a release before its slot is the defect these tests exist for). Late: timers and
// threads of a loaded two-core machine, in CI also under sanitizers (5-20x slower), and host
// stalls, which delay every release due during them: one of 1 s was recorded in a full run with
// two sanitizer builds (limits_test.cpp, RateLimit.WorkedExampleShapeModeReleasesFivePerSecond),
// hence that second plus half a second for the scheduling around it. This bound is the
// "never far behind" check, and, on the last arrival, (n - 1) x T after the head, the rate over
// the whole run: a schedule slow by more than 1.5 s over the run fails it. The long runs also
// check that the median arrival is within one slot (expect_on_time_as_a_rule), which a slow
// schedule fails long before and a stall cannot. There is no count per 1-second window: after a
// stall the releases held up by it go together, and the ones behind them at their own slot
// times, so a window can hold more than flowRate + 1 with no release early (7 against 6, in the
// run recorded above).
constexpr auto late_tolerance = 1500ms;
// A rejected request is answered at once. Every rejection in these tests stands for a wait of
// at least 1 s (the shortest: max-delay 1 s), so an answer within 1 s was not held for a slot.
constexpr auto fast_answer = 1000ms;

/// One sample of sluice's /metrics, 0 when absent.
double metric(std::uint16_t admin, std::string_view series) {
    return metric_or_zero(scrape_metrics(admin), series);
}

/// GETs of prefix + i for i in [begin, end), all to `port`: unique targets, so the upstream
/// can tell the requests apart.
std::vector<planned_request>
plan(std::uint16_t port, const std::string& prefix, std::size_t begin, std::size_t end) {
    std::vector<planned_request> requests;
    for (std::size_t i = begin; i < end; ++i) {
        requests.push_back({port, prefix + std::to_string(i)});
    }
    return requests;
}

/// Expects every 429 among `exchanges` fast, with a Retry-After of at least 1.
void expect_fast_rejections(const std::vector<exchange>& exchanges) {
    for (const auto& e : exchanges) {
        if (e.status != 429) {
            continue;
        }
        EXPECT_LT(e.latency(), fast_answer) << e.target;
        const auto value = e.retry_after.value_or("");
        ASSERT_FALSE(value.empty()) << e.target << ": 429 without Retry-After";
        EXPECT_GE(std::stoll(value), 1) << e.target;
    }
}

/// The `t` (seconds until reset) parameter of a RateLimit header.
std::optional<long long> reset_of(const http_response& response) {
    const auto item = parse_sf_item(response.header("RateLimit").value_or(""));
    return item ? item->integer("t") : std::nullopt;
}

/// ceil(ms / 1000) for a duration that may be negative or zero.
long long ceil_seconds(double ms) {
    return static_cast<long long>(std::ceil(ms / 1000.0));
}

/// Sockets in CLOSE-WAIT (the peer closed, we did not) whose local port is `port`: what a
/// server that does not notice its clients leaving accumulates.
std::size_t close_wait_sockets(std::uint16_t port) {
    std::size_t count = 0;
    for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
        std::ifstream in(table);
        std::string line;
        std::getline(in, line); // the column names
        while (std::getline(in, line)) {
            // "  sl  local_address rem_address   st ...": the local port is the hex after ':'.
            std::istringstream fields(line);
            std::string slot, local, remote, state;
            fields >> slot >> local >> remote >> state;
            const auto colon = local.rfind(':');
            if (colon == std::string::npos || state != "08") { // 08: TCP_CLOSE_WAIT
                continue;
            }
            if (std::stoul(local.substr(colon + 1), nullptr, 16) == port) {
                ++count;
            }
        }
    }
    return count;
}

/// The test name suffix: the parameter itself ("memory", "open", ...).
std::string param_name(const testing::TestParamInfo<std::string>& param) {
    return param.param;
}

/// Parametrized by the store: "memory" or "redis".
class ShapingTest : public testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        if (GetParam() == "redis") {
            if (!redis_server::available()) {
                GTEST_SKIP() << "redis-server is not installed";
            }
            redis_ = std::make_unique<redis_server>();
        }
    }

    limited_config config(std::int64_t capacity, double flow_rate) const {
        limited_config c;
        c.upstream_url = upstream_.url();
        c.store = GetParam();
        c.redis_port = redis_ ? redis_->port() : 0;
        c.capacity = capacity;
        c.flow_rate = flow_rate;
        c.mode = "shape";
        return c;
    }

    /// Starts sluice and waits until it can decide: with Redis (failure-mode closed), /readyz
    /// answers 200 once every worker is connected. Sets `admin_`.
    std::unique_ptr<sluice_process> start(const limited_config& c) {
        auto sluice = std::make_unique<sluice_process>(c.yaml());
        admin_ = admin_port(*sluice);
        const auto admin = admin_;
        EXPECT_TRUE(eventually([admin] { return get(admin, "/readyz").status == 200; }, 10s))
            << sluice->log_text();
        return sluice;
    }

    /// Sends a request that goes at once, then one that is held (with a slot far longer than the
    /// test, it stays held), and waits until it is; returns the held one's connection.
    std::unique_ptr<http_connection> head_then_held(std::uint16_t port, const std::string& path) {
        http_connection head(port);
        head.send("GET", path + "?who=head");
        EXPECT_EQ(head.read_response().status, 200u);
        auto held = std::make_unique<http_connection>(port);
        held->send("GET", path + "?who=held");
        EXPECT_TRUE(eventually([&] { return metric(admin_, "sluice_held_requests") == 1; }, 5s));
        return held;
    }

    /// A held request whose client leaves (`leave` ends its connection) is counted abandoned and
    /// never forwarded; a later request goes after the slot it had.
    /// With `body`, the leaver's request is a POST with a body of that many bytes, sent whole
    /// with its header.
    void expect_abandoned_hold_never_forwarded(const std::function<void(http_connection&)>& leave,
                                               std::size_t body = 0) {
        // One slot per second: the abandoned request's slot opens 1 s after the head's.
        const auto sluice = start(config(5, 1));

        http_connection head(sluice->port());
        head.send("GET", "/abandon?who=head");
        EXPECT_EQ(head.read_response().status, 200u);

        http_connection leaver(sluice->port());
        if (body == 0) {
            leaver.send("GET", "/abandon?who=leaver");
        } else {
            leaver.send_raw(format_request("POST",
                                           "/abandon?who=leaver",
                                           {{"Content-Length", std::to_string(body)}}) +
                            std::string(body, 'b'));
        }
        ASSERT_TRUE(eventually([&] { return metric(admin_, "sluice_held_requests") == 1; }, 5s))
            << "the second request was not held";
        leave(leaver); // the client goes away while held
        ASSERT_TRUE(
            eventually([&] { return metric(admin_, "sluice_held_abandoned_total") >= 1; }, 5s));
        EXPECT_TRUE(eventually([&] { return metric(admin_, "sluice_held_requests") == 0; }, 5s));

        // A later request queues behind the abandoned one's slot (abandoning does not refund it),
        // so once it arrives the abandoned slot has long passed.
        http_connection after(sluice->port());
        after.send("GET", "/abandon?who=after");
        EXPECT_EQ(after.read_response().status, 200u);
        ASSERT_TRUE(upstream_.wait_quiet(5s));
        const auto by_target = arrivals_by_target(upstream_);
        EXPECT_EQ(by_target.count("/abandon?who=leaver"), 0u)
            << "an abandoned request was forwarded";
        EXPECT_EQ(by_target.count("/abandon?who=head"), 1u);
        EXPECT_EQ(by_target.count("/abandon?who=after"), 1u);
        EXPECT_EQ(metric(admin_, "sluice_held_abandoned_total"), 1);
        EXPECT_EQ(metric(admin_, "sluice_held_requests"), 0);
    }

    std::unique_ptr<redis_server> redis_;
    recording_upstream upstream_;
    std::uint16_t admin_ = 0;
};

// The page's worked example at the upstream: 30 at t=0 all admitted and released over ~6 s at
// 5 per second; 50 more right after: 20 held (then 200), 30 rejected at once.
TEST_P(ShapingTest, WorkedExampleMeasuredAtUpstream) {
    const auto sluice = start(config(50, 5));
    constexpr auto slot = 200ms;

    request_burst first(plan(sluice->port(), "/work?n=", 0, 30));
    request_burst second(plan(sluice->port(), "/work?n=", 30, 80));
    const auto t0 = first.fire();
    // "Right after" the 30 are in the queue: once sluice has decided all of them.
    ASSERT_TRUE(eventually([&] { return decided_requests(admin_) >= 30; }, 10s));
    second.fire();
    ASSERT_TRUE(eventually([&] { return decided_requests(admin_) >= 80; }, 10s));
    const auto all_decided = clock_type::now();
    const auto r1 = first.collect();
    const auto r2 = second.collect();

    EXPECT_EQ(count_status(r1, 200), 30);
    // Every decision lies in [t0, all_decided]: at most that many slots leaked meanwhile, so
    // exactly 20 are admitted when it took under 200 ms.
    const auto admitted = count_status(r2, 200);
    EXPECT_GE(admitted, 20);
    EXPECT_LE(admitted, 20 + slots_in(all_decided - t0, slot));
    EXPECT_EQ(admitted + count_status(r2, 429), 50);
    expect_fast_rejections(r2);

    const auto forwarded = static_cast<std::size_t>(30 + admitted);
    ASSERT_TRUE(upstream_.wait_for_count(forwarded, 20s));
    ASSERT_TRUE(upstream_.wait_quiet(5s));
    ASSERT_EQ(upstream_.requests().size(), forwarded);
    const auto arrivals = sorted_arrivals(upstream_);
    // The head goes at once; the 30th leaves at 29 x 200 ms = 5.8 s; then the second burst's.
    EXPECT_LT(arrivals.front() - t0, late_tolerance);
    expect_on_slots(arrivals, slot, t0, first_received(r1), late_tolerance);
    // 50 arrivals: a release schedule more than ~4% slow fails this (arrivals.hpp).
    expect_on_time_as_a_rule(arrivals, slot);
    // The first burst owns the first 30 slots.
    const auto by_target = arrivals_by_target(upstream_);
    auto last_first = clock_type::time_point::min();
    auto first_second = clock_type::time_point::max();
    for (const auto& [target, at] : by_target) {
        if (std::stoi(target.substr(target.find('=') + 1)) < 30) {
            last_first = std::max(last_first, at);
        } else {
            first_second = std::min(first_second, at);
        }
    }
    EXPECT_LT(last_first, first_second);
    RecordProperty(
        "decided_ms",
        static_cast<int>(std::chrono::duration_cast<milliseconds>(all_decided - t0).count()));
}

// Three times flowRate for 10 s, one connection per request: the upstream sees every admitted
// request on its own slot, never before it, so the long-run rate is flowRate. flowRate 5 rather
// than 10: a 200 ms slot leaves the median check (expect_on_time_as_a_rule, under one slot) room
// for 200 ms of release jitter (a loaded two-core machine has shown 110 ms).
TEST_P(ShapingTest, SustainedOverloadDrainsAtFlowRate) {
    constexpr std::int64_t capacity = 5;
    constexpr double flow_rate = 5;
    constexpr auto slot = 200ms;
    constexpr int total = 150;
    constexpr auto period = 66ms;
    // A thread's requests are threads x period = 1.32 s apart, longer than the longest hold
    // (capacity - 1 slots = 800 ms), so no thread falls behind its schedule.
    constexpr int threads = 20;
    const auto sluice = start(config(capacity, flow_rate));

    std::vector<exchange> results(total);
    const auto begin = clock_type::now() + 50ms;
    std::vector<std::thread> clients;
    for (int j = 0; j < threads; ++j) {
        clients.emplace_back([&, j] {
            for (int k = j; k < total; k += threads) {
                auto& e = results[static_cast<std::size_t>(k)];
                e.target = "/sustained?n=" + std::to_string(k);
                // Pacing to a schedule, not waiting for an outcome.
                std::this_thread::sleep_until(begin + period * k);
                e.sent = clock_type::now();
                try {
                    http_connection connection(sluice->port(), 10s);
                    connection.send("GET", e.target);
                    const auto response = connection.read_response();
                    e.received = response.received;
                    e.status = response.status;
                } catch (const std::exception& error) {
                    e.received = clock_type::now();
                    e.error = error.what();
                }
            }
        });
    }
    for (auto& c : clients) {
        c.join();
    }

    long long admitted = 0;
    long long other = 0;
    auto earliest_sent = results.front().sent;
    auto earliest_answer = results.front().received;
    auto latest_answer = earliest_answer;
    for (const auto& e : results) {
        admitted += e.status == 200 ? 1 : 0;
        other += (e.status == 200 || e.status == 429) ? 0 : 1;
        earliest_sent = std::min(earliest_sent, e.sent);
        earliest_answer = std::min(earliest_answer, e.received);
        latest_answer = std::max(latest_answer, e.received);
    }
    EXPECT_EQ(other, 0);
    ASSERT_TRUE(upstream_.wait_quiet(5s));
    const auto arrivals = sorted_arrivals(upstream_);
    ASSERT_EQ(static_cast<long long>(arrivals.size()), admitted);
    ASSERT_GE(arrivals.size(), 2u);

    // The queue never empties (a request every 66 ms against one slot every 200 ms), so the
    // admitted requests leave on consecutive slots from the head's: the long-run rate is
    // flowRate, the last one (admitted - 1) x T after the head. The head was released after the
    // earliest request was sent and before the earliest answer came back.
    expect_on_slots(arrivals, slot, earliest_sent, earliest_answer, late_tolerance);
    // About 55 arrivals over 11 s: a release schedule more than ~4% slow fails this.
    expect_on_time_as_a_rule(arrivals, slot);
    // How many: capacity at once, then one per slot leaked. Decisions lie in [first send, last
    // answer]; the bucket is saturated from the first answer to the last send, and every slot
    // leaked then is refilled within 66 ms (less the one in progress at each end).
    const auto first_sent = begin;
    const auto last_sent = begin + period * (total - 1);
    const double most_s = std::chrono::duration<double>(latest_answer - first_sent).count();
    const double saturated_s = std::chrono::duration<double>(last_sent - earliest_answer).count();
    EXPECT_LE(admitted, capacity + static_cast<long long>(std::floor(most_s * flow_rate)) + 1);
    EXPECT_GE(admitted, capacity + static_cast<long long>(std::floor(saturated_s * flow_rate)) - 2);
    RecordProperty("admitted", static_cast<int>(admitted));
}

// A client that leaves while held is never forwarded; the metrics say so.
TEST_P(ShapingTest, AbandonedHeldRequestIsNeverForwarded) {
    expect_abandoned_hold_never_forwarded([](http_connection& c) { c.stream().close(); });
}

// A held request reads ahead a body of up to 16 KiB whole, and then its client's close: one that
// stopped reading at 16 KiB left that close unread, and forwarded the request of a client gone.
TEST_P(ShapingTest, AHeldRequestsClientThatSent16KiBAndLeftIsNeverForwarded) {
    expect_abandoned_hold_never_forwarded([](http_connection& c) { c.stream().close(); },
                                          16 * 1024);
}

// A reset (a client killed, or closing with SO_LINGER 0) rather than a FIN: the reset is an
// error on the socket, no end of stream, and TCP_INQ does not count it (drained_read.hpp).
TEST_P(ShapingTest, HeldRequestOfAClientThatResetsIsNeverForwarded) {
    expect_abandoned_hold_never_forwarded([](http_connection& c) { c.stream().reset(); });
}

// Each client sends its request and resets at once, once sluice is reading its connection: the
// bytes and the reset then often come in one event, and the read that takes the bytes hears
// nothing is left behind them and no event follows (drained_read.hpp). A held request's watch
// must still find the reset; a read queued in the reactor waited for the hold's end, then the
// request went upstream (13 of 24 requests in six runs of this test against the build before).
TEST_P(ShapingTest, HeldRequestSentWithAResetIsNeverForwarded) {
    const auto sluice = start(config(5, 1)); // one slot per second
    http_connection head(sluice->port());
    head.send("GET", "/reset?who=head");
    EXPECT_EQ(head.read_response().status, 200u);

    constexpr int leavers = 4; // within the bucket: a fifth would be refused, not held
    for (int i = 0; i < leavers; ++i) {
        const auto accepted_before = metric(admin_, "sluice_connections_total");
        http_connection leaver(sluice->port());
        ASSERT_TRUE(eventually(
            [&] { return metric(admin_, "sluice_connections_total") == accepted_before + 1; }, 5s));
        leaver.send_raw(format_request("GET", "/reset?who=leaver" + std::to_string(i)));
        leaver.stream().reset();
    }
    // Each was read and held (the slots are 1 s apart), then found gone: none is left held.
    EXPECT_TRUE(
        eventually([&] { return metric(admin_, "sluice_held_abandoned_total") == leavers; }, 5s))
        << metric(admin_, "sluice_held_abandoned_total") << " of " << leavers << " abandoned";
    EXPECT_EQ(metric(admin_, "sluice_held_requests"), 0);
    ASSERT_TRUE(upstream_.wait_quiet(1s));
    const auto by_target = arrivals_by_target(upstream_);
    for (int i = 0; i < leavers; ++i) {
        EXPECT_EQ(by_target.count("/reset?who=leaver" + std::to_string(i)), 0u)
            << "the request of a client that reset was forwarded";
    }
}

// rate-limit.max-held: 3. Of 7 concurrent requests one goes at once, 6 need holds: 3 are held,
// the other 3 get 503 with Retry-After, counted as overflow. A request counts among the held
// from just before the store decides it (so that the cap is checked before anything is charged):
// the head, which goes at once, may still count while others are decided (on Redis, or on
// another worker), so one more may overflow.
TEST_P(ShapingTest, HeldCapAnswers503WithRetryAfter) {
    auto c = config(10, 2); // one slot every 500 ms
    c.max_held = 3;
    const auto sluice = start(c);
    constexpr auto slot = 500ms;

    request_burst burst(plan(sluice->port(), "/cap?n=", 0, 7));
    const auto t0 = burst.fire();
    ASSERT_TRUE(eventually([&] { return decided_requests(admin_) >= 7; }, 10s));
    const auto all_decided = clock_type::now();
    const auto results = burst.collect();

    // The first hold ends one slot after the head left; until then nothing frees a hold. So
    // when the burst was decided within one slot, exactly 3 overflow; each slot that passed
    // first may have let one more be held.
    const auto refused = count_status(results, 503);
    EXPECT_LE(refused, 4);
    EXPECT_GE(refused, 3 - slots_in(all_decided - t0, slot));
    EXPECT_EQ(count_status(results, 200) + refused, 7);
    for (const auto& e : results) {
        if (e.status == 503) {
            EXPECT_LT(e.latency(), fast_answer) << e.target;
            const auto value = e.retry_after.value_or("");
            ASSERT_FALSE(value.empty()) << e.target << ": 503 without Retry-After";
            EXPECT_GE(std::stoll(value), 1);
        }
    }
    EXPECT_EQ(metric(admin_, "sluice_held_overflow_total"), static_cast<double>(refused));
    // The refused never reached the upstream; the others all did.
    ASSERT_TRUE(upstream_.wait_quiet(5s));
    const auto by_target = arrivals_by_target(upstream_);
    for (const auto& e : results) {
        EXPECT_EQ(by_target.count(e.target), e.status == 200 ? 1u : 0u) << e.target;
    }
}

// Clients that leave while held are never forwarded, even when their hold outlasts
// server.header-timeout (issue 11, item 11: the header deadline used to cancel the watch on the
// client, and the cancellation counted as "still there"). 100 requests on one key at
// flowRate 10: one goes at once, 99 are held; request k leaves at k x 100 ms after the first. Once
// every hold is older than the 1 s header timeout, the clients of the last 35 (slots 6.5 s and
// later) close: the upstream gets only the 65 others, all 35 count as abandoned, and sluice closes
// its side of each at once (no socket left in CLOSE-WAIT).
TEST_P(ShapingTest, ClientsLeavingLongHoldsAreNotForwarded) {
    constexpr std::size_t total = 100;
    constexpr std::size_t leavers = 35;
    constexpr std::size_t stayers = total - leavers;
    constexpr auto header_timeout = 1000ms;
    constexpr auto slot = 100ms;
    auto c = config(100, 10);
    c.header_timeout = "1s";
    const auto sluice = start(c);

    std::vector<std::unique_ptr<http_connection>> clients;
    for (std::size_t i = 0; i < total; ++i) {
        clients.push_back(std::make_unique<http_connection>(sluice->port()));
    }
    const auto t0 = clock_type::now();
    // One at a time, each decided before the next is sent, so that request k has slot k: sent
    // all at once, the requests of different workers reach the store in batches of their own,
    // and a "leaver" could get an early slot and rightly be forwarded before it leaves.
    for (std::size_t i = 0; i < total; ++i) {
        clients[i]->send("GET", "/leave?n=" + std::to_string(i));
        ASSERT_TRUE(eventually([&] { return decided_requests(admin_) >= double(i + 1); }, 10s))
            << "request " << i;
    }
    // Every header was read before it was decided: once its timeout has passed since then
    // (plus time for the deadline's timer to run), every hold is older than header-timeout.
    std::this_thread::sleep_for(header_timeout + 500ms);
    for (std::size_t i = stayers; i < total; ++i) {
        clients[i].reset();
    }
    // The first leaver's slot is stayers x T after the head left (after t0): the test means
    // something only if they all left before it.
    ASSERT_LT(clock_type::now() - t0, stayers * slot)
        << "the machine was too slow to leave in time";

    EXPECT_TRUE(
        eventually([&] { return metric(admin_, "sluice_held_abandoned_total") == leavers; }, 5s));
    EXPECT_TRUE(eventually([&] { return close_wait_sockets(sluice->port()) == 0; }, 2s))
        << close_wait_sockets(sluice->port()) << " sockets in CLOSE-WAIT";
    for (std::size_t i = 0; i < stayers; ++i) {
        EXPECT_EQ(clients[i]->read_response().status, 200u) << i;
    }
    ASSERT_TRUE(upstream_.wait_quiet(5s));
    const auto by_target = arrivals_by_target(upstream_);
    EXPECT_EQ(upstream_.requests().size(), stayers);
    for (std::size_t i = stayers; i < total; ++i) {
        EXPECT_EQ(by_target.count("/leave?n=" + std::to_string(i)), 0u) << "leaver " << i;
    }
    EXPECT_EQ(metric(admin_, "sluice_held_abandoned_total"), static_cast<double>(leavers));
    EXPECT_EQ(metric(admin_, "sluice_held_requests"), 0);
}

// A request refused for rate-limit.max-held is charged nothing (issue 11, item 6). Capacity 3,
// one slot per 10 s (nothing leaks during the test), max-held 1: the head goes at once (q = 1),
// the second is held (q = 2), and every later one would need a hold: each gets 503 with the
// uncharged bucket's RateLimit (r = 1), none fills the bucket into 429s, and once the held
// client leaves the next request is held, not refused.
TEST_P(ShapingTest, HeldCapRefusalChargesNothing) {
    auto c = config(3, 0.1);
    c.max_held = 1;
    const auto sluice = start(c);

    auto held = head_then_held(sluice->port(), "/uncharged");
    ASSERT_FALSE(HasFailure());

    http_connection refused(sluice->port());
    for (int i = 0; i < 5; ++i) {
        refused.send("GET", "/uncharged?who=refused");
        const auto response = refused.read_response();
        EXPECT_EQ(response.status, 503u) << "refusal " << i;
        EXPECT_EQ(remaining_of(response), 1) << "refusal " << i << " was charged";
        EXPECT_TRUE(response.header("Retry-After").has_value());
    }
    EXPECT_EQ(metric(admin_, "sluice_held_overflow_total"), 5);

    held.reset(); // its place stays taken (q = 2): abandoning refunds nothing
    ASSERT_TRUE(eventually([&] { return metric(admin_, "sluice_held_requests") == 0; }, 5s));
    http_connection next(sluice->port());
    next.send("GET", "/uncharged?who=next");
    EXPECT_TRUE(eventually([&] { return metric(admin_, "sluice_held_requests") == 1; }, 5s))
        << "the bucket was charged by the refusals";
}

// max-held refusals are a peer-triggered warning: 999 of them log a bounded number of lines
// (log_throttle: one per second, each counting those held back), not 999 (issue 11, item 20).
TEST_P(ShapingTest, HeldCapWarningIsThrottled) {
    auto c = config(3, 0.1);
    c.max_held = 1;
    const auto sluice = start(c);

    const auto held = head_then_held(sluice->port(), "/quiet");
    ASSERT_FALSE(HasFailure());

    const auto begin = clock_type::now();
    http_connection refused(sluice->port());
    constexpr int refusals = 999;
    for (int i = 0; i < refusals; ++i) {
        refused.send("GET", "/quiet?who=refused");
        ASSERT_EQ(refused.read_response().status, 503u) << "refusal " << i;
    }
    const auto seconds = std::chrono::duration_cast<milliseconds>(clock_type::now() - begin);
    ASSERT_TRUE(
        eventually([&] { return sluice->log_text().find("max-held") != std::string::npos; }, 5s));
    const auto text = sluice->log_text();
    std::size_t lines = 0;
    for (auto at = text.find("max-held"); at != std::string::npos;
         at = text.find("max-held", at + 1)) {
        ++lines;
    }
    // One line per started second of refusals (the first is written at once).
    EXPECT_LE(lines, static_cast<std::size_t>(seconds.count() / 1000 + 1)) << text;
    EXPECT_EQ(metric(admin_, "sluice_held_overflow_total"), refusals);
}

// max-delay: 1s with flowRate 5: a wait of more than 1 s is refused at once. Waits are 0, 200,
// ..., 1000 ms for the first 6; the 7th would wait 1200 ms.
TEST_P(ShapingTest, MaxDelayRejectsLongWaitsAtOnce) {
    auto c = config(50, 5);
    c.max_delay = "1s";
    const auto sluice = start(c);
    constexpr auto slot = 200ms;
    constexpr auto max_delay = 1000ms;

    request_burst burst(plan(sluice->port(), "/patience?n=", 0, 12));
    const auto t0 = burst.fire();
    ASSERT_TRUE(eventually([&] { return decided_requests(admin_) >= 12; }, 10s));
    const auto all_decided = clock_type::now();
    const auto results = burst.collect();

    const auto admitted = count_status(results, 200);
    EXPECT_GE(admitted, 6);
    EXPECT_LE(admitted, 6 + slots_in(all_decided - t0, slot));
    EXPECT_EQ(admitted + count_status(results, 429), 12);
    expect_fast_rejections(results);
    for (const auto& e : results) {
        if (e.status == 429) {
            // The wait exceeds max-delay by 200 ms less what passed: Retry-After is
            // ceil(0.2 s) = 1, with the 1 s tolerance.
            EXPECT_LE(std::stoll(e.retry_after.value_or("0")), 2) << e.target;
        } else if (e.status == 200) {
            // Admitted requests wait at most max-delay (plus scheduling).
            EXPECT_LE(e.latency(), max_delay + late_tolerance) << e.target;
        }
    }
}

// Retry-After = ceil(time until the next slot frees) and RateLimit r/t = capacity - q and
// ceil(time until the queue is empty), in police mode and in shape mode. With T = 4 s and a
// rejection ~2.5 s after the head's leak time L, the math says Retry-After 2.
//
// The decision times are bracketed by the client's clock: L lies in [s1, r1] (first request
// sent, answered), the rejection's decision in [s3, r3]. So e = decision - L lies in
// [s3 - r1, r3 - s1] (widened by 2 ms for the stores' whole-ms clocks), and each header must
// lie between the values the math gives at the two ends.
struct bracket {
    double e_min_ms = 0;
    double e_max_ms = 0;

    /// The range of ceil((base - e) / 1000) over e in [e_min, e_max], at least `floor_value`.
    std::pair<long long, long long> seconds(double base_ms, long long floor_value) const {
        return {std::max(floor_value, ceil_seconds(base_ms - e_max_ms)),
                std::max(floor_value, ceil_seconds(base_ms - e_min_ms))};
    }
};

bracket make_bracket(clock_type::time_point s1,
                     clock_type::time_point r1,
                     clock_type::time_point s3,
                     clock_type::time_point r3) {
    const auto ms = [](clock_type::duration d) {
        return std::chrono::duration<double, std::milli>(d).count();
    };
    return {ms(s3 - r1) - 2, ms(r3 - s1) + 2};
}

void expect_truthful_rejection(const http_response& rejected,
                               const bracket& b,
                               double slot_ms,
                               std::int64_t queued) {
    ASSERT_EQ(rejected.status, 429u);
    const auto retry_after = std::stoll(rejected.header("Retry-After").value_or("0"));
    const auto [ra_low, ra_high] = b.seconds(slot_ms, 1);
    EXPECT_GE(retry_after, ra_low);
    EXPECT_LE(retry_after, ra_high);
    EXPECT_EQ(remaining_of(rejected), 0);
    const auto [t_low, t_high] = b.seconds(static_cast<double>(queued) * slot_ms, 0);
    const auto reset = reset_of(rejected);
    ASSERT_TRUE(reset) << rejected.header("RateLimit").value_or("<none>");
    EXPECT_GE(*reset, t_low);
    EXPECT_LE(*reset, t_high);
    testing::Test::RecordProperty("retry_after", static_cast<int>(retry_after));
}

TEST_P(ShapingTest, RetryAfterAndRateLimitTruthfulPolice) {
    auto c = config(2, 0.25); // T = 4 s
    c.mode = "police";
    const auto sluice = start(c);
    constexpr double slot_ms = 4000;

    const auto s1 = clock_type::now();
    const auto first = get(sluice->port(), "/truth");
    const auto r1 = clock_type::now();
    EXPECT_EQ(first.status, 200u);
    EXPECT_EQ(remaining_of(first), 1);
    EXPECT_EQ(reset_of(first), 4); // one queued: empty at L + T
    const auto second = get(sluice->port(), "/truth");
    EXPECT_EQ(second.status, 200u);
    EXPECT_EQ(remaining_of(second), 0);

    std::this_thread::sleep_until(r1 + 2500ms); // pacing: the rejection's place in the slot
    const auto s3 = clock_type::now();
    const auto rejected = get(sluice->port(), "/truth");
    const auto r3 = clock_type::now();
    expect_truthful_rejection(rejected, make_bracket(s1, r1, s3, r3), slot_ms, 2);
}

TEST_P(ShapingTest, RetryAfterAndRateLimitTruthfulShape) {
    const auto sluice = start(config(3, 0.25)); // T = 4 s
    constexpr double slot_ms = 4000;

    const auto s1 = clock_type::now();
    http_connection head(sluice->port());
    head.send("GET", "/truth");
    const auto first = head.read_response();
    const auto r1 = clock_type::now();
    EXPECT_EQ(first.status, 200u);
    EXPECT_EQ(remaining_of(first), 2);
    // Two more fill the queue; they are held (4 s and 8 s) and abandoned at the end.
    http_connection held_a(sluice->port());
    http_connection held_b(sluice->port());
    held_a.send("GET", "/truth?held=a");
    held_b.send("GET", "/truth?held=b");
    ASSERT_TRUE(eventually([&] { return metric(admin_, "sluice_held_requests") == 2; }, 2s));

    std::this_thread::sleep_until(r1 + 2500ms); // pacing: the rejection's place in the slot
    const auto s3 = clock_type::now();
    const auto rejected = get(sluice->port(), "/truth");
    const auto r3 = clock_type::now();
    expect_truthful_rejection(rejected, make_bracket(s1, r1, s3, r3), slot_ms, 3);

    // held_a leaves its hold at L + T with the queue empty at L + 2T: its RateLimit states the
    // T left then (4 s, at most 5 with the coarse clock's few ms), not the 2T it was decided
    // with (8 s, or 7). At least what is left when its answer arrives.
    const auto released = held_a.read_response();
    const auto ra = clock_type::now();
    EXPECT_EQ(released.status, 200u);
    const auto held_reset = reset_of(released);
    ASSERT_TRUE(held_reset) << released.header("RateLimit").value_or("<none>");
    EXPECT_LE(*held_reset, 5);
    const auto ms = [](clock_type::duration d) {
        return std::chrono::duration<double, std::milli>(d).count();
    };
    EXPECT_GE(*held_reset, ceil_seconds(ms(s1 - ra) + 2 * slot_ms - 10));
}

INSTANTIATE_TEST_SUITE_P(Stores, ShapingTest, testing::Values("memory", "redis"), param_name);

// A drain (SIGTERM) answers 503 at once to the held requests whose slots fall after its
// deadline, where they were cut off unanswered when the deadline stopped the worker, and forwards
// the others at their slots. One slot every 2 s, drain-timeout 5 s: a head, three GETs held to
// L + 2 s, L + 4 s, L + 6 s (L: the head's leak, between the burst's first write and its first
// answer), then a POST held to L + 8 s whose body is more than a hold reads ahead, so that it
// sleeps out its hold on a timer rather than watching its client: the drain must wake that too.
// A slot at or before the deadline is forwarded, one after it is answered 503; the deadline is
// 5 s after sluice took the signal, which the test sends as soon as all four are held: 1 s from
// the nearest boundary (a slot at the deadline) while that takes under a second.
TEST_P(ShapingTest, ADrainAnswersHoldsThatOutlastItWith503) {
    auto c = config(20, 0.5);
    c.drain_timeout = "5s";
    c.access_log = true;
    const auto sluice = start(c);
    constexpr auto slot = 2000ms;
    constexpr auto drain_timeout = 5000ms;
    constexpr std::size_t held_gets = 3;

    request_burst burst(plan(sluice->port(), "/drain?n=", 0, held_gets + 1));
    const auto t0 = burst.fire();
    ASSERT_TRUE(
        eventually([&] { return metric(admin_, "sluice_held_requests") == held_gets; }, 10s));
    http_connection post(sluice->port(), 20s);
    post.send("POST", "/drain?n=post", {}, std::string(100 * 1024, 'x'));
    ASSERT_TRUE(
        eventually([&] { return metric(admin_, "sluice_held_requests") == held_gets + 1; }, 10s));
    const auto stopping = clock_type::now();
    sluice->send_signal(SIGTERM);
    error_code post_ec;
    const auto post_answer = post.try_read_response(post_ec);
    const auto results = burst.collect();
    const auto status = sluice->wait_exit(10s);
    ASSERT_TRUE(status.has_value()) << sluice->log_text();
    EXPECT_EQ(*status, 0);

    ASSERT_TRUE(post_answer.has_value()) << "the POST got no answer: " << post_ec.message();
    const auto& posted = *post_answer;
    EXPECT_EQ(posted.status, 503u);
    EXPECT_LT(posted.received - stopping, fast_answer) << "the sleeping hold was not woken";
    EXPECT_EQ(posted.header("Connection").value_or(""), "close");
    auto first_refusal = posted.received;
    for (const auto& e : results) {
        ASSERT_TRUE(e.status == 200 || e.status == 503)
            << e.target << ": " << e.status << " " << e.error;
        if (e.status == 503) {
            first_refusal = std::min(first_refusal, e.received);
            EXPECT_LT(e.received - stopping, fast_answer) << e.target << ": not answered at once";
            const auto value = e.retry_after.value_or("");
            ASSERT_FALSE(value.empty()) << e.target << ": 503 without Retry-After";
            // The hold it had left: at most the last GET's slot.
            EXPECT_GE(std::stoll(value), 1) << e.target;
            EXPECT_LE(std::stoll(value), static_cast<long long>(held_gets) * 2) << e.target;
        }
    }
    // GET k is surely forwarded when even the latest head (L at the first answer) puts its slot
    // at or before the earliest deadline, and surely refused when even the earliest head (L at
    // the first write) puts it after the latest deadline (no later than the first 503 came).
    const auto head_latest = first_received(results);
    const auto deadline_earliest = stopping + drain_timeout;
    const auto deadline_latest = first_refusal + drain_timeout;
    long long surely_forwarded = 0;
    long long maybe_forwarded = 0;
    for (std::size_t k = 1; k <= held_gets; ++k) {
        surely_forwarded += head_latest + k * slot <= deadline_earliest ? 1 : 0;
        maybe_forwarded += t0 + k * slot <= deadline_latest ? 1 : 0;
    }
    const auto forwarded = count_status(results, 200) - 1;
    EXPECT_GE(forwarded, surely_forwarded);
    EXPECT_LE(forwarded, maybe_forwarded);

    // What was answered 200 reached the upstream; what was answered 503 never did.
    ASSERT_TRUE(upstream_.wait_quiet(2s));
    const auto by_target = arrivals_by_target(upstream_);
    EXPECT_EQ(by_target.count("/drain?n=post"), 0u);
    for (const auto& e : results) {
        EXPECT_EQ(by_target.count(e.target), e.status == 200 ? 1u : 0u) << e.target;
    }
    const auto text = sluice->log_text();
    EXPECT_NE(text.find("requests answered 503 because their wait outlasts the drain"),
              std::string::npos)
        << text;
    // One access line each, with the decision that says why.
    long long drained_lines = 0;
    const std::string drained = "decision=drained status=503";
    for (auto at = text.find(drained); at != std::string::npos; at = text.find(drained, at + 1)) {
        ++drained_lines;
    }
    EXPECT_EQ(drained_lines, count_status(results, 503) + 1) << text;
}

// Two instances on one Redis shape one key on one timeline: together they release at flowRate.
TEST(ShapingTwoInstances, ShareOneTimelineOnRedis) {
    if (!redis_server::available()) {
        GTEST_SKIP() << "redis-server is not installed";
    }
    redis_server redis;
    recording_upstream upstream;
    constexpr std::int64_t capacity = 10;
    constexpr double flow_rate = 5;
    constexpr auto slot = 200ms;
    limited_config c;
    c.upstream_url = upstream.url();
    c.store = "redis";
    c.redis_port = redis.port();
    c.capacity = capacity;
    c.flow_rate = flow_rate;
    sluice_process a(c.yaml());
    sluice_process b(c.yaml());
    const auto admin_a = admin_port(a);
    const auto admin_b = admin_port(b);
    for (const auto admin : {admin_a, admin_b}) {
        ASSERT_TRUE(eventually([admin] { return get(admin, "/readyz").status == 200; }, 10s));
    }

    // 8 requests to each, interleaved, all at once: one bucket admits 10 of the 16.
    std::vector<planned_request> requests;
    for (int i = 0; i < 8; ++i) {
        requests.push_back({a.port(), "/two?a=" + std::to_string(i)});
        requests.push_back({b.port(), "/two?b=" + std::to_string(i)});
    }
    request_burst burst(requests);
    const auto t0 = burst.fire();
    ASSERT_TRUE(eventually(
        [&] { return decided_requests(admin_a) + decided_requests(admin_b) >= 16; }, 10s));
    const auto all_decided = clock_type::now();
    const auto results = burst.collect();

    const auto admitted = count_status(results, 200);
    EXPECT_GE(admitted, capacity);
    EXPECT_LE(admitted, capacity + slots_in(all_decided - t0, slot));
    EXPECT_EQ(admitted + count_status(results, 429), 16);
    expect_fast_rejections(results);

    ASSERT_TRUE(upstream.wait_for_count(static_cast<std::size_t>(admitted), 10s));
    ASSERT_TRUE(upstream.wait_quiet(5s));
    const auto arrivals = sorted_arrivals(upstream);
    ASSERT_EQ(static_cast<long long>(arrivals.size()), admitted);
    // One timeline: consecutive slots across both instances, from the head's. Two timelines
    // (each instance its own bucket) would release two requests per slot, half of them a slot
    // or more early: the exact lower bound fails them. Not expect_on_time_as_a_rule: with 10
    // arrivals over 1.8 s, run here also against a ThreadSanitizer sluice, a stall of under a
    // second would delay half of them; what this test guards is the sharing, not the pace.
    expect_on_slots(arrivals, slot, t0, first_received(results), late_tolerance);
    // Both instances released some of them.
    const auto by_target = arrivals_by_target(upstream);
    const auto from = [&](const std::string& prefix) {
        return std::count_if(by_target.begin(), by_target.end(), [&](const auto& entry) {
            return entry.first.starts_with(prefix);
        });
    };
    EXPECT_GT(from("/two?a="), 0);
    EXPECT_GT(from("/two?b="), 0);
}

} // namespace
} // namespace sluice::test
