// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "store/packed_state.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace sluice::store {

/**
 * One shard's keys in the memory store: a hash table whose nodes are the keys, chained per
 * bucket, and a recency list through the same nodes. It exists for memory: an idle key is
 * most of what a large memory store holds. As a std::unordered_map<std::string, entry> node a
 * key took 193 bytes of RSS (bench/memory, measure (d), 1,000,000 keys of 26 to 31 bytes): a
 * 144-byte block (the std::string, the 48-byte std::variant state, the recency links, a pointer
 * back to the key, the cached hash, the chain link) plus the key's text in a 48-byte block of
 * its own beyond 15 bytes, plus the buckets. Here a key is one block: three links, its
 * idle-from time, its state packed into 24 bytes (packed_state.hpp), its length and kind, and
 * its text inline, 59 bytes before the text: a 96-byte block for a key of up to 29 bytes, 112 up
 * to 45; plus 8 to 16 bytes of buckets. Measured the same way with a 16-byte state (53 bytes
 * before the text): 114 bytes of RSS per key (and 106.5 bytes of heap per key of up to 35
 * bytes, 100,000 of them, in this table alone); the buckets' time took 8 more bytes for its
 * fraction (limiter::split_ms). No hash is kept:
 * a chain compares lengths before bytes, and a rehash, or the erasure of a single key, hashes
 * the text again.
 *
 * Nodes never move (a rehash relinks them), so a node pointer stays valid until that node is
 * erased. The buckets double when the keys outnumber them, and halve only in `shrink` (the
 * store's periodic sweep calls it), so that the memory of drained keys comes back. Not
 * thread-safe: the shard's mutex guards it. What `unlink_if`, `unlink` and `shrink` let go of
 * goes to a `retired`, which frees it when it goes: the caller lets the mutex go first.
 */
class key_table {
public:
    /// A key and what the store keeps for it. Allocated with its text right after its fields.
    class node {
    public:
        std::string_view key() const noexcept {
            return {reinterpret_cast<const char*>(this) + text_offset(), key_size_};
        }

        /// A copy of the key's state.
        limiter::state state() const { return unpack(state_, kind_); }

        /// Replaces the key's state.
        void set_state(limiter::state&& s) { pack(std::move(s), state_, kind_); }

        /// The key's state, moved out (for a change in place: set it back after).
        limiter::state take_state() noexcept { return take(state_, kind_); }

        /// From this clock reading on, the state equals a fresh one: the key may be forgotten.
        double idle_at_ms() const noexcept { return idle_at_ms_; }

        void set_idle_at_ms(double ms) noexcept { idle_at_ms_ = ms; }

    private:
        friend class key_table;

        node() = default;

        ~node() { clear(state_, kind_); }

        node(const node&) = delete;
        node& operator=(const node&) = delete;

        static constexpr std::size_t text_offset() noexcept;

        node* next_ = nullptr;  // in its bucket's chain
        node* newer_ = nullptr; // in the recency list
        node* older_ = nullptr;
        double idle_at_ms_ = 0;
        packed_state state_;
        std::uint16_t key_size_ = 0;
        std::uint8_t kind_ = fresh_kind;
        // The text follows kind_, in the block's bytes from text_offset() on (the node's own
        // padding included: a node is never copied, so nothing writes that padding).
    };

    /// What a table let go of: nodes taken out, and buckets a shrink replaced; freed when this
    /// goes (or is cleared). The store lets them go under its shard's lock and frees them after
    /// it, so that a worker waiting for that lock does not wait for the allocator too: freeing
    /// a shard's old buckets (64 KiB at 375,000 keys) made glibc merge every node freed before
    /// it, 0.4 to 0.6 ms.
    class retired {
    public:
        retired() = default;

        ~retired() { clear(); }

        retired(const retired&) = delete;
        retired& operator=(const retired&) = delete;

        /// Frees all it holds.
        void clear() noexcept;

        /// The nodes held.
        std::size_t size() const noexcept { return size_; }

        /// Whether it holds buckets a shrink replaced.
        bool holds_buckets() const noexcept { return buckets_ != nullptr; }

        /// The node taken out last, or null: its key and state are still readable.
        const node* last() const noexcept { return head_; }

    private:
        friend class key_table;

        void push(node& n) noexcept {
            n.next_ = head_;
            head_ = &n;
            ++size_;
        }

        node* head_ = nullptr; // through next_
        std::size_t size_ = 0;
        std::unique_ptr<node*[]> buckets_; // one shrink's: a slice of the sweep shrinks once
    };

    /**
     * Where a walk of the buckets has come to, as a point of the hash's space rather than a
     * bucket's index: bucket b of n holds the keys whose Fibonacci hash is in [b, b + 1) x
     * 2^64 / n, so a point stays between the same keys when the buckets double or halve, and a
     * walk taken up again after a rehash looks at each key still there that it had not reached
     * (after a halving, it may look at a few again).
     */
    struct walk_position {
        std::uint64_t at = 0;
        bool done = false;
    };

