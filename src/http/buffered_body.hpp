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

    std::size_t size() const noexcept { return bytes_.size(); }

    char* data() noexcept { return bytes_.data(); }

    std::string_view view() const noexcept { return bytes_; }

    /// As std::string::resize (the new bytes zero-filled); the gauge follows the allocation.
    void resize(std::size_t n) {
        bytes_.resize(n);
        recount();
    }

    /// Frees the bytes: the request has gone upstream and no retry will send it again.
    void release() noexcept {
        std::string{}.swap(bytes_);
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
    std::string bytes_;
    /// What `allocated_` has of this body's.
    std::int64_t counted_ = 0;
};

} // namespace sluice::http::detail
