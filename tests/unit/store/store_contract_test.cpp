// SPDX-License-Identifier: Apache-2.0
// The store contract: the memory store (C++) and the Redis store (Lua) decide alike, to the
// millisecond, on the shared vectors in tests/vectors/leaky_bucket.txt and on each other.

#include "sluice/store/memory_store.hpp"
#include "sluice/store/redis_store.hpp"
#include "support/redis_server.hpp"
#include "support/run_coro.hpp"

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::store {
namespace {

using namespace std::chrono_literals;

//------------------------------------------------------------------------------
// The vectors file (its format is documented at its top)

struct step {
    double time_ms = 0;
    bool allowed = false;
    std::int64_t queue_size = 0;
    std::int64_t ms = 0; // delay when admitted, retry_after when rejected
    int line = 0;
};

struct scenario {
    std::string name;
    config::limit limit;
    std::vector<step> steps;
};

[[noreturn]] void parse_error(int line, const std::string& what) {
    throw std::runtime_error("leaky_bucket.txt:" + std::to_string(line) + ": " + what);
}

config::limit parse_limit(std::istringstream& words, int line) {
    config::limit l;
    std::string word;
    while (words >> word) {
        const auto eq = word.find('=');
        if (eq == std::string::npos) {
            parse_error(line, "expected name=value, got " + word);
        }
        const std::string name = word.substr(0, eq);
        const std::string value = word.substr(eq + 1);
        if (name == "capacity") {
            l.capacity = std::stoll(value);
        } else if (name == "flow") {
            l.flow_rate = std::stod(value);
        } else if (name == "mode" && (value == "shape" || value == "police")) {
            l.mode = value == "shape" ? config::shaping_mode::shape : config::shaping_mode::police;
        } else if (name == "max_delay") {
            l.max_delay = std::chrono::milliseconds(std::stoll(value));
        } else {
            parse_error(line, "unknown setting " + word);
        }
    }
    return l;
}

void parse_step(std::istringstream& words, int line, scenario& s) {
    step st;
    std::string verdict;
    if (!(words >> st.time_ms >> verdict >> st.queue_size >> st.ms) ||
        (verdict != "A" && verdict != "R")) {
        parse_error(line, "expected <time_ms> <A|R> <queue_size> <ms>");
    }
    st.allowed = verdict == "A";
    st.line = line;
    int count = 1;
    std::int64_t queue_step = 0;
    std::int64_t ms_step = 0;
    std::string repeat;
    if (words >> repeat) {
        if (repeat.size() < 2 || repeat[0] != 'x' || !(words >> queue_step >> ms_step)) {
            parse_error(line, "expected x<count> <queue_step> <ms_step>");
        }
        count = std::stoi(repeat.substr(1));
    }
    for (int i = 0; i < count; ++i) {
        s.steps.push_back(st);
        st.queue_size += queue_step;
        st.ms += ms_step;
    }
}

std::vector<scenario> load_vectors() {
    const std::string path = std::string(SLUICE_SOURCE_DIR) + "/tests/vectors/leaky_bucket.txt";
    std::ifstream in(path);
    if (!in) {
        throw std::runtime_error("cannot open " + path);
    }
    std::vector<scenario> scenarios;
    std::string text;
    for (int line = 1; std::getline(in, text); ++line) {
        text = text.substr(0, text.find('#'));
        std::istringstream words(text);
        std::string first;
        if (!(words >> first)) {
            continue;
        }
        if (first == "scenario") {
            scenario s;
            if (!(words >> s.name)) {
                parse_error(line, "scenario without a name");
            }
            s.limit = parse_limit(words, line);
            scenarios.push_back(std::move(s));
            continue;
        }
        if (scenarios.empty()) {
            parse_error(line, "request before any scenario");
        }
        std::istringstream request(text);
        parse_step(request, line, scenarios.back());
    }
    return scenarios;
}

//------------------------------------------------------------------------------
// The stores under test, each with a clock the test sets

class memory_backend {
public:
    static bool available() { return true; }

    outcome decide(const checks& c, double now_ms) {
        clock_.set(now_ms);
        return store_.acquire_now(c);
    }

private:
    manual_clock clock_;
    memory_store store_{clock_};
};

class redis_backend {
public:
    static bool available() { return test::redis_server::available(); }

    redis_backend() {
        auto settings = server_.settings();
        settings.timeout = 5s;
        store_ = std::make_unique<redis_store>(executor{ioc_.get_executor()}, settings, nullptr);
    }

    outcome decide(const checks& c, double now_ms) {
        store_->set_time_override_for_test(now_ms);
        return test::run_coro(ioc_, store_->acquire(c));
    }

private:
    test::redis_server server_;
    net::io_context ioc_;
    std::unique_ptr<redis_store> store_;
};

template <typename Backend>
class StoreContract : public ::testing::Test {
protected:
    void SetUp() override {
        if (!Backend::available()) {
            GTEST_SKIP() << "redis-server is not on PATH";
        }
        backend_ = std::make_unique<Backend>();
    }

    limiter::decision decide_one(const std::string& key, const config::limit& l, double now_ms) {
        auto out = backend_->decide(checks{check{key, &l}}, now_ms);
        EXPECT_FALSE(out.ec) << out.ec.message();
        EXPECT_EQ(out.decisions.size(), 1u);
        return out.decisions.empty() ? limiter::decision{} : out.decisions.front();
    }

    std::unique_ptr<Backend> backend_;
};

using backends = ::testing::Types<memory_backend, redis_backend>;

class backend_names {
public:
    template <typename T>
    static std::string GetName(int) {
        return std::is_same_v<T, memory_backend> ? "Memory" : "Redis";
    }
};

TYPED_TEST_SUITE(StoreContract, backends, backend_names);

TYPED_TEST(StoreContract, LeakyBucketVectors) {
    const auto scenarios = load_vectors();
    ASSERT_GE(scenarios.size(), 10u);
    for (const auto& s : scenarios) {
        const std::string key = "rate-limit:contract:" + s.name;
        for (const auto& st : s.steps) {
            SCOPED_TRACE("leaky_bucket.txt:" + std::to_string(st.line) + " (" + s.name + ")");
            const auto d = this->decide_one(key, s.limit, st.time_ms);
            ASSERT_EQ(d.allowed, st.allowed);
            EXPECT_EQ(s.limit.capacity - d.remaining, st.queue_size);
            if (st.allowed) {
                EXPECT_EQ(d.delay.count(), st.ms);
            } else {
                EXPECT_EQ(d.retry_after.count(), st.ms);
            }
        }
    }
}

// Several limits per request: all are charged, or none; a dry-run limit never blocks.
TYPED_TEST(StoreContract, ChargesEveryLimitOrNone) {
    config::limit narrow;
    narrow.capacity = 1;
    narrow.flow_rate = 1;
    auto wide = narrow;
    wide.capacity = 2;
    const checks both{check{"all-or-none:narrow", &narrow}, check{"all-or-none:wide", &wide}};

    auto first = this->backend_->decide(both, 1000);
    ASSERT_EQ(first.decisions.size(), 2u);
    EXPECT_TRUE(first.decisions[0].allowed && first.decisions[1].allowed);

    auto second = this->backend_->decide(both, 1000);
    ASSERT_EQ(second.decisions.size(), 2u);
    EXPECT_FALSE(second.decisions[0].allowed);
    EXPECT_TRUE(second.decisions[1].allowed);

    // The wide limit was not charged by the rejected request: one place left.
    EXPECT_EQ(this->decide_one("all-or-none:wide", wide, 1000).remaining, 0);
    EXPECT_FALSE(this->decide_one("all-or-none:wide", wide, 1000).allowed);

    auto dry = narrow;
    dry.dry_run = true;
    auto roomy = wide;
    roomy.capacity = 5;
    const checks shadowed{check{"all-or-none:narrow", &dry}, check{"all-or-none:roomy", &roomy}};
    auto third = this->backend_->decide(shadowed, 1000);
    ASSERT_EQ(third.decisions.size(), 2u);
    EXPECT_FALSE(third.decisions[0].allowed);
    EXPECT_TRUE(third.decisions[1].allowed);
    EXPECT_EQ(this->decide_one("all-or-none:roomy", roomy, 1000).remaining, 3);
}

// Beyond the vectors' fields: every field of every decision is identical in both stores.
TEST(StoreContractAgreement, MemoryAndRedisDecideIdentically) {
    if (!redis_backend::available()) {
        GTEST_SKIP() << "redis-server is not on PATH";
    }
    memory_backend memory;
    redis_backend redis;
    for (const auto& s : load_vectors()) {
        const std::string key = "rate-limit:agreement:" + s.name;
        const checks c{check{key, &s.limit}};
        for (const auto& st : s.steps) {
            SCOPED_TRACE("leaky_bucket.txt:" + std::to_string(st.line) + " (" + s.name + ")");
            auto from_memory = memory.decide(c, st.time_ms);
            auto from_redis = redis.decide(c, st.time_ms);
            ASSERT_FALSE(from_redis.ec) << from_redis.ec.message();
            ASSERT_EQ(from_memory.decisions.size(), 1u);
            ASSERT_EQ(from_redis.decisions.size(), 1u);
            const auto& m = from_memory.decisions[0];
            const auto& r = from_redis.decisions[0];
            EXPECT_EQ(m, r) << "memory: allowed " << m.allowed << " remaining " << m.remaining
                            << " reset " << m.reset_after.count() << " retry "
                            << m.retry_after.count() << " delay " << m.delay.count()
                            << "\n redis: allowed " << r.allowed << " remaining " << r.remaining
                            << " reset " << r.reset_after.count() << " retry "
                            << r.retry_after.count() << " delay " << r.delay.count();
        }
    }
}

} // namespace
} // namespace sluice::store
