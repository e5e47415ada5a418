// SPDX-License-Identifier: Apache-2.0
#include "store/key_table.hpp"

#include "sluice/core/keyed_hash.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

namespace sluice::store {

static_assert(sizeof(std::size_t) == 8, "bucket_of assumes a 64-bit hash");

std::size_t key_table::hash(std::string_view key) noexcept {
    return keyed_hash(key); // a client chooses keys: see keyed_hash.hpp
}

key_table::~key_table() {
    for (node* n = newest_; n != nullptr;) {
        node* older = n->older_;
        destroy(n);
        n = older;
    }
}

// Fibonacci hashing: the bucket is taken from the top bits of the hash times 2^64 / phi, which
// depend on every bit of the hash. The store picks a shard with `hash % shards`, so within a
// shard the low bits are alike: a mask of them would leave most buckets empty.
std::size_t key_table::bucket_in(std::size_t h, int shift) noexcept {
    return static_cast<std::size_t>((h * 0x9e3779b97f4a7c15ULL) >> shift);
}

std::size_t key_table::bucket_of(std::size_t h) const noexcept {
    return bucket_in(h, bucket_shift_);
}

key_table::node* key_table::find(std::string_view key, std::size_t h) const noexcept {
    if (bucket_count_ == 0) {
        return nullptr;
    }
    for (node* n = buckets_[bucket_of(h)]; n != nullptr; n = n->next_) {
        if (n->key_size_ == key.size() &&
            std::memcmp(n->key().data(), key.data(), key.size()) == 0) {
            return n;
        }
    }
    return nullptr;
}

key_table::node& key_table::insert(std::string_view key, std::size_t h) {
    if (key.size() > max_key_size) {
        throw std::length_error("memory store: key too long");
    }
    // One block: the fields, then the text.
    const auto bytes = std::max(sizeof(node), node::text_offset() + key.size());
    node* n = new (::operator new(bytes)) node();
    n->key_size_ = static_cast<std::uint16_t>(key.size());
    if (!key.empty()) {
        std::memcpy(reinterpret_cast<char*>(n) + node::text_offset(), key.data(), key.size());
    }
    if (size_ >= bucket_count_) {
        try {
            rehash(std::max(min_buckets, bucket_count_ * 2));
        } catch (...) {
            destroy(n);
            throw;
        }
    }
    node*& head = buckets_[bucket_of(h)];
    n->next_ = head;
    head = n;
    push_newest(*n);
    ++size_;
    return *n;
}

void key_table::erase(node& n) noexcept {
    retired gone;
    unlink(n, gone);
}

void key_table::unlink(node& n, retired& out) noexcept {
    node** link = &buckets_[bucket_of(hash(n.key()))];
    while (*link != &n) {
        link = &(*link)->next_;
    }
    *link = n.next_;
    unlink_recency(n);
    out.push(n);
    --size_;
}

void key_table::retired::clear() noexcept {
    while (head_ != nullptr) {
        node* next = head_->next_;
        destroy(head_);
        head_ = next;
    }
    size_ = 0;
    buckets_.reset();
}

void key_table::touch(node& n) noexcept {
    if (newest_ != &n) {
        unlink_recency(n);
        push_newest(n);
    }
}

void key_table::shrink(retired& out) noexcept {
    if (size_ == 0) {
        out.buckets_ = std::move(buckets_);
        bucket_count_ = 0;
        bucket_shift_ = 64;
        return;
    }
    auto count = bucket_count_;
    while (count > min_buckets && size_ * 4 <= count) {
        count /= 2;
    }
    if (count != bucket_count_) {
        try {
            out.buckets_ = rehash(count);
        } catch (const std::bad_alloc&) {
            // Keep the buckets there are: they still hold every key.
        }
    }
}

std::size_t key_table::longest_chain_for_test() const noexcept {
    std::size_t longest = 0;
    for (std::size_t b = 0; b < bucket_count_; ++b) {
        std::size_t length = 0;
        for (const node* n = buckets_[b]; n != nullptr; n = n->next_) {
            ++length;
        }
        longest = std::max(longest, length);
    }
    return longest;
}

std::unique_ptr<key_table::node* []> key_table::rehash(std::size_t buckets) {
    auto fresh = std::make_unique<node*[]>(buckets); // all null
    int shift = 64;
    for (auto b = buckets; b > 1; b /= 2) {
        --shift;
    }
    for (std::size_t b = 0; b < bucket_count_; ++b) {
        for (node* n = buckets_[b]; n != nullptr;) {
            node* next = n->next_;
            node*& head = fresh[bucket_in(hash(n->key()), shift)];
            n->next_ = head;
            head = n;
            n = next;
        }
    }
    std::swap(buckets_, fresh);
    bucket_count_ = buckets;
    bucket_shift_ = shift;
    return fresh;
}

void key_table::unlink_recency(node& n) noexcept {
    (n.newer_ != nullptr ? n.newer_->older_ : newest_) = n.older_;
    (n.older_ != nullptr ? n.older_->newer_ : oldest_) = n.newer_;
    n.newer_ = n.older_ = nullptr;
}

void key_table::push_newest(node& n) noexcept {
    n.older_ = newest_;
    n.newer_ = nullptr;
    (newest_ != nullptr ? newest_->newer_ : oldest_) = &n;
    newest_ = &n;
}

void key_table::destroy(node* n) noexcept {
    n->~node();
    ::operator delete(n);
}

} // namespace sluice::store
