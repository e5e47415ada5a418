// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice {

/// A SipHash key: 128 bits.
using siphash_key = std::array<std::uint64_t, 2>;

/// SipHash-c-d (Aumasson and Bernstein) of `data` under `key`, rounds as given: 2-4 is the
/// reference function (its published vectors test this one), 1-3 what `keyed_hash` uses.
std::uint64_t siphash(const siphash_key& key,
                      std::string_view data,
                      int compression_rounds,
                      int finalization_rounds) noexcept;

/**
 * The hash of every table keyed by text a peer chooses (rate-limit keys carry its address, path
 * and headers): SipHash-1-3 under a key drawn at random once per process, as Rust's and Python's
 * tables do. An unkeyed hash (libstdc++'s std::hash is MurmurHash2 with a fixed seed, which has
 * seed-independent collisions) lets a client compute keys that all land in one chain, and every
 * lookup in that table then walks them all, under its shard's lock.
 */
std::uint64_t keyed_hash(std::string_view data) noexcept;

/// `keyed_hash` as an unordered container's hasher; transparent, so that a lookup by
/// string_view builds no string.
struct keyed_string_hash {
    using is_transparent = void;

    std::size_t operator()(std::string_view data) const noexcept { return keyed_hash(data); }
};

} // namespace sluice
