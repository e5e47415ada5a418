// SPDX-License-Identifier: Apache-2.0
// The per-request limiter object on its own: the memory store on a manual clock, a request built
// in memory, no socket.
#include "http/request_limiter.hpp"
#include "sluice/core/clock.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/slot_waiters.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace sluice::http::detail {
namespace {

using namespace std::chrono_literals;

config::limit leaky(std::int64_t capacity, double flow_rate, config::shaping_mode mode) {
    config::limit l;
    l.algo = config::algorithm::leaky_bucket;
    l.capacity = capacity;
    l.flow_rate = flow_rate;
    l.mode = mode;
    return l;
}

/// Rule "slots" on /s: a CONCURRENCY limit of one slot in `mode`, then `more` limits.
config::config one_slot(config::shaping_mode mode, std::vector<config::limit> more = {}) {
    config::config cfg;
    config::rule rule;
    rule.name = "slots";
    rule.path = "/s";
    config::limit one;
    one.algo = config::algorithm::concurrency;
    one.limit_count = 1;
    one.mode = mode;
    rule.limits = {one};
    rule.limits.insert(rule.limits.end(), more.begin(), more.end());
    cfg.rate_limit.rules = {rule};
    return cfg;
}

/// Rule "slots" on /s: a CONCURRENCY limit of one slot (police), then a shaping leaky bucket.
config::config one_slot_and_a_shaping_bucket() {
    return one_slot(config::shaping_mode::police, {leaky(5, 10, config::shaping_mode::shape)});
}

/// A worker with the memory store on a clock standing at 1000 s.
class RequestLimiter : public ::testing::Test {
protected:
    RequestLimiter() {
        worker_.store = &store_;
        worker_.held = &held_;
    }

    /// A GET of `path` from 203.0.113.7, as the limiter sees it.
    struct get_request {
        explicit get_request(const std::string& p)
            : path(p) {
            parser.get().method(bhttp::verb::get);
            parser.get().target(path);
            peer.v4 = true;
            peer.bytes[0] = 203;
            peer.bytes[1] = 0;
            peer.bytes[2] = 113;
            peer.bytes[3] = 7;
        }

        limited_request limited() const { return {parser.get(), path, peer}; }

        std::string path;
        header_arena arena;
        request_parser parser{
            std::piecewise_construct, std::make_tuple(), std::make_tuple(arena.allocator())};
        key::ip_address peer;
    };

    /// One GET of `path` from 203.0.113.7, decided; the limiter holds the outcome.
    std::unique_ptr<request_limiter> request(const config::config& cfg, const std::string& path) {
        const get_request req(path);
        auto limiter = std::make_unique<request_limiter>();
        // The memory store always decides at once.
        EXPECT_TRUE(limiter->try_now(worker_, cfg, req.limited()));
        return limiter;
    }

