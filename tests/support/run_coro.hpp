// SPDX-License-Identifier: Apache-2.0
#pragma once

// Lets a test call coroutine code synchronously: run the io_context until the awaitable is done.
// The io_context may hold other work forever (a Redis client always waits for readability), so
// these run one handler at a time and stop as soon as the result is in, or at a deadline.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace sluice::test {

/**
 * Runs `ioc` until `done()` holds or `limit` passes; returns `done()`. Returns early when the
 * io_context runs out of work, since nothing could change then.
 */
template <typename Predicate>
bool run_until(boost::asio::io_context& ioc,
               Predicate done,
               std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            return false;
        }
        if (ioc.stopped()) {
            ioc.restart();
        }
        const auto slice = std::min<std::chrono::steady_clock::duration>(
            deadline - now, std::chrono::milliseconds(50));
        if (ioc.run_one_for(slice) == 0 && ioc.stopped()) {
            return done(); // out of work
        }
    }
    return true;
}

/// Runs `task` on `ioc` to completion and returns its result; rethrows what it throws. Throws
/// std::runtime_error if it does not complete within `limit`.
template <typename T, typename Executor>
T run_coro(boost::asio::io_context& ioc,
           boost::asio::awaitable<T, Executor> task,
           std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    // Shared with the completion handler, which may outlive this call when it times out.
    struct state {
        std::optional<T> result;
        std::exception_ptr error;
        bool finished = false;
    };

    auto s = std::make_shared<state>();
    boost::asio::co_spawn(ioc, std::move(task), [s](std::exception_ptr e, T value) {
        s->error = e;
        if (!e) {
            s->result.emplace(std::move(value));
        }
        s->finished = true;
    });
    if (!run_until(
            ioc, [&] { return s->finished; }, limit)) {
        throw std::runtime_error("run_coro: the coroutine did not complete in time");
    }
    if (s->error) {
        std::rethrow_exception(s->error);
    }
    return std::move(*s->result);
}

/// The same, for a coroutine that returns nothing.
template <typename Executor>
void run_coro(boost::asio::io_context& ioc,
              boost::asio::awaitable<void, Executor> task,
              std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    struct state {
        std::exception_ptr error;
        bool finished = false;
    };

    auto s = std::make_shared<state>();
    boost::asio::co_spawn(ioc, std::move(task), [s](std::exception_ptr e) {
        s->error = e;
        s->finished = true;
    });
    if (!run_until(
            ioc, [&] { return s->finished; }, limit)) {
        throw std::runtime_error("run_coro: the coroutine did not complete in time");
    }
    if (s->error) {
        std::rethrow_exception(s->error);
    }
}

/**
 * Starts every task, in order, before any of them runs, so that they all reach their first
 * suspension in one turn of the io_context (requests arriving together); then runs `ioc` until
 * all are done. Returns their results in order; rethrows what one of them throws. Throws
 * std::runtime_error if they do not all complete within `limit`.
 */
template <typename T, typename Executor>
std::vector<T> run_together(boost::asio::io_context& ioc,
                            std::vector<boost::asio::awaitable<T, Executor>> tasks,
                            std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    struct state {
        std::vector<T> results;
        std::exception_ptr error;
        std::size_t finished = 0;
    };

    auto s = std::make_shared<state>();
    s->results.resize(tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        boost::asio::co_spawn(ioc, std::move(tasks[i]), [s, i](std::exception_ptr e, T value) {
            if (e) {
                s->error = e;
            } else {
                s->results[i] = std::move(value);
            }
            ++s->finished;
        });
    }
    if (!run_until(
            ioc, [&] { return s->finished == s->results.size(); }, limit)) {
        throw std::runtime_error("run_together: the coroutines did not complete in time");
    }
    if (s->error) {
        std::rethrow_exception(s->error);
    }
    return std::move(s->results);
}

} // namespace sluice::test
