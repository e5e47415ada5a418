// SPDX-License-Identifier: Apache-2.0
#include "sluice/io/frame_pool.hpp"
#include "sluice/io/net.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace sluice {
namespace {

#ifdef SLUICE_FRAME_POOL

namespace fp = frame_pool;

/// Each test on a fresh thread of its own, whose lists start empty and go with it.
template <typename F>
void on_new_thread(F f) {
    std::thread t(f);
    t.join();
}

TEST(FramePool, AFreedFrameServesTheNextFrameOfItsClassOnly) {
    on_new_thread([] {
        void* a = fp::allocate(700);
        fp::deallocate(a, 700);
        EXPECT_EQ(fp::this_thread_lists()->kept(), fp::class_of(700) * fp::granule);
        void* other = fp::allocate(100); // another class: a block of its own
        EXPECT_NE(other, a);
        void* same = fp::allocate(660); // 700's class (641 to 704 bytes): the freed block
        EXPECT_EQ(same, a);
        EXPECT_EQ(fp::this_thread_lists()->kept(), 0u);
        fp::deallocate(other, 100);
        fp::deallocate(same, 660);
    });
}

TEST(FramePool, AFrameAboveTheLargestClassIsNotKept) {
    on_new_thread([] {
        const std::size_t large = fp::classes * fp::granule + 1;
        void* p = fp::allocate(large);
        fp::deallocate(p, large);
        EXPECT_EQ(fp::this_thread_lists()->kept(), 0u);
    });
}

TEST(FramePool, NoMoreThanItsBudgetIsKeptPerThread) {
    on_new_thread([] {
        std::vector<void*> frames;
        const std::size_t n = 2 * fp::kept_bytes_max / 1024;
        for (std::size_t i = 0; i < n; ++i) {
            frames.push_back(fp::allocate(1000));
        }
        for (void* p : frames) {
            fp::deallocate(p, 1000);
        }
        const auto block = fp::class_of(1000) * fp::granule;
        EXPECT_EQ(fp::this_thread_lists()->kept(), fp::kept_bytes_max / block * block);
    });
}

TEST(FramePool, CoroutineFramesComeFromItAndGoBackToIt) {
    on_new_thread([] {
        net::io_context ioc;
        const auto before = fp::this_thread_lists()->kept();
        bool ran = false;
        net::co_spawn(
            ioc,
            [&ran]() -> awaitable<void> {
                ran = true;
                co_return;
            },
            net::detached);
        ioc.run();
        ASSERT_TRUE(ran);
        // The coroutine's frame (and co_spawn's own) came back to this thread's lists: the
        // specialisation is what Asio used.
        EXPECT_GT(fp::this_thread_lists()->kept(), before);
    });
}

#else

TEST(FramePool, NotBuiltOnThisAsio) {
    GTEST_SKIP() << "frame_pool.hpp is written against Asio 1.81";
}

#endif

} // namespace
} // namespace sluice
