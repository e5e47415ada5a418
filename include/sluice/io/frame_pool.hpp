// SPDX-License-Identifier: Apache-2.0
#pragma once

// The memory of Asio's coroutine frames: per thread, a free list per 64-byte size class.
//
// Asio 1.81 recycles frames through a small per-thread cache (BOOST_ASIO_RECYCLING_ALLOCATOR_
// CACHE_SIZE blocks, taken first fit, nothing over 1020 bytes). A worker with a few requests in
// flight stays within it; one with 64 (wrk -c64, and any busy proxy) frees and allocates frames
// in bursts that outrun it, so about 4.5 frames per request (6.5 on the Redis store, whose
// requests stay in flight longer) went to malloc's slow path: 1.6k instructions per request of
// malloc and free, 3.4k on Redis (callgrind). A larger cache costs more in its first-fit scan
// than it saves (64 blocks: 24.3k instructions per request where 16 made 22.4k). These lists
// take and give back a block in a few instructions: 22.4k to 20.0k per request on the memory
// store, 26.5k to 22.7k on Redis (docs/benchmarks.md).
//
// How: an explicit specialisation of Asio's allocate/deallocate for its frame tag. Every
// translation unit of a program must see it, or frames could be taken from one allocator and
// given to the other: CMakeLists.txt force-includes this header into everything that builds
// against sluice_net. It is written against Asio 1.81's thread_info_base and compiled only there;
// elsewhere Asio's own cache is used.

#include <boost/version.hpp>

#if BOOST_VERSION / 100 == 1081 && !defined(BOOST_ASIO_DISABLE_AWAITABLE_FRAME_RECYCLING)

#include <boost/asio/detail/thread_info_base.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <new>

#define SLUICE_FRAME_POOL 1

namespace sluice::frame_pool {

/// Blocks are kept in classes of this many bytes...
inline constexpr std::size_t granule = 64;
/// ...up to this many classes (2 KiB); a larger frame goes to operator new and back at once.
inline constexpr std::size_t classes = 32;
/// At most this many bytes of free frames kept per thread: a burst of connections can leave no
/// more behind. One request's frames are under 3 KiB (912, 784, 544, 224 bytes seen).
inline constexpr std::size_t kept_bytes_max = 256 * 1024;

/// The size class of a frame of `size` bytes, from 1; above `classes`: none.
constexpr std::size_t class_of(std::size_t size) noexcept {
    return (size + granule - 1) / granule;
}

struct free_block {
    free_block* next;
};

/// One thread's free frames. Freed with the thread; a frame freed on that thread after that
/// (an io_context destroyed late, with coroutines in it) goes straight to operator delete.
class thread_lists {
public:
    thread_lists() = default;
    thread_lists(const thread_lists&) = delete;
    thread_lists& operator=(const thread_lists&) = delete;
    ~thread_lists();

    void* take(std::size_t c) noexcept {
        free_block* b = head_[c - 1];
        if (b != nullptr) {
            head_[c - 1] = b->next;
            kept_ -= c * granule;
        }
        return b;
    }

    bool keep(void* p, std::size_t c) noexcept {
        if (kept_ + c * granule > kept_bytes_max) {
            return false;
        }
        auto* b = static_cast<free_block*>(p);
        b->next = head_[c - 1];
        head_[c - 1] = b;
        kept_ += c * granule;
        return true;
    }

    std::size_t kept() const noexcept { return kept_; }

private:
    std::array<free_block*, classes> head_{};
    std::size_t kept_ = 0;
};

/// Set when this thread's lists are gone (trivially destructible: readable until the very end).
inline thread_local bool thread_lists_gone = false;

inline thread_lists::~thread_lists() {
    for (free_block* b : head_) {
        while (b != nullptr) {
            free_block* next = b->next;
            ::operator delete(b);
            b = next;
        }
    }
    thread_lists_gone = true;
}

/// This thread's lists, or nullptr once they are gone.
inline thread_lists* this_thread_lists() noexcept {
    if (thread_lists_gone) {
        return nullptr;
    }
    static thread_local thread_lists lists;
    return &lists;
}

inline void* allocate(std::size_t size) {
    const std::size_t c = class_of(size);
    if (c > classes) {
        return ::operator new(size);
    }
    if (auto* lists = this_thread_lists()) {
        if (void* p = lists->take(c)) {
            return p;
        }
    }
    // The class's full size, so that the block can serve any frame of its class later.
    return ::operator new(c* granule);
}

inline void deallocate(void* p, std::size_t size) noexcept {
    const std::size_t c = class_of(size);
    if (c <= classes) {
        if (auto* lists = this_thread_lists(); lists != nullptr && lists->keep(p, c)) {
            return;
        }
    }
    ::operator delete(p);
}

} // namespace sluice::frame_pool

namespace boost::asio::detail {

// Frames are allocated with Asio's default alignment, which operator new gives.
template <>
inline void* thread_info_base::allocate<thread_info_base::awaitable_frame_tag>(
    thread_info_base::awaitable_frame_tag, thread_info_base*, std::size_t size, std::size_t) {
    return sluice::frame_pool::allocate(size);
}

template <>
inline void thread_info_base::deallocate<thread_info_base::awaitable_frame_tag>(
    thread_info_base::awaitable_frame_tag, thread_info_base*, void* pointer, std::size_t size) {
    sluice::frame_pool::deallocate(pointer, size);
}

} // namespace boost::asio::detail

#endif
