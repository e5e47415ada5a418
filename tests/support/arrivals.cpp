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

void expect_on_time_as_a_rule(const std::vector<steady_time>& arrivals, milliseconds slot) {
    ASSERT_GE(arrivals.size(), 2u);
    std::vector<std::chrono::steady_clock::duration> lateness;
    for (std::size_t i = 1; i < arrivals.size(); ++i) {
        lateness.push_back(arrivals[i] - arrivals[0] - slot * static_cast<long long>(i));
    }
    const auto median = lateness.begin() + static_cast<std::ptrdiff_t>(lateness.size() / 2);
    std::nth_element(lateness.begin(), median, lateness.end());
    EXPECT_LT(*median, slot) << "median lateness " << ms_text(*median) << " ms of "
                             << lateness.size() << " arrivals: the schedule falls behind";
}

} // namespace sluice::test
