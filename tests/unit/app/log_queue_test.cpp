// SPDX-License-Identifier: Apache-2.0
#include "app/log_queue.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <future>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace sluice::app {
namespace {

using namespace std::chrono_literals;
using std::chrono::steady_clock;

struct pipe_ends {
    int read = -1;
    int write = -1;
};

pipe_ends make_pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        throw std::runtime_error("pipe2 failed");
    }
    return {fds[0], fds[1]};
}

// A queue lives for the process (log_queue): one per test, kept here.
log_queue& new_queue(int fd, std::size_t capacity) {
    // Never destroyed either, so that the queues stay reachable (LeakSanitizer) once their
    // threads have ended.
    static auto* const queues = new std::vector<log_queue*>;
    queues->push_back(new log_queue(fd, capacity));
    return *queues->back();
}

std::string line(int i) {
    return "line " + std::to_string(i) + "\n";
}

TEST(LogQueue, WritesEveryLineInOrderWhenTheReaderKeepsUp) {
    const auto pipe = make_pipe();
    auto& queue = new_queue(pipe.write, 64 * 1024);
    std::string expected;
    // The reader reads as the test pushes (a pipe holds 64 KiB): more lines than either holds.
    auto reader = std::async(std::launch::async, [fd = pipe.read] {
        std::string got;
        char buffer[4096];
        for (;;) {
            const auto n = ::read(fd, buffer, sizeof buffer);
            if (n <= 0) {
                return got;
            }
            got.append(buffer, static_cast<std::size_t>(n));
        }
    });
    for (int i = 0; i < 20'000; ++i) {
        expected += line(i);
        queue.push(line(i));
        if (i % 1000 == 999) {
            // The reader keeps up: the queue never holds more than its capacity.
            ASSERT_TRUE(queue.drain(steady_clock::now() + 10s));
        }
    }
    ASSERT_TRUE(queue.drain(steady_clock::now() + 10s));
    ::close(pipe.write); // the queue writes no more: the reader sees the end
    ASSERT_EQ(reader.wait_for(10s), std::future_status::ready);
    EXPECT_EQ(reader.get(), expected);
    EXPECT_EQ(queue.dropped(), 0u);
}

// A reader that never reads: pushing never waits, what does not fit is dropped and counted, and
// `drain` gives up at its deadline.
TEST(LogQueue, AStalledReaderCostsLinesNotWaits) {
    const auto pipe = make_pipe(); // the read end stays open, unread, for the process's life
    constexpr std::size_t capacity = 16 * 1024;
    auto& queue = new_queue(pipe.write, capacity);
    metrics::counter dropped{0};
    queue.count_dropped_in(&dropped);
    // Far more than the pipe (64 KiB) and the queue hold. On a thread, so that a push that waits
    // fails the test instead of hanging it.
    constexpr int lines = 100'000;
    auto pushes = std::async(std::launch::async, [&queue] {
        for (int i = 0; i < lines; ++i) {
            queue.push(std::string(99, 'x') + "\n");
        }
    });
    ASSERT_EQ(pushes.wait_for(20s), std::future_status::ready) << "a push waited for the reader";
    // 100 bytes a line: about the pipe's and the queue's worth went through, no more.
    EXPECT_GT(queue.dropped(),
              static_cast<std::uint64_t>(lines - 2 * (64 * 1024 + capacity) / 100));
    const auto start = steady_clock::now();
    EXPECT_FALSE(queue.drain(start + 200ms));
    EXPECT_LT(steady_clock::now() - start, 5s);
    queue.count_dropped_in(nullptr);
    EXPECT_EQ(dropped.load(), queue.dropped());
    queue.push(std::string(capacity, 'y') + "\n"); // does not fit: dropped
    EXPECT_EQ(dropped.load(), queue.dropped() - 1) << "counted in the counter no longer";
}

// At the exit: what waits is written, then the writing thread returns (none is left running).
TEST(LogQueue, FinishWritesWhatWaitsThenEndsItsThread) {
    const auto pipe = make_pipe();
    auto& queue = new_queue(pipe.write, 64 * 1024);
    std::string expected;
    for (int i = 0; i < 100; ++i) {
        expected += line(i);
        queue.push(line(i));
    }
    ASSERT_TRUE(queue.finish(steady_clock::now() + 10s));
    ::close(pipe.write);
    std::string got;
    char buffer[4096];
    for (ssize_t n; (n = ::read(pipe.read, buffer, sizeof buffer)) > 0;) {
        got.append(buffer, static_cast<std::size_t>(n));
    }
    EXPECT_EQ(got, expected);
    ::close(pipe.read);
}

// A writer stuck on a reader that never reads: `finish` gives up at its deadline.
TEST(LogQueue, FinishGivesUpOnAStuckWriterAtItsDeadline) {
    const auto pipe = make_pipe(); // the read end stays open, unread
    auto& queue = new_queue(pipe.write, 1024 * 1024);
    for (int i = 0; i < 2'000; ++i) {
        queue.push(std::string(99, 'x') + "\n"); // 200 KB: more than the pipe holds
    }
    const auto start = steady_clock::now();
    EXPECT_FALSE(queue.finish(start + 200ms));
    EXPECT_GE(steady_clock::now() - start, 200ms);
    EXPECT_LT(steady_clock::now() - start, 5s);
}

// A write that fails (the reader went: EPIPE) loses its lines: they count as dropped, and
// `drain` does not wait for them.
TEST(LogQueue, LinesAFailedWriteLostAreCounted) {
    std::signal(SIGPIPE, SIG_IGN); // as sluice's main does
    const auto pipe = make_pipe();
    ::close(pipe.read);
    auto& queue = new_queue(pipe.write, 64 * 1024);
    for (int i = 0; i < 10; ++i) {
        queue.push(line(i));
    }
    ASSERT_TRUE(queue.drain(steady_clock::now() + 10s));
    EXPECT_EQ(queue.dropped(), 10u);
}

// A write that stops part-way through a line (here at a file size limit; a disk full alike)
// loses that line and those after it, counted; the first line written once the file takes bytes
// again starts on a line of its own, where it was glued to the fragment. In a child process, for
// its own file size limit.
TEST(LogQueue, ALineCutByAFailedWriteDoesNotJoinTheNext) {
    char path[] = "/tmp/sluice-log-queue-XXXXXX";
    const int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    const std::string first = line(0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        std::signal(SIGXFSZ, SIG_IGN);
        rlimit limit{};
        ::getrlimit(RLIMIT_FSIZE, &limit);
        rlimit low = limit;
        low.rlim_cur = first.size() + 3; // "line 0\n" and "lin" of line 1
        ::setrlimit(RLIMIT_FSIZE, &low);
        log_queue queue(fd, 64 * 1024);
        for (int i = 0; i < 3; ++i) {
            queue.push(line(i));
        }
        (void)queue.drain(steady_clock::now() + 10s);
        ::setrlimit(RLIMIT_FSIZE, &limit);
        queue.push(line(3));
        (void)queue.drain(steady_clock::now() + 10s);
        ::_exit(static_cast<int>(queue.dropped()));
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 2) << "lines 1 and 2 lost, and counted";
    std::string text(256, '\0');
    const auto n = ::pread(fd, text.data(), text.size(), 0);
    ASSERT_GE(n, 0);
    text.resize(static_cast<std::size_t>(n));
    ::close(fd);
    ::unlink(path);
    EXPECT_EQ(text, first + "lin\n" + line(3));
}

} // namespace
} // namespace sluice::app