    manual_clock clock_{1e6};
    store::memory_store store_{clock_, 4};
    std::atomic<std::int64_t> held_{0};
    worker_context worker_;
};

TEST_F(RequestLimiter, AdmitsUpToTheLimitThenRefusesWith429NamingIt) {
    config::config cfg;
    cfg.rate_limit.fallback = leaky(2, 1, config::shaping_mode::police);
    for (int i = 0; i < 2; ++i) {
        const auto l = request(cfg, "/x");
        EXPECT_EQ(l->result().what, verdict::kind::allowed);
        EXPECT_EQ(l->decision_word(), "allowed");
        EXPECT_EQ(l->counted_as(), metrics::decision_kind::allowed);
        EXPECT_EQ(l->rule_name(), "fallback");
        ASSERT_NE(l->response_fields().decision, nullptr);
        EXPECT_EQ(l->response_fields().decision->remaining, 1 - i);
    }
    const auto refused = request(cfg, "/x");
    EXPECT_EQ(refused->result().what, verdict::kind::rejected);
    EXPECT_EQ(refused->counted_as(), metrics::decision_kind::rejected);
    const auto reply = refused->refusal();
    EXPECT_EQ(reply.status, bhttp::status::too_many_requests);
    EXPECT_EQ(reply.body,
              R"({"error":"rate_limited","limit":"fallback","limit_index":0,"retry_after":1})");
    // Another path is another bucket.
    EXPECT_EQ(request(cfg, "/y")->result().what, verdict::kind::allowed);
}

// The peer's text made once for its connection (limited_request::peer_text) keys a request as
// the address does: with it and without it, requests count in one bucket.
TEST_F(RequestLimiter, ThePeersTextKeysARequestAsItsAddressDoes) {
    config::config cfg;
    cfg.rate_limit.fallback = leaky(2, 1, config::shaping_mode::police);
    const get_request req("/x");
    auto with_text = req.limited();
    with_text.peer_text = "203.0.113.7";
    request_limiter first;
    ASSERT_TRUE(first.try_now(worker_, cfg, with_text));
    ASSERT_NE(first.response_fields().decision, nullptr);
    EXPECT_EQ(first.response_fields().decision->remaining, 1);
    const auto second = request(cfg, "/x");
    ASSERT_NE(second->response_fields().decision, nullptr);
    EXPECT_EQ(second->response_fields().decision->remaining, 0);
}

// Behind a trusted proxy, X-Forwarded-For's lines are read as one list, the client found from
// its right-hand end; each line copied once. Copying the list so far for every line, as a
// build before did, made the 100,000 lines here 7e10 bytes of copying (tens of seconds); once
// each they are 1.4 MB, milliseconds even under the sanitizers: 2 s leaves a wide margin.
TEST_F(RequestLimiter, ManyForwardedForLinesAreJoinedInLinearTime) {
    config::config cfg;
    cfg.logging.access_log = true; // so the limiter keeps the client's address as text
    cfg.rate_limit.fallback = leaky(2, 1, config::shaping_mode::police);
    cfg.server.trusted_proxies = {*key::cidr::parse("203.0.113.0/24")};
    get_request req("/x");
    req.parser.get().insert("X-Forwarded-For", "198.51.100.9");
    for (int i = 0; i < 99'999; ++i) {
        req.parser.get().insert("X-Forwarded-For", "203.0.113.1");
    }
    request_limiter limiter;
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(limiter.try_now(worker_, cfg, req.limited()));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
    EXPECT_EQ(limiter.client(), "198.51.100.9");
}

// From a peer that is no trusted proxy, X-Forwarded-For is not read at all.
TEST_F(RequestLimiter, AnUntrustedPeersForwardedForIsIgnored) {
    config::config cfg;
    cfg.logging.access_log = true;
    cfg.rate_limit.fallback = leaky(2, 1, config::shaping_mode::police);
    cfg.server.trusted_proxies = {*key::cidr::parse("10.0.0.0/8")};
    get_request req("/x");
    req.parser.get().insert("X-Forwarded-For", "198.51.100.9");
    req.parser.get().insert("X-Forwarded-For", "198.51.100.10");
    request_limiter limiter;
    ASSERT_TRUE(limiter.try_now(worker_, cfg, req.limited()));
    EXPECT_EQ(limiter.client(), "203.0.113.7");
}

// A header an enforced limit reads (a `header:` key part, a `cost.request` header) on more than
// one line is refused; a header no limit reads may repeat, and a dry-run limit enforces nothing.
TEST_F(RequestLimiter, AHeaderItsLimitsReadOnTwoLinesIsRefused) {
    config::limit by_key = leaky(2, 1, config::shaping_mode::police);
    by_key.key = {config::key_part{config::key_part::kind::header, "X-Api-Key", {}}};
    config::limit by_cost = leaky(2, 1, config::shaping_mode::police);
    by_cost.cost.emplace();
    by_cost.cost->request.what = config::cost_source::kind::header;
    by_cost.cost->request.header = "X-Cost";

    const auto repeats = [](const config::limit& limit, const char* name, int lines) {
        config::config cfg;
        cfg.rate_limit.fallback = limit;
        get_request req("/x");
        for (int i = 0; i < lines; ++i) {
            req.parser.get().insert(name, std::to_string(i + 1));
        }
        request_limiter limiter;
        return limiter.repeats_a_header_it_reads(cfg, req.limited());
    };
    EXPECT_TRUE(repeats(by_key, "x-api-key", 2));
    EXPECT_FALSE(repeats(by_key, "X-Api-Key", 1));
    EXPECT_FALSE(repeats(by_key, "X-Other", 2));
    EXPECT_TRUE(repeats(by_cost, "X-Cost", 2));
    EXPECT_FALSE(repeats(by_cost, "X-Cost", 1));
    by_cost.dry_run = true;
    EXPECT_FALSE(repeats(by_cost, "X-Cost", 2));
}

TEST_F(RequestLimiter, ShapingDelaysAndKeepsItsHeldPlaceUntilTheHoldEnds) {
    config::config cfg;
    cfg.rate_limit.fallback = leaky(5, 10, config::shaping_mode::shape);
    const auto first = request(cfg, "/x");
    EXPECT_EQ(first->result().what, verdict::kind::allowed);
    EXPECT_EQ(held_.load(), 0) << "a request forwarded at once gives its place back";
    const auto second = request(cfg, "/x");
    EXPECT_EQ(second->result().what, verdict::kind::delayed);
    EXPECT_EQ(second->result().delay, 100ms);
    EXPECT_EQ(held_.load(), 1);
    second->end_hold();
    EXPECT_EQ(held_.load(), 0);
}

// A request held without its memory (request_wait.cpp `suspend_hold`): its limiter goes, and
// one made again from the same request and snapshot says what it said, decides nothing again and
// keeps the request's place among the held until the hold ends.
TEST_F(RequestLimiter, ASuspendedHoldResumesWithItsDecisionAndItsHeldPlace) {
    config::config cfg;
    cfg.logging.access_log = true;
    cfg.rate_limit.fallback = leaky(5, 10, config::shaping_mode::shape);
    (void)request(cfg, "/x");
    auto held = request(cfg, "/x");
    ASSERT_EQ(held->result().what, verdict::kind::delayed);
    held->begin_hold(worker_);
    const auto remaining = held->response_fields().decision->remaining;
    const std::string key(held->first_key());
    auto suspended = held->suspend();
    held.reset(); // with the request's memory
    EXPECT_EQ(held_.load(), 1) << "the held place stays with the suspended request";

    const get_request again("/x");
    request_limiter resumed;
    resumed.resume(worker_, cfg, again.limited(), std::move(suspended));
    EXPECT_EQ(resumed.result().what, verdict::kind::delayed);
    EXPECT_EQ(resumed.result().delay, 100ms);
    EXPECT_EQ(resumed.decision_word(), "delayed");
    EXPECT_EQ(resumed.counted_as(), metrics::decision_kind::delayed);
    EXPECT_EQ(resumed.first_key(), key);
    EXPECT_EQ(resumed.client(), "203.0.113.7");
    EXPECT_EQ(resumed.rule_name(), "fallback");
    ASSERT_NE(resumed.response_fields().decision, nullptr);
    EXPECT_EQ(resumed.response_fields().decision->remaining, remaining);
    EXPECT_EQ(held_.load(), 1);
    resumed.end_hold();
    EXPECT_EQ(held_.load(), 0);
    // Nothing was charged again: the third request waits behind two, not three.
    EXPECT_EQ(request(cfg, "/x")->result().delay, 200ms);
}

// The CONCURRENCY slot of a held request goes with its suspended decision, and is given back
// once, by the limiter made again, when the request is over.
TEST_F(RequestLimiter, ASuspendedHoldKeepsItsSlotUntilTheResumedRequestEnds) {
    metrics::registry registry;
    worker_.metrics = &registry;
    const auto cfg = one_slot_and_a_shaping_bucket();
    auto& in_flight = registry.rule("slots").in_flight;
    (void)request(cfg, "/s"); // takes the slot and gives it back: the bucket has one in it
    auto held = request(cfg, "/s");
    ASSERT_EQ(held->result().what, verdict::kind::delayed);
    EXPECT_EQ(in_flight.load(), 1);
    auto suspended = held->suspend();
    held.reset();
    EXPECT_EQ(in_flight.load(), 1) << "the suspended request keeps its slot";
    EXPECT_EQ(request(cfg, "/s")->result().what, verdict::kind::rejected);

    const get_request again("/s");
    auto resumed = std::make_unique<request_limiter>();
    resumed->resume(worker_, cfg, again.limited(), std::move(suspended));
    EXPECT_EQ(resumed->rule_name(), "slots");
    resumed->end_hold();
    resumed.reset(); // the request is over
    EXPECT_EQ(in_flight.load(), 0);
    EXPECT_EQ(request(cfg, "/s")->result().what, verdict::kind::delayed);
    worker_.metrics = nullptr;
}

// A suspended decision dropped without being resumed (a held request whose kept header would no
// longer parse, a connection destroyed unrun at a stop) gives its slot back itself: the slot is
// not left taken for good.
TEST_F(RequestLimiter, ASuspendedHoldDroppedUnresumedGivesItsSlotBack) {
    metrics::registry registry;
    worker_.metrics = &registry;
    const auto cfg = one_slot_and_a_shaping_bucket();
    auto& in_flight = registry.rule("slots").in_flight;
    (void)request(cfg, "/s"); // takes the slot and gives it back: the bucket has one in it
    auto held = request(cfg, "/s");
    ASSERT_EQ(held->result().what, verdict::kind::delayed);
    {
        auto suspended = held->suspend();
        held.reset();
        EXPECT_EQ(in_flight.load(), 1);
        EXPECT_EQ(request(cfg, "/s")->result().what, verdict::kind::rejected);
    } // dropped
    EXPECT_EQ(in_flight.load(), 0);
    EXPECT_EQ(held_.load(), 0) << "its place among the held is given back too";
    EXPECT_EQ(request(cfg, "/s")->result().what, verdict::kind::delayed) << "the slot is free";
    worker_.metrics = nullptr;
}

// At rate-limit.max-held, a request that would have to wait is refused with 503, uncharged.
TEST_F(RequestLimiter, AtTheHeldCapARequestThatWouldWaitIsOverloadedAndUncharged) {
    config::config cfg;
    cfg.rate_limit.fallback = leaky(5, 10, config::shaping_mode::shape);
    cfg.rate_limit.max_held = 1;
    EXPECT_EQ(request(cfg, "/x")->result().what, verdict::kind::allowed);
    const auto held = request(cfg, "/x"); // holds the one place
    ASSERT_EQ(held->result().what, verdict::kind::delayed);
    const auto over = request(cfg, "/x");
    EXPECT_TRUE(over->overloaded());
    EXPECT_EQ(over->decision_word(), "overloaded");
    EXPECT_EQ(over->refusal().status, bhttp::status::service_unavailable);
    EXPECT_EQ(over->counted_as(), metrics::decision_kind::delayed);
    held->end_hold();
    // Uncharged: with the place back, the next request waits exactly one slot more (200 ms).
    const auto next = request(cfg, "/x");
    EXPECT_EQ(next->result().what, verdict::kind::delayed);
    EXPECT_EQ(next->result().delay, 200ms);
}

// At the cap, a request that would wait for a CONCURRENCY slot (mode shape) is refused for the
// cap as well: it would otherwise wait with no place among the held, uncounted.
TEST_F(RequestLimiter, AtTheHeldCapARequestThatWouldWaitForASlotIsOverloaded) {
    metrics::registry registry;
    worker_.metrics = &registry;
    auto cfg = one_slot(config::shaping_mode::shape);
    cfg.rate_limit.max_held = 1;
    const auto running = request(cfg, "/s"); // takes the slot
    ASSERT_EQ(running->result().what, verdict::kind::allowed);
    const auto waiting = request(cfg, "/s"); // waits for it, in the one place
    ASSERT_EQ(waiting->result().what, verdict::kind::queued);
    const auto over = request(cfg, "/s");
    EXPECT_EQ(over->result().what, verdict::kind::rejected);
    EXPECT_TRUE(over->overloaded());
    EXPECT_EQ(over->decision_word(), "overloaded");
    const auto reply = over->refusal();
    EXPECT_EQ(reply.status, bhttp::status::service_unavailable);
    EXPECT_EQ(reply.retry_after, 1);
    EXPECT_EQ(held_.load(), 1) << "only the waiting request has a place";
    worker_.metrics = nullptr;
}

// max-waiting: a request that finds its key's line full is refused by its limit (429, as in
// mode police: no Retry-After), not queued behind it, and takes no place among the held.
TEST_F(RequestLimiter, ARequestThatFindsItsLineFullIsRefusedNotQueued) {
    metrics::registry registry;
    worker_.metrics = &registry;
    store::slot_waiters waiters;
    net::io_context ioc;
    worker_.waiters = &waiters;
    auto cfg = one_slot(config::shaping_mode::shape);
    const auto running = request(cfg, "/s"); // takes the slot
    ASSERT_EQ(running->result().what, verdict::kind::allowed);
    const auto first = request(cfg, "/s");
    ASSERT_EQ(first->result().what, verdict::kind::queued);
    const auto in_line = waiters.join(std::string(first->wait_key()), ioc.get_executor(), [] {});
    // Without max-waiting, the next joins the line.
    EXPECT_EQ(request(cfg, "/s")->result().what, verdict::kind::queued);
    cfg.rate_limit.rules[0].limits[0].max_waiting = 1;
    const auto held_before = held_.load();
    const auto refused = request(cfg, "/s");
    EXPECT_EQ(refused->result().what, verdict::kind::rejected);
    EXPECT_FALSE(refused->overloaded());
    EXPECT_EQ(refused->decision_word(), "rejected");
    EXPECT_EQ(refused->counted_as(), metrics::decision_kind::rejected);
    const auto reply = refused->refusal();
    EXPECT_EQ(reply.status, bhttp::status::too_many_requests);
    EXPECT_EQ(reply.retry_after, 0);
    EXPECT_EQ(held_.load(), held_before) << "a refused request holds no place";
    EXPECT_EQ(refused->response_fields().decision, nullptr) << "not decided: a slot may be free";
    // At max-held, one that finds others waiting for its key does not try either: 503.
    cfg.rate_limit.rules[0].limits[0].max_waiting.reset();
    cfg.rate_limit.max_held = held_.load();
    const auto over = request(cfg, "/s");
    EXPECT_EQ(over->result().what, verdict::kind::rejected);
    EXPECT_TRUE(over->overloaded());
    EXPECT_EQ(over->refusal().status, bhttp::status::service_unavailable);
    EXPECT_EQ(held_.load(), held_before);
    worker_.waiters = nullptr;
    worker_.metrics = nullptr;
}

TEST_F(RequestLimiter, ADryRunRefusalCountsOnceAsDryRunRejected) {
    config::config cfg;
    config::rule rule;
    rule.name = "dry";
    rule.path = "/d";
    auto limit = leaky(1, 1, config::shaping_mode::police);
    limit.dry_run = true;
    rule.limits = {limit};
    cfg.rate_limit.rules = {rule};
    EXPECT_EQ(request(cfg, "/d")->counted_as(), metrics::decision_kind::allowed);
    const auto second = request(cfg, "/d");
    EXPECT_EQ(second->result().what, verdict::kind::allowed);
    EXPECT_EQ(second->counted_as(), metrics::decision_kind::dry_run_rejected);
    EXPECT_EQ(second->rule_name(), "dry");
}

TEST_F(RequestLimiter, ARuleWithoutLimitsIsUnlimitedAndUncounted) {
    config::config cfg;
    config::rule rule;
    rule.name = "free";
    rule.path = "/health";
    cfg.rate_limit.rules = {rule};
    const auto l = request(cfg, "/health");
    EXPECT_EQ(l->decision_word(), "unlimited");
    EXPECT_FALSE(l->counted_as());
    EXPECT_EQ(l->response_fields().decision, nullptr);
}

} // namespace
} // namespace sluice::http::detail
