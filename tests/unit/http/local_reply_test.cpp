// SPDX-License-Identifier: Apache-2.0
// The answers sluice makes itself, as they go on the wire.
#include "http/local_reply.hpp"

#include <boost/beast/http/write.hpp>
#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace sluice::http::detail {
namespace {

std::string wire(const bhttp::response<bhttp::string_body>& res) {
    std::ostringstream out;
    out << res;
    return out.str();
}

TEST(LocalReply, RejectionCarriesItsBodyRetryAfterAndRateLimitFields) {
    limiter::decision d;
    d.limit = 50;
    d.remaining = 0;
    d.window = std::chrono::seconds(10);
    d.reset_after = std::chrono::milliseconds(2'500);
    reply_context context;
    context.limits = {"api", &d, false};
    const local_reply reply{
        bhttp::status::too_many_requests,
        R"({"error":"rate_limited","limit":"api","limit_index":0,"retry_after":3})",
        3};
    const auto res = make_local_response(reply, context, true);
    EXPECT_EQ(res.result(), bhttp::status::too_many_requests);
    EXPECT_EQ(res.version(), 11u);
    EXPECT_EQ(res[bhttp::field::retry_after], "3");
    EXPECT_EQ(res[bhttp::field::content_type], "application/json");
    EXPECT_EQ(res["RateLimit-Policy"], R"("api";q=50;w=10)");
    EXPECT_EQ(res["RateLimit"], R"("api";r=0;t=3)");
    EXPECT_EQ(res.count("X-RateLimit-Limit"), 0u);
    EXPECT_TRUE(res.keep_alive());
    EXPECT_EQ(res.body(), reply.body);
    EXPECT_EQ(res[bhttp::field::content_length], std::to_string(reply.body.size()));
}

// A reset is a moment: a response that leaves a hold (or an upstream's wait) after the decision
// states what is left of it then, never less: the coarse clock's difference of two readings, less
// a tick, may fall short of the time passed by a few ms, far inside the headers' rounding.
TEST(LocalReply, AResetIsStatedAsWhatIsLeftOfItWhenTheResponseLeaves) {
    using namespace std::chrono_literals;
    limiter::decision d;
    d.limit = 5;
    d.remaining = 2;
    d.reset_after = 8'000ms;
    rate_limit_context limits{"api", &d, false, coarse_clock::now() - 3s};
    const auto aged = as_of_now(limits);
    EXPECT_LE(aged.reset_after, 5'000ms + coarse_clock::resolution());
    EXPECT_GT(aged.reset_after, 4'900ms);
    EXPECT_EQ(aged.remaining, 2) << "only the reset moves";
    limits.decided_at = coarse_clock::now() - 9s;
    EXPECT_EQ(as_of_now(limits).reset_after, 0ms) << "a reset passed is none, never negative";
    limits.decided_at = {};
    EXPECT_EQ(as_of_now(limits).reset_after, 8'000ms) << "no decision time: as decided";
    // And so on the wire.
    d.reset_after = 7'500ms; // 4.5 s left, and the tick: t=5
    reply_context context;
    context.limits = {"api", &d, false, coarse_clock::now() - 3s};
    const auto res =
        make_local_response({bhttp::status::service_unavailable, {}, 1}, context, true);
    EXPECT_EQ(res["RateLimit"], R"("api";r=2;t=5)");
}

TEST(LocalReply, WithoutABodyTheStatusIsNamedAndNothingElseIsAdded) {
    reply_context context;
    const auto res = make_local_response({bhttp::status::bad_gateway, {}, 0}, context, false);
    EXPECT_EQ(res.body(), R"({"error":"bad_gateway"})");
    EXPECT_EQ(res.count(bhttp::field::retry_after), 0u);
    EXPECT_EQ(res.count("RateLimit"), 0u);
    EXPECT_FALSE(res.keep_alive());
    EXPECT_NE(wire(res).find("Connection: close\r\n"), std::string::npos) << wire(res);
}

TEST(LocalReply, AnswersInTheRequestsVersion) {
    reply_context context;
    context.version = 10;
    const auto res =
        make_local_response({bhttp::status::service_unavailable, {}, 1}, context, true);
    EXPECT_EQ(wire(res).rfind("HTTP/1.0 503 Service Unavailable\r\n", 0), 0u) << wire(res);
    EXPECT_EQ(res.body(), R"({"error":"unavailable"})");
    EXPECT_EQ(res[bhttp::field::retry_after], "1");
}

} // namespace
} // namespace sluice::http::detail
