// SPDX-License-Identifier: Apache-2.0
#pragma once

// The lines of one log descriptor (stdout, stderr) on their way out, written by a thread of
// their own (log_queue.cpp), so that no thread that logs ever waits for the log's reader.

#include "sluice/metrics/metrics.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sluice::app {

/**
 * Whole log lines for one file descriptor, queued by any thread and written by one thread of the
 * queue's own with write(2). A reader that stops (Docker's blocking log mode behind a slow
 * driver, a `sluice | filter` whose filter stalls, a terminal on hold) holds that thread alone:
 * a worker or the control thread only copies its line in, under a lock that no write is made
 * under. At most `capacity` bytes wait (the batch being written included); a line that does not
 * fit is dropped, and so is a line whose write fails (EPIPE, ENOSPC): both are counted.
 *
 * A queue is never destroyed: a thread blocked in write(2) on a full pipe can be neither woken
 * nor joined, so the exit waits for it only as long as `finish` is told and then leaves it to
 * the kernel (exit_group ends it). Make one with `new` and keep it.
 */
class log_queue {
public:
    /// Starts the writing thread, with SIGINT, SIGTERM and SIGHUP blocked (they are the control
    /// thread's). `fd` stays open for the process's life.
    log_queue(int fd, std::size_t capacity);

    log_queue(const log_queue&) = delete;
    log_queue& operator=(const log_queue&) = delete;

    /// Queues `lines` (one or more lines, each ending with its newline), or drops them if
    /// `capacity` bytes would be exceeded (a line is taken whatever its size when nothing
    /// waits). Never waits for the descriptor.
    void push(std::string_view lines);

    /// Waits until every line queued before the call has been written (or dropped), or until
    /// `deadline`. True when they were.
    bool drain(std::chrono::steady_clock::time_point deadline);

    /**
     * Ends the queue at the process's exit: the lines queued are written (or dropped), then the
     * writing thread returns, so that none of the queue's threads outlives main when its reader
     * keeps up (ThreadSanitizer sleeps a second in an exit that finds another thread, and a
     * stop should leave nothing running). Waits for that until `deadline`; true when it
     * happened. A line pushed once the thread has returned is never written.
     */
    bool finish(std::chrono::steady_clock::time_point deadline);

    /// From now on, counts each dropped line in `dropped` as well (nullptr: no longer). Returns
    /// once no count into the previous counter is in progress, so that it may then go.
    void count_dropped_in(metrics::counter* dropped);

    /// Lines dropped since the start.
    std::uint64_t dropped() const;

private:
    void run();
    void drop_locked(std::uint64_t lines);

    const int fd_;
    const std::size_t capacity_;
    mutable std::mutex mutex_;
    std::condition_variable queued_;  // for the writer: lines came
    std::condition_variable written_; // for `drain`: a batch is done
    /// The lines waiting, and where each ends in `bytes_`.
    std::string bytes_;
    std::vector<std::size_t> ends_;
    /// Bytes of the batch the writer has taken and not yet written.
    std::size_t writing_ = 0;
    /// Lines pushed (dropped ones included) and lines done (written or dropped), for `drain`.
    std::uint64_t pushed_ = 0;
    std::uint64_t done_ = 0;
    std::uint64_t dropped_ = 0;
    metrics::counter* dropped_counter_ = nullptr;
    /// `finish` was called; the writing thread has returned.
    bool finishing_ = false;
    bool finished_ = false;
    /// The writing thread: joined by `finish` once it has returned, detached if it is stuck.
    std::thread thread_;
};

} // namespace sluice::app
