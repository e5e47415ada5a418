// SPDX-License-Identifier: Apache-2.0
// Cost-weighted limits from JSON (issue 15): a request reserves the figure at a path in its JSON
// body (read ahead of the decision, then forwarded from that buffer), a response settles with the
// figure at a path in its application/json body or in the last server-sent event that carries
// it, and a `json:` key part keys a limit by a body field. Through the real binary, on both
// stores; the upstream records every body byte it receives.

#include "integration_util.hpp"
#include "support/body_pattern.hpp"
#include "support/limit_probe.hpp"
#include "support/limited_sluice.hpp"
#include "support/store_param_test.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

/// A token bucket of 100 per rule, keyed globally, reserving `json:max_tokens` (default 5):
/// /v1/* settles by the X-Usage header and keeps a reservation without one; /events/* and
/// /json/* settle by `json:usage.total_tokens` and refund without one; /small/* reads at most
/// 1 KiB of a body. /models/* is keyed by the body's model, 10 tokens each. The refill, a token
/// per 36 s, never counts: a bucket refills whole tokens only, the first 36 s after its first
/// charge, longer than any test here. So the figures are exact, and a test may wait seconds
/// (settle_deadline) for a settlement to land: without it, no refill makes the figure it waits
/// for.
const std::string rules = R"(  rules:
    - name: header
      match: { path: /v1/* }
      limits:
        - algorithm: TOKEN_BUCKET
          capacity: 100
          refillRate: 100r/h
          key: [global]
          cost: { request: json:max_tokens, default: 5, response: header:X-Usage }
    - name: events
      match: { path: /events/* }
      limits:
        - algorithm: TOKEN_BUCKET
          capacity: 100
          refillRate: 100r/h
          key: [global]
          cost: { request: json:max_tokens, default: 5, response: json:usage.total_tokens, on-missing: refund }
    - name: small
      match: { path: /small/* }
      limits:
        - algorithm: TOKEN_BUCKET
          capacity: 100
          refillRate: 100r/h
          key: [global]
          cost: { request: json:max_tokens, default: 5, max-body: 1024 }
    - name: models
      match: { path: /models/* }
      limits:
        - algorithm: TOKEN_BUCKET
          capacity: 10
          refillRate: 100r/h
          key: ["json:model"]
          cost: { request: json:max_tokens, default: 1 }
)";

/// Answers as the request's X-Reply-* headers say: X-Reply-Usage as an X-Usage header,
/// X-Reply-Body as an application/json body, X-Reply-Events as a text/event-stream (chunked;
/// `X-Reply-Cut: 1` drops its last chunk and closes, an upstream dying mid-stream).
recording_upstream json_upstream() {
    return recording_upstream([](const recorded_request& request) {
        response_plan plan;
        if (const auto usage = request.header("X-Reply-Usage")) {
            plan.headers.emplace_back("X-Usage", *usage);
        }
        if (const auto body = request.header("X-Reply-Body")) {
            plan.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
            plan.body = *body;
        }
        if (const auto events = request.header("X-Reply-Events")) {
            plan.headers.emplace_back("Content-Type", "text/event-stream");
            plan.chunked = true;
            plan.body = *events;
            // Header values cannot hold newlines: '|' stands for one.
            std::replace(plan.body.begin(), plan.body.end(), '|', '\n');
            plan.cut_short = request.header("X-Reply-Cut").has_value();
        }
        return plan;
    });
}

/// How long a test waits for a settlement to land (it lands just after the response's end).
constexpr auto settle_deadline = 5s;

/// The tokens left as the response's RateLimit field says (`r=`), or -1.
long long remaining(const http_response& response) {
    return view_of(response).remaining.value_or(-1);
}

class CostJsonTest : public store_param_test {
protected:
    void SetUp() override {
        store_param_test::SetUp();
        if (IsSkipped()) {
            return;
        }
        sluice_ =
            std::make_unique<sluice_process>(compose_yaml(upstream_.url(), rate_limit(rules)));
    }

    http_response post(std::string_view target,
                       std::string_view body,
                       header_list headers = {{"Content-Type", "application/json"}}) {
        return request(sluice_->port(), "POST", target, headers, body);
    }

    /// The tokens a rule's bucket holds: a probe that can never fit is refused, charging
    /// nothing, and reports them.
    long tokens(std::string_view rule_path) {
        return remaining(post(rule_path, R"({"max_tokens":1000})"));
    }

    recording_upstream upstream_ = json_upstream();
    std::unique_ptr<sluice_process> sluice_;
};

// The issue's example with the reservation in the body: 60 reserved leaves 40; the response
// reports 10, so 50 come back and 80 fit right after; 200 can never fit 100. The upstream gets
// every body byte as sent.
TEST_P(CostJsonTest, ReservesTheBodysFigureAndForwardsTheBodyIntact) {
    const std::string body = R"({"model":"m","max_tokens":60,"prompt":"hello"})";
    const auto first = post("/v1/a", body, {{"X-Reply-Usage", "10"}});
    ASSERT_EQ(first.status, 200u) << first.body;
    EXPECT_EQ(remaining(first), 40);
    ASSERT_TRUE(upstream_.wait_for_count(1, 2s));
    const auto seen = upstream_.requests().front();
    EXPECT_EQ(seen.body_prefix, body);
    EXPECT_EQ(seen.body_size, body.size());
    http_response second;
    ASSERT_TRUE(eventually(
        [&] {
            second = post("/v1/b", R"({"max_tokens":80})", {{"X-Reply-Usage", "80"}});
            return second.status == 200;
        },
        settle_deadline))
        << "the refund did not land: " << second.status;
    EXPECT_EQ(remaining(second), 10) << "40 + 50 refunded - 80";
    const auto huge = post("/v1/c", R"({"max_tokens":200})");
    EXPECT_EQ(huge.status, 429u);
    EXPECT_FALSE(huge.header("Retry-After").has_value());
    EXPECT_NE(huge.body.find(R"("cost":200,"capacity":100)"), std::string::npos) << huge.body;
    ASSERT_TRUE(upstream_.wait_quiet(2s));
    EXPECT_EQ(upstream_.requests().size(), 2u) << "the never-fitting request went upstream";
}

// A streamed answer whose final event carries the usage (after a `[DONE]`-style event that is
// no JSON) settles by it: 50 reserved, 7 used, 43 back. The same stream cut short before its end
// has no figure: on-missing refund gives all 50 back, the usage it did carry notwithstanding.
TEST_P(CostJsonTest, TheLastEventCarryingThePathSettlesAndACutStreamHasNoFigure) {
    const std::string events =
        R"(data: {"choices":[{"delta":"a"}],"usage":null}||data: {"usage":{"total_tokens":7}}||)"
        R"(: a comment||data: [DONE]||)";
    const auto streamed = post("/events/a", R"({"max_tokens":50})", {{"X-Reply-Events", events}});
    ASSERT_EQ(streamed.status, 200u);
    EXPECT_EQ(remaining(streamed), 50);
    EXPECT_NE(streamed.body.find("[DONE]"), std::string::npos) << "the stream passed as sent";
    ASSERT_TRUE(eventually([&] { return tokens("/events/probe") >= 93; }, settle_deadline))
        << tokens("/events/probe") << " tokens, not 100 - 7";
    EXPECT_EQ(tokens("/events/probe"), 93);

    // The client sees its response start, then break off: no status to check but the tokens.
    http_connection cut(sluice_->port());
    cut.send("POST",
             "/events/b",
             {{"X-Reply-Events", events}, {"X-Reply-Cut", "1"}},
             R"({"max_tokens":50})");
    error_code ec;
    (void)cut.try_read_response(ec);
    ASSERT_TRUE(upstream_.wait_for_count(2, 2s));
    // 93, less 50; then the whole 50 back (refund), not 43 (86).
    ASSERT_TRUE(eventually([&] { return tokens("/events/probe") >= 93; }, settle_deadline))
        << tokens("/events/probe") << " tokens: the cut stream was settled by its usage";
    EXPECT_EQ(tokens("/events/probe"), 93);
}

// An application/json response settles by its figure; one whose figure is a string, or that
// is not JSON, has none (refund).
TEST_P(CostJsonTest, AJsonResponseSettlesByItsFigure) {
    const auto r = post("/events/a",
                        R"({"max_tokens":40})",
                        {{"X-Reply-Body", R"({"id":"x","usage":{"total_tokens":12}})"}});
    ASSERT_EQ(r.status, 200u);
    EXPECT_EQ(remaining(r), 60);
    EXPECT_EQ(r.body, R"({"id":"x","usage":{"total_tokens":12}})");
    ASSERT_TRUE(eventually([&] { return tokens("/events/probe") >= 88; }, settle_deadline))
        << tokens("/events/probe") << " tokens, not 100 - 12";
    EXPECT_EQ(tokens("/events/probe"), 88);
    for (const char* body :
         {R"({"usage":{"total_tokens":"30"}})", R"({"usage":{"total_tokens":30)"}) {
        const auto again = post("/events/b", R"({"max_tokens":30})", {{"X-Reply-Body", body}});
        ASSERT_EQ(again.status, 200u);
        ASSERT_TRUE(eventually([&] { return tokens("/events/probe") >= 88; }, settle_deadline))
            << body << ": " << tokens("/events/probe") << " tokens: not refunded";
        EXPECT_EQ(tokens("/events/probe"), 88) << body;
    }
}

// Bodies a peer cannot be trusted with reserve `default` (5) and are forwarded as they came: not
// JSON, a figure that is no finite non-negative number, a string, the path repeated (the last
// counts), a body over max-body (1 KiB here) with the figure in its first bytes, a chunked body.
TEST_P(CostJsonTest, BrokenOrOversizedBodiesReserveTheDefaultAndPassIntact) {
    long left = 100;
    std::size_t forwarded = 0;
    const auto expect_reserved = [&](const http_response& r, long cost, std::string_view what) {
        left -= cost;
        EXPECT_EQ(r.status, 200u) << what;
        EXPECT_EQ(remaining(r), left) << what;
        ++forwarded;
    };
    for (const char* bad : {R"({"max_tokens":60)",
                            "not json",
                            R"({"max_tokens":-5})",
                            R"({"max_tokens":1e309})",
                            R"({"max_tokens":"60"})",
                            R"([60])",
                            ""}) {
        expect_reserved(post("/small/a", bad), 5, bad);
    }
    expect_reserved(post("/small/a", R"({"max_tokens":1,"max_tokens":12})"), 12, "repeated");
    const std::string big = R"({"max_tokens":3,"pad":")" + std::string(2000, 'x') + "\"}";
    expect_reserved(post("/small/a", big), 5, "over max-body");
    http_connection chunked(sluice_->port());
    chunked.send_raw(format_request("POST", "/small/a", {{"Transfer-Encoding", "chunked"}}) +
                     chunk_encode(R"({"max_tokens":9})", 4));
    expect_reserved(chunked.read_response(), 9, "chunked");
    // A chunked body with no chunk at all: read ahead as empty, forwarded as an empty body.
    chunked.send_raw(format_request("POST", "/small/a", {{"Transfer-Encoding", "chunked"}}) +
                     "0\r\n\r\n");
    expect_reserved(chunked.read_response(), 5, "empty chunked");
    ASSERT_TRUE(upstream_.wait_for_count(forwarded, 2s));
    const auto seen = upstream_.requests();
    bool big_seen = false;
    for (const auto& r : seen) {
        if (r.body_size == big.size()) {
            big_seen = true;
            EXPECT_EQ(r.body_hash, hash_of(big));
        }
    }
    EXPECT_TRUE(big_seen) << "the body over max-body did not reach the upstream whole";
    ASSERT_GE(seen.size(), 2u);
    EXPECT_EQ(seen[seen.size() - 2].body_prefix, R"({"max_tokens":9})")
        << "the chunked body, re-chunked";
    EXPECT_EQ(seen.back().body_size, 0u) << "the empty chunked body";
}

// A body read ahead is bounded as a forwarded one: past server.max-body-size it gets 413, its
// chunked framing broken gets 400, and neither reaches the upstream or charges the limit.
TEST_P(CostJsonTest, ABodyReadAheadIsBoundedAsAForwardedOne) {
    sluice_process bounded(
        compose_yaml(upstream_.url(), rate_limit(rules), "  max-body-size: 512\n"));
    const std::string big = R"({"max_tokens":3,"pad":")" + std::string(1000, 'x') + "\"}";
    const auto refused = request(bounded.port(), "POST", "/small/a", {}, big);
    EXPECT_EQ(refused.status, 413u);
    http_connection broken(bounded.port());
    broken.send_raw(format_request("POST", "/small/a", {{"Transfer-Encoding", "chunked"}}) +
                    "zz\r\n{}\r\n0\r\n\r\n");
    EXPECT_EQ(broken.read_response().status, 400u);
    ASSERT_TRUE(upstream_.wait_quiet(2s));
    EXPECT_EQ(upstream_.requests().size(), 0u);
    // Nothing was charged: the whole bucket is there.
    const auto probe = request(bounded.port(), "POST", "/small/a", {}, R"({"max_tokens":1000})");
    EXPECT_EQ(remaining(probe), 100);
}

// A client that asks before sending (Expect: 100-continue) gets its 100, then is decided by
// its body.
TEST_P(CostJsonTest, ExpectContinueIsAnsweredBeforeTheBodyIsRead) {
    const std::string body = R"({"max_tokens":30})";
    http_connection c(sluice_->port());
    c.send_raw(format_request(
        "POST",
        "/small/a",
        {{"Expect", "100-continue"}, {"Content-Length", std::to_string(body.size())}}));
    const auto interim = c.read_response();
    EXPECT_EQ(interim.status, 100u);
    c.send_raw(body);
    const auto r = c.read_response();
    EXPECT_EQ(r.status, 200u);
    EXPECT_EQ(remaining(r), 70);
}

// A `json:model` key part: each model has a bucket of its own; a body without one (or one whose
// model is no short printable string) falls back to the client's key.
TEST_P(CostJsonTest, AJsonKeyPartKeysTheLimitByTheBodysField) {
    EXPECT_EQ(post("/models/x", R"({"model":"a","max_tokens":10})").status, 200u);
    EXPECT_EQ(post("/models/x", R"({"model":"a","max_tokens":1})").status, 429u);
    const auto b = post("/models/x", R"({"model":"b","max_tokens":4})");
    EXPECT_EQ(b.status, 200u);
    EXPECT_EQ(remaining(b), 6);
    const auto none = post("/models/x", R"({"max_tokens":3})");
    EXPECT_EQ(none.status, 200u);
    EXPECT_EQ(remaining(none), 7) << "the client's own bucket";
    const auto odd = post("/models/x", "{\"model\":\"a\\nb\",\"max_tokens\":2}");
    EXPECT_EQ(odd.status, 200u);
    EXPECT_EQ(remaining(odd), 5) << "a model with a newline falls back to the client's bucket";
}

INSTANTIATE_TEST_SUITE_P(Stores,
                         CostJsonTest,
                         ::testing::Values("memory", "redis"),
                         [](const auto& param_info) { return std::string(param_info.param); });

} // namespace
} // namespace sluice::test
