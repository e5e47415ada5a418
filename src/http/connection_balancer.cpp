// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/connection_balancer.hpp"

namespace sluice::http {

std::size_t connection_balancer::pick(std::size_t accepting) const noexcept {
    const auto own = open(accepting);
    std::size_t best = accepting;
    std::int64_t fewest = own;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
        const auto n = open(i);
        if (n < fewest) {
            best = i;
            fewest = n;
        }
    }
    return fewest + 1 < own ? best : accepting;
}

void connection_balancer::opened(std::size_t worker) noexcept {
    counts_[worker].value.fetch_add(1, std::memory_order_relaxed);
}

void connection_balancer::closed(std::size_t worker) noexcept {
    counts_[worker].value.fetch_sub(1, std::memory_order_relaxed);
}

std::int64_t connection_balancer::open(std::size_t worker) const noexcept {
    return counts_[worker].value.load(std::memory_order_relaxed);
}

} // namespace sluice::http
