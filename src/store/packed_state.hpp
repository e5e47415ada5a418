// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/limiter/algorithm.hpp"

#include <cstdint>

namespace sluice::store {

/**
 * A limiter::state as the memory store keeps it per key: 24 bytes plus a kind byte, where the
 * std::variant takes 48 (its largest alternative, the sliding window's vector with two more
 * words, plus the index, padded). The buckets' states are a count and a time in two parts
 * (limiter::split_ms), the fixed window's a count and a time, a concurrency state a count: they
 * live in the three words as they are, bit for bit. Only
 * a sliding window's state, whose log grows with its limit anyway, goes to a block of its own,
 * which the first word then points to. The kind (the variant's index) is kept apart, by the
 * owner, so that it can share a word with the owner's other small fields (see key_table's node).
 *
 * Nothing here computes: `unpack(pack(s)) == s` for every state, the index included, so the
 * store's decisions are the algorithms' own (the shared vectors and the fuzz target check it).
 */
struct packed_state {
    union {
        /// queue_size, tokens, count or in_flight.
        std::int64_t count = 0;
        /// SLIDING_WINDOW: its state, owned (see `clear`).
        limiter::sliding_window_state* sliding;
    };

    /// The whole ms of last_leak or last_refill, or window_start_ms; a CONCURRENCY count's epoch;
    /// 0 for the others.
    double ms = 0;

    /// The fraction of a ms of last_leak or last_refill; 0 for the others.
    double ms_fraction = 0;
};

/// The variant index of limiter::state that a fresh packed_state (zeros) holds: a fresh
/// leaky_bucket_state, as a default limiter::state is.
inline constexpr std::uint8_t fresh_kind = 0;

/// A copy of the state that `packed` (of kind `kind`) holds. Allocates only for a sliding window.
limiter::state unpack(const packed_state& packed, std::uint8_t kind);

/// The state that `packed` holds, moved out: a sliding window's log is left empty in its block,
/// which stays for `pack` to reuse. Never allocates.
limiter::state take(packed_state& packed, std::uint8_t kind) noexcept;

/// Stores `state` in `packed` and its index in `kind`, freeing what `packed` held. A sliding
/// window's state moves into the block already there, or a new one (the only allocation).
void pack(limiter::state&& state, packed_state& packed, std::uint8_t& kind);

/// Frees what `packed` holds (a sliding window's block) and leaves a fresh state.
void clear(packed_state& packed, std::uint8_t& kind) noexcept;

} // namespace sluice::store
