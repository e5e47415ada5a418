// SPDX-License-Identifier: Apache-2.0
#pragma once

// A request body held in memory: read ahead for the limiter's `json:` fields (cost.max-body) or
// by server.request-buffer-size (client_body.cpp), sent from there (forwarder.cpp). What it has
// allocated is counted in a gauge, sluice_request_body_buffer_bytes, so that an operator sees
// what the bodies coming in hold, and a test sees it freed once a request has gone upstream.

#include "sluice/metrics/metrics.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::http::detail {

class buffered_body {
public:
    /// Counts its allocation in `allocated`.
    explicit buffered_body(metrics::gauge& allocated) noexcept
        : allocated_(&allocated) {}

    ~buffered_body() {
        if (counted_ != 0) {
            allocated_->fetch_sub(counted_, std::memory_order_relaxed);
        }
    }

    buffered_body(const buffered_body&) = delete;
    buffered_body& operator=(const buffered_body&) = delete;

    /// The bytes of the body held (the room after them aside).
    std::size_t size() const noexcept { return filled_; }

    std::string_view view() const noexcept { return {bytes_.data(), filled_}; }

    /// The bytes made after the body for what comes next, not yet filled.
    std::size_t room() const noexcept { return bytes_.size() - filled_; }

    char* room_data() noexcept { return bytes_.data() + filled_; }

    /// The body and its room: every byte zero-filled since it was made or released (no room is
    /// made twice).
    std::size_t reserved() const noexcept { return bytes_.size(); }

    /// Makes the room `n` bytes more; only the new bytes are zero-filled, and the room's
    /// bytes stay as they were. The gauge follows the allocation.
    void add_room(std::size_t n) {
        bytes_.resize(bytes_.size() + n);
        recount();
    }

    /// The first `n` bytes of the room (n <= room()) are the body's now.
    void fill(std::size_t n) noexcept { filled_ += n; }

    /// Frees the bytes: the request has gone upstream and no retry will send it again.
    void release() noexcept {
        std::string{}.swap(bytes_);
        filled_ = 0;
        recount();
    }

private:
    /// What an empty string holds in itself, allocating nothing. (Not constexpr: clang 14 cannot
    /// evaluate libstdc++ 12's string constructor at compile time.)
    static inline const std::size_t inline_capacity = std::string().capacity();

    void recount() noexcept {
        const auto now = bytes_.capacity() > inline_capacity
                             ? static_cast<std::int64_t>(bytes_.capacity())
                             : std::int64_t{0};
        if (now != counted_) {
            allocated_->fetch_add(now - counted_, std::memory_order_relaxed);
            counted_ = now;
        }
    }

    metrics::gauge* allocated_;
    /// The body, `filled_` bytes, then its room. The room is kept between the pieces of a body
    /// read ahead: made again for each piece (resized up, then down), a body sent as chunks of
    /// one byte made a zero-filled 4-32 KiB per parse, two parses a byte.
    std::string bytes_;
    std::size_t filled_ = 0;
    /// What `allocated_` has of this body's.
    std::int64_t counted_ = 0;
};

} // namespace sluice::http::detail
