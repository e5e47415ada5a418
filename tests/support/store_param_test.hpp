// SPDX-License-Identifier: Apache-2.0
#pragma once

// A test fixture run once per store: GetParam() is "memory" or "redis". For "redis" it starts a
// real redis-server (random free port, temporary directory, no persistence) and skips the test
// when none is on PATH.

#include "support/limit_probe.hpp"
#include "support/redis_server.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace sluice::test {

class store_param_test : public ::testing::TestWithParam<const char*> {
protected:
    void SetUp() override {
        if (std::string(GetParam()) == "redis") {
            if (!redis_server::available()) {
                GTEST_SKIP() << "redis-server is not on PATH";
            }
            redis_ = std::make_unique<redis_server>();
        }
    }

    /// The rate-limit block: the store's lines (none for the memory store), then `rules`.
    std::string rate_limit(const std::string& rules) const {
        return (redis_ ? redis_store_yaml(redis_->port()) : std::string()) + rules;
    }

    /// Running on Redis, the server; nullptr on the memory store.
    std::unique_ptr<redis_server> redis_;
};

} // namespace sluice::test
