// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/keyed_hash.hpp"

#include <bit>
#include <chrono>
#include <cstring>
#include <random>

namespace sluice {
namespace {

struct sip_state {
    std::uint64_t v0, v1, v2, v3;

    void round() noexcept {
        v0 += v1;
        v1 = std::rotl(v1, 13);
        v1 ^= v0;
        v0 = std::rotl(v0, 32);
        v2 += v3;
        v3 = std::rotl(v3, 16);
        v3 ^= v2;
        v0 += v3;
        v3 = std::rotl(v3, 21);
        v3 ^= v0;
        v2 += v1;
        v1 = std::rotl(v1, 17);
        v1 ^= v2;
        v2 = std::rotl(v2, 32);
    }

    void absorb(std::uint64_t m, int rounds) noexcept {
        v3 ^= m;
        for (int i = 0; i < rounds; ++i) {
            round();
        }
        v0 ^= m;
    }
};

// Little-endian, as SipHash reads its words (this machine's order too).
std::uint64_t load_le(const char* p, std::size_t n) noexcept {
    std::uint64_t word = 0;
    for (std::size_t i = 0; i < n; ++i) {
        word |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
    }
    return word;
}

siphash_key random_key() noexcept {
    siphash_key key{};
    try {
        std::random_device source; // getrandom(2) on Linux
        for (auto& half : key) {
            half = (std::uint64_t{source()} << 32) | source();
        }
    } catch (...) {
        // No source of randomness (no /dev/urandom in a bare chroot): the clock's nanoseconds
        // are a guess an attacker has to make, better than a fixed key.
        const auto now = std::chrono::high_resolution_clock::now().time_since_epoch().count();
        key = {static_cast<std::uint64_t>(now), std::rotl(static_cast<std::uint64_t>(now), 29)};
    }
    return key;
}

} // namespace

std::uint64_t siphash(const siphash_key& key,
                      std::string_view data,
                      int compression_rounds,
                      int finalization_rounds) noexcept {
    sip_state s{key[0] ^ 0x736f6d6570736575ULL,
                key[1] ^ 0x646f72616e646f6dULL,
                key[0] ^ 0x6c7967656e657261ULL,
                key[1] ^ 0x7465646279746573ULL};
    const char* p = data.data();
    const std::size_t whole = data.size() / 8 * 8;
    for (std::size_t i = 0; i < whole; i += 8) {
        std::uint64_t m;
        std::memcpy(&m, p + i, 8);
        if constexpr (std::endian::native == std::endian::big) {
            m = load_le(p + i, 8);
        }
        s.absorb(m, compression_rounds);
    }
    const std::uint64_t last =
        (std::uint64_t{data.size()} << 56) | load_le(p + whole, data.size() - whole);
    s.absorb(last, compression_rounds);
    s.v2 ^= 0xff;
    for (int i = 0; i < finalization_rounds; ++i) {
        s.round();
    }
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

std::uint64_t keyed_hash(std::string_view data) noexcept {
    // Drawn on first use (a thread-safe static).
    static const siphash_key key = random_key();
    return siphash(key, data, 1, 3);
}

} // namespace sluice
