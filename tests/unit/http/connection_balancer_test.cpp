// SPDX-License-Identifier: Apache-2.0
// Spreading connections over the workers: the balancer's choice alone, then two workers on their
// own threads where only one accepts, as the first free worker does under a burst.
#include "sluice/http/connection_balancer.hpp"
#include "sluice/http/listener.hpp"
#include "support/limited_sluice.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <future>
#include <iterator>
#include <memory>
#include <thread>
#include <vector>

namespace sluice::http {
namespace {

using namespace std::chrono_literals;

TEST(ConnectionBalancer, KeepsAConnectionUnlessAnotherWorkerHasTwoFewer) {
    std::array<metrics::padded_gauge, 3> counts;
    connection_balancer b(counts);
    EXPECT_EQ(b.workers(), 3u);
    EXPECT_EQ(b.pick(0), 0u); // all even
    b.opened(0);
    EXPECT_EQ(b.pick(0), 0u); // one more than the others: as even as it gets
    b.opened(0);
    EXPECT_EQ(b.pick(0), 1u); // two more: the first with the fewest
    EXPECT_EQ(b.pick(2), 2u); // the fewest already
    b.opened(1);
    EXPECT_EQ(b.pick(0), 2u); // 2, 1, 0: the fewest, not the first with fewer
    b.opened(2);
    b.opened(2);
    b.opened(2);
    EXPECT_EQ(b.pick(2), 1u);
    EXPECT_EQ(b.open(2), 3);
    b.closed(2);
    b.closed(2);
    EXPECT_EQ(b.open(2), 1);
    EXPECT_EQ(counts[2].value.load(), 1); // the registry's gauge is the count
    EXPECT_EQ(b.pick(2), 2u);
}

// A worker of the test: its io_context on a thread of its own, as the app's are.
struct test_worker {
    explicit test_worker(std::size_t index) { context.index = index; }

    ~test_worker() {
        guard.reset();
        ioc.stop();
        if (thread.joinable()) {
            thread.join();
        }
    }

    /// Runs `f` on the worker's thread and returns its result.
    template <class F>
    auto on_thread(F f) {
        std::packaged_task<decltype(f())()> task(std::move(f));
        auto result = task.get_future();
        net::post(ioc, [&task] { task(); });
        return result.get();
    }

    // Before the io_context: its sessions' frames, destroyed with it, unlink from `context`.
    worker_context context;
    net::io_context ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
    net::executor_work_guard<net::io_context::executor_type> guard{ioc.get_executor()};
    std::thread thread;
};

// The burst of keep-alive connections that the first free worker takes alone: worker 0 accepts
// every one, and hands each to worker 1 when it has two more. Each session runs on the worker
// that counts it, and its close is counted there.
TEST(ConnectionBalancer, AWorkerThatAcceptsABurstHandsConnectionsToTheOneWithFewer) {
    metrics::registry registry;
    registry.count_workers(2);
    connection_balancer balancer(registry.worker_connections());
    const auto cfg = std::make_shared<const config::config>();
    std::array<std::unique_ptr<test_worker>, 2> workers{std::make_unique<test_worker>(0),
                                                        std::make_unique<test_worker>(1)};
    std::vector<worker_ref> refs;
    for (auto& w : workers) {
        refs.push_back({w->ioc.get_executor(), &w->context});
    }
    for (auto& w : workers) {
        w->context.config = cfg;
        w->context.metrics = &registry;
        w->context.balancer = &balancer;
        w->context.workers = refs;
    }
    // Only worker 0 listens.
    tcp_acceptor acceptor =
        open_acceptor(workers[0]->ioc.get_executor(), {net::ip::address_v4::loopback(), 0});
    const auto port = acceptor.local_endpoint().port();
    net::co_spawn(workers[0]->ioc, accept_loop(acceptor, workers[0]->context), net::detached);
    for (auto& w : workers) {
        w->thread = std::thread([raw = w.get()] { raw->ioc.run(); });
    }

    net::io_context client_ioc;
    std::vector<tcp::socket> clients;
    for (int i = 0; i < 6; ++i) {
        clients.emplace_back(client_ioc);
        clients.back().connect({net::ip::address_v4::loopback(), port});
        // One at a time, as a worker takes a burst from its queue: 0, 0, then 1, 0, 1, 0.
        ASSERT_TRUE(
            test::eventually([&] { return balancer.open(0) + balancer.open(1) == i + 1; }, 10s));
    }
    EXPECT_EQ(balancer.open(0), 4);
    EXPECT_EQ(balancer.open(1), 2);
    // Started where they are counted: each worker's own list of sessions.
    const auto sessions = [](test_worker& w) {
        return w.on_thread(
            [&w] { return std::distance(w.context.sessions.begin(), w.context.sessions.end()); });
    };
    EXPECT_TRUE(test::eventually([&] { return sessions(*workers[1]) == 2; }, 10s));
    EXPECT_EQ(sessions(*workers[0]), 4);
    EXPECT_EQ(registry.connections_open.load(), 6);

    clients.clear();
    EXPECT_TRUE(
        test::eventually([&] { return balancer.open(0) == 0 && balancer.open(1) == 0; }, 10s))
        << balancer.open(0) << " and " << balancer.open(1) << " still open";
    EXPECT_EQ(sessions(*workers[0]), 0);
    EXPECT_EQ(sessions(*workers[1]), 0);
    EXPECT_NE(registry.render().find("sluice_worker_connections_open{worker=\"1\"} 0\n"),
              std::string::npos);
    workers[0]->on_thread([&] {
        close_acceptor(acceptor);
        return 0;
    });
}

} // namespace
} // namespace sluice::http
