// SPDX-License-Identifier: Apache-2.0
// A worker's idle lists: the sessions waiting for a request, longest idle first, those that have
// sent none apart from those served, so that at server.max-connections the one to close is the
// first of a list, whatever the number of sessions open.
#include "sluice/http/worker_context.hpp"

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <vector>

namespace sluice::http {
namespace {

TEST(IdleSessions, ListTheIdleSessionsLongestIdleFirstAndNoOther) {
    net::io_context ioc;
    const executor ex{ioc.get_executor()};
    worker_context worker;
    std::deque<timed_stream> streams;
    std::deque<session_entry> entries;
    const auto open = [&] {
        auto& e = entries.emplace_back(streams.emplace_back(ex));
        worker.sessions.push_back(e);
        return &e;
    };
    // 10,000 busy sessions, as many as a worker at its cap may hold, and one idle after them:
    // it is the first of its list, not found by a walk past the busy ones.
    for (int i = 0; i < 10'000; ++i) {
        worker_context::mark_busy(*open());
    }
    auto* fresh = open();
    worker.mark_idle(*fresh);
    ASSERT_FALSE(worker.idle_sessions[0].empty());
    EXPECT_EQ(&worker.idle_sessions[0].front(), fresh);
    EXPECT_TRUE(worker.idle_sessions[1].empty());

    // A served session goes to the other list; one idle again goes last of its list.
    auto* served = open();
    served->served = true;
    worker.mark_idle(*served);
    auto* second = open();
    worker.mark_idle(*second);
    worker.mark_idle(*fresh); // idle again: now after `second`
    EXPECT_EQ(&worker.idle_sessions[0].front(), second);
    EXPECT_EQ(&worker.idle_sessions[0].back(), fresh);
    EXPECT_EQ(&worker.idle_sessions[1].front(), served);

    // A request takes it off; a session that ends leaves by itself.
    worker_context::mark_busy(*second);
    EXPECT_FALSE(second->idle);
    EXPECT_EQ(&worker.idle_sessions[0].front(), fresh);
    entries.pop_back(); // `second`, as its connection ends
    entries.pop_back(); // `served`
    EXPECT_TRUE(worker.idle_sessions[1].empty());
    EXPECT_EQ(&worker.idle_sessions[0].front(), fresh);
}

} // namespace
} // namespace sluice::http
