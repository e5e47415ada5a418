// SPDX-License-Identifier: Apache-2.0
#include "support/body_pattern.hpp"

#include <algorithm>
#include <vector>

namespace sluice::test {

namespace {

constexpr std::uint64_t fnv_prime = 0x100000001b3ULL;

// SplitMix64's output function applied to a counter: one 64-bit word per 8 bytes of pattern.
std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t index) noexcept {
    std::uint64_t z = seed + (index + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

} // namespace

void fnv1a64::update(const void* data, std::size_t size) noexcept {
    const auto* bytes = static_cast<const unsigned char*>(data);
    std::uint64_t state = state_;
    for (std::size_t i = 0; i < size; ++i) {
        state = (state ^ bytes[i]) * fnv_prime;
    }
    state_ = state;
}

std::uint64_t hash_of(std::string_view bytes) noexcept {
    fnv1a64 hash;
    hash.update(bytes);
    return hash.value();
}

void fill_pattern(std::uint64_t seed, std::uint64_t offset, char* out, std::size_t size) noexcept {
    std::size_t i = 0;
    while (i < size) {
        const std::uint64_t position = offset + i;
        const std::uint64_t word = pattern_word(seed, position / 8);
        // Emit the rest of this word's bytes at once: one SplitMix64 step per 8 bytes.
        for (auto byte = position % 8; byte < 8 && i < size; ++byte, ++i) {
            out[i] = static_cast<char>((word >> (8 * byte)) & 0xff);
        }
    }
}

std::string pattern_string(std::uint64_t seed, std::size_t size) {
    std::string bytes(size, '\0');
    fill_pattern(seed, 0, bytes.data(), size);
    return bytes;
}

std::uint64_t pattern_hash(std::uint64_t seed, std::uint64_t size) {
    std::vector<char> piece(64 * 1024);
    fnv1a64 hash;
    for (std::uint64_t offset = 0; offset < size;) {
        const auto n =
            static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), size - offset));
        fill_pattern(seed, offset, piece.data(), n);
        hash.update(piece.data(), n);
        offset += n;
    }
    return hash.value();
}

} // namespace sluice::test
