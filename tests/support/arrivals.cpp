// SPDX-License-Identifier: Apache-2.0
#include "support/arrivals.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace sluice::test {

namespace {

using std::chrono::milliseconds;

std::string ms_text(std::chrono::steady_clock::duration d) {
    return std::to_string(std::chrono::duration_cast<milliseconds>(d).count());
}

} // namespace

double decided_requests(std::uint16_t admin, const std::string& rule) {
    const std::string m = scrape_metrics(admin);
    const auto series = [&rule](const char* decision) {
        return "sluice_requests_total{decision=\"" + std::string(decision) + "\",rule=\"" + rule +
               "\"}";
    };
    return metric_or_zero(m, "sluice_held_requests_total") +
           metric_or_zero(m, "sluice_held_overflow_total") + metric_or_zero(m, series("allowed")) +
           metric_or_zero(m, series("rejected"));
}

long long slots_in(std::chrono::steady_clock::duration span, milliseconds slot) {
    return static_cast<long long>(span / slot);
}

long long count_status(const std::vector<exchange>& exchanges, unsigned status) {
    return std::count_if(exchanges.begin(), exchanges.end(), [status](const exchange& e) {
        return e.status == status;
    });
}

steady_time first_received(const std::vector<exchange>& exchanges) {
    auto first = steady_time::max();
    for (const auto& e : exchanges) {
        first = std::min(first, e.received);
    }
    return first;
}

std::map<std::string, steady_time> arrivals_by_target(const recording_upstream& upstream) {
    std::map<std::string, steady_time> arrivals;
    for (const auto& r : upstream.requests()) {
        arrivals.emplace(r.target, r.arrival);
    }
    return arrivals;
}

std::vector<steady_time> sorted_arrivals(const recording_upstream& upstream) {
    std::vector<steady_time> arrivals;
    for (const auto& r : upstream.requests()) {
        arrivals.push_back(r.arrival);
    }
    std::sort(arrivals.begin(), arrivals.end());
    return arrivals;
}

void expect_on_slots(const std::vector<steady_time>& arrivals,
                     milliseconds slot,
                     steady_time lower,
                     steady_time upper,
                     milliseconds late) {
    int off = 0;
    std::string first_off;
    for (std::size_t i = 0; i < arrivals.size(); ++i) {
        const auto at = slot * static_cast<long long>(i);
        if (arrivals[i] >= lower + at - store_clock_slack && arrivals[i] <= upper + at + late) {
            continue;
        }
        if (off++ == 0) {
            first_off = "arrival " + std::to_string(i) + " at " + ms_text(arrivals[i] - lower) +
                        " ms after the head was sent; its slot opens at " + ms_text(at) +
                        " + [0, " + ms_text(upper - lower) + "] ms";
        }
    }
    EXPECT_EQ(off, 0) << off << " arrivals off their slots; first: " << first_off;
}

void expect_at_most_per_second(const recording_upstream& upstream, std::size_t limit) {
    auto requests = upstream.requests();
    std::sort(requests.begin(), requests.end(), [](const auto& x, const auto& y) {
        return x.arrival < y.arrival;
    });
    std::vector<steady_time> times;
    for (const auto& r : requests) {
        times.push_back(r.arrival);
    }
    const std::size_t worst = max_in_window(times, milliseconds(1000));
    std::string crowd;
    for (std::size_t i = 0; worst > limit && i < times.size(); ++i) {
        const auto begin = times.begin() + static_cast<std::ptrdiff_t>(i);
        if (static_cast<std::size_t>(
                std::upper_bound(begin, times.end(), times[i] + milliseconds(1000)) - begin) ==
            worst) {
            for (auto j = i; j < i + worst; ++j) {
                crowd += requests[j].target + "@" + ms_text(times[j] - times.front()) + "ms ";
            }
            break;
        }
    }
    EXPECT_LE(worst, limit) << "densest second: " << crowd;
}

} // namespace sluice::test
