// SPDX-License-Identifier: Apache-2.0
#pragma once

// Streamed body fingerprints. Big bodies (64 MiB) are never held in memory: the sender generates
// a deterministic pseudo-random pattern piece by piece and the receiver folds what it gets into a
// running hash, so "arrived byte-identical" becomes "same size and same hash".

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::test {

/// A running 64-bit FNV-1a hash: feed the bytes in any split, get the same value.
class fnv1a64 {
public:
    static constexpr std::uint64_t offset_basis = 0xcbf29ce484222325ULL;

    void update(const void* data, std::size_t size) noexcept;

    void update(std::string_view bytes) noexcept { update(bytes.data(), bytes.size()); }

    std::uint64_t value() const noexcept { return state_; }

private:
    std::uint64_t state_ = offset_basis;
};

/// The FNV-1a hash of `bytes`.
std::uint64_t hash_of(std::string_view bytes) noexcept;

/**
 * Writes bytes [offset, offset + size) of the pattern named by `seed` into `out`. The pattern is
 * a SplitMix64 stream, so any slice can be produced without generating what precedes it.
 */
void fill_pattern(std::uint64_t seed, std::uint64_t offset, char* out, std::size_t size) noexcept;

/// The first `size` bytes of the pattern, in memory (for small bodies).
std::string pattern_string(std::uint64_t seed, std::size_t size);

/// The FNV-1a hash of the first `size` bytes of the pattern, computed in 64 KiB pieces.
std::uint64_t pattern_hash(std::uint64_t seed, std::uint64_t size);

} // namespace sluice::test
