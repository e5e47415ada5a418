// SPDX-License-Identifier: Apache-2.0
#include "app/log_queue.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <poll.h>
#include <pthread.h>
#include <thread>
#include <unistd.h>

namespace sluice::app {
namespace {

// Writes `bytes` whole unless the descriptor fails; how many were written.
std::size_t write_all(int fd, std::string_view bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const auto n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            // A descriptor that whoever started sluice made non-blocking: wait as a blocking
            // write would (this thread is the one that may wait).
            pollfd ready{fd, POLLOUT, 0};
            ::poll(&ready, 1, -1);
        } else {
            break; // EPIPE (SIGPIPE is ignored), ENOSPC, EIO...: the rest is lost
        }
    }
    return done;
}

} // namespace

log_queue::log_queue(int fd, std::size_t capacity)
    : fd_(fd)
    , capacity_(capacity) {
    // The thread inherits the creator's signal mask: block the control signals while it starts,
    // so that the kernel never hands SIGTERM to a thread that may sit in write(2) for ever.
    sigset_t control;
    sigemptyset(&control);
    sigaddset(&control, SIGINT);
    sigaddset(&control, SIGTERM);
    sigaddset(&control, SIGHUP);
    sigset_t previous;
    pthread_sigmask(SIG_BLOCK, &control, &previous);
    thread_ = std::thread([this] { run(); });
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

void log_queue::push(std::string_view lines) {
    std::lock_guard lock(mutex_);
    ++pushed_;
    const std::size_t waiting = bytes_.size() + writing_;
    if (waiting > 0 && waiting + lines.size() > capacity_) {
        ++done_;
        drop_locked(1);
        return;
    }
    bytes_.append(lines);
    ends_.push_back(bytes_.size());
    if (ends_.size() == 1) {
        queued_.notify_one();
    }
}

void log_queue::drop_locked(std::uint64_t lines) {
    dropped_ += lines;
    if (dropped_counter_ != nullptr) {
        metrics::bump(*dropped_counter_, lines);
    }
}

bool log_queue::drain(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    const auto target = pushed_;
    return written_.wait_until(lock, deadline, [&] { return done_ >= target; });
}

bool log_queue::finish(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    if (!thread_.joinable()) {
        return finished_; // finished before
    }
    finishing_ = true;
    queued_.notify_one();
    const bool done = written_.wait_until(lock, deadline, [&] { return finished_; });
    lock.unlock();
    // Joined, not left to end on its own: an exit that came first would find it running.
    if (done) {
        thread_.join();
    } else {
        thread_.detach(); // stuck in write(2): exit_group ends it
    }
    return done;
}

void log_queue::count_dropped_in(metrics::counter* dropped) {
    std::lock_guard lock(mutex_);
    dropped_counter_ = dropped;
}

std::uint64_t log_queue::dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_;
}

void log_queue::run() {
    // The batch being written; swapped with the queue's buffers, so that their memory is kept.
    std::string batch;
    std::vector<std::size_t> ends;
    // The last write failed part-way through a line (a disk full, a file size limit): the next
    // starts with a line end, so that its first line is not glued to the fragment (one invalid
    // JSON line of two, and one line lost without being counted).
    bool cut = false;
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            queued_.wait(lock, [&] { return !ends_.empty() || finishing_; });
            if (ends_.empty()) { // finishing, and everything written
                finished_ = true;
                written_.notify_all();
                return;
            }
            batch.swap(bytes_);
            ends.swap(ends_);
            writing_ = batch.size();
        }
        // One write for every line that waited, outside the lock: this is where the reader can
        // hold the thread.
        if (cut) {
            cut = write_all(fd_, "\n") != 1;
        }
        // Still cut (the line end did not go): the batch would join the fragment, and is lost.
        const std::size_t written = cut ? 0 : write_all(fd_, batch);
        cut = cut || (written != 0 && !std::binary_search(ends.begin(), ends.end(), written));
        // A line whose last byte did not go out is lost (written in part, or not at all).
        const auto lost = static_cast<std::uint64_t>(
            ends.end() - std::upper_bound(ends.begin(), ends.end(), written));
        {
            std::lock_guard lock(mutex_);
            writing_ = 0;
            done_ += ends.size();
            if (lost > 0) {
                drop_locked(lost);
            }
        }
        written_.notify_all();
        batch.clear();
        ends.clear();
    }
}

} // namespace sluice::app