    /// Keys longer than this cannot be held (insert throws). None is: a key is at most about
    /// 2.2 KB, 8 parts of at most 257 bytes (rate_limit_key.hpp) and a rule's name of at most 128
    /// (src/config/rules.cpp). Two bytes of length rather than four keep a 29-byte key, such as
    /// `rate-limit:127.0.0.1:/k123456`, in a 96-byte block.
    static constexpr std::size_t max_key_size = UINT16_MAX;

    /// The hash of a key, as `find` and `insert` take it; the store also picks shards with it.
    static std::size_t hash(std::string_view key) noexcept;

    key_table() = default;
    ~key_table();
    key_table(const key_table&) = delete;
    key_table& operator=(const key_table&) = delete;

    /// The node of `key` (whose hash is `h`), or null.
    node* find(std::string_view key, std::size_t h) const noexcept;

    /**
     * Adds `key` (whose hash is `h`), which must not be held yet, as the most recently used,
     * with a fresh state and idle_at_ms 0. Throws std::length_error for a key longer than
     * max_key_size, or std::bad_alloc; either way the table is unchanged.
     */
    node& insert(std::string_view key, std::size_t h);

    /// Forgets `n` and frees it.
    void erase(node& n) noexcept;

    /// Forgets `n` and puts it in `out`, which frees it later.
    void unlink(node& n, retired& out) noexcept;

    /// Makes `n` the most recently used.
    void touch(node& n) noexcept;

    /// The least recently used node, or null when empty.
    node* oldest() const noexcept { return oldest_; }

    /// The most recently used node, or null when empty.
    node* newest() const noexcept { return newest_; }

    /// The node used just before `n` (toward the oldest), or null.
    static node* older(const node& n) noexcept { return n.older_; }

    /// The node used just after `n` (toward the newest), or null.
    static node* newer(const node& n) noexcept { return n.newer_; }

    /// Forgets and frees every node for which `pred(node&)` is true; returns how many.
    template <class Pred>
    std::size_t erase_if(Pred pred);

    /**
     * Looks at the buckets from `pos` on, at most `max_buckets` of them (each whole), and puts
     * every node for which `pred(node&)` is true in `out`, forgotten; moves `pos` past them
     * (`done` after the last bucket, or at once in a table without buckets). Returns the buckets
     * looked at: at most `max_buckets`, at least 1 while any is left.
     */
    template <class Pred>
    std::size_t unlink_if(walk_position& pos, std::size_t max_buckets, Pred pred, retired& out);

    /// Halves the buckets while the keys fill at most a quarter of them (never below the
    /// first allocation's count), and lets them all go when there is no key. The buckets
    /// replaced go to `out` (what it held of an earlier shrink is freed now).
    void shrink(retired& out) noexcept;

    std::size_t size() const noexcept { return size_; }

    std::size_t bucket_count() const noexcept { return bucket_count_; }

    /// The most nodes one bucket holds (the tests check that the keys spread).
    std::size_t longest_chain_for_test() const noexcept;

private:
    static constexpr std::size_t min_buckets = 16;

    static std::size_t bucket_in(std::size_t h, int shift) noexcept;
    std::size_t bucket_of(std::size_t h) const noexcept;
    /// Returns the buckets replaced.
    std::unique_ptr<node*[]> rehash(std::size_t buckets);
    void unlink_recency(node& n) noexcept;
    void push_newest(node& n) noexcept;
    static void destroy(node* n) noexcept;

    std::unique_ptr<node*[]> buckets_;
    std::size_t bucket_count_ = 0; // 0 or a power of two, at least min_buckets
    int bucket_shift_ = 64;        // 64 - log2(bucket_count_)
    std::size_t size_ = 0;
    node* newest_ = nullptr;
    node* oldest_ = nullptr;
};

constexpr std::size_t key_table::node::text_offset() noexcept {
    return offsetof(node, kind_) + sizeof(kind_);
}

template <class Pred>
std::size_t key_table::erase_if(Pred pred) {
    retired gone;
    walk_position all;
    unlink_if(all, bucket_count_, pred, gone);
    return gone.size();
}

template <class Pred>
std::size_t
key_table::unlink_if(walk_position& pos, std::size_t max_buckets, Pred pred, retired& out) {
    if (pos.done || bucket_count_ == 0) {
        pos.done = true;
        return 0;
    }
    const auto first = static_cast<std::size_t>(pos.at >> bucket_shift_);
    const auto last =
        first + std::min(std::max<std::size_t>(max_buckets, 1), bucket_count_ - first);
    const auto before = out.size();
    for (std::size_t b = first; b < last; ++b) {
        node** link = &buckets_[b];
        while (*link != nullptr) {
            node* n = *link;
            if (pred(*n)) {
                *link = n->next_;
                unlink_recency(*n);
                out.push(*n);
            } else {
                link = &n->next_;
            }
        }
    }
    size_ -= out.size() - before;
    pos.done = last == bucket_count_;
    pos.at = pos.done ? 0 : static_cast<std::uint64_t>(last) << bucket_shift_;
    return last - first;
}

} // namespace sluice::store
