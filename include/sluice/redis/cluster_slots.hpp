// SPDX-License-Identifier: Apache-2.0
#pragma once

// Redis Cluster's key slots and the slot map (issue 16, docs/redis-cluster.md): which of the
// 16384 slots a key hashes to, and which primary owns each slot, as `CLUSTER SLOTS` tells. Pure
// functions, no I/O: the cluster client (a later slice) asks, this reads the answer.

#include "sluice/redis/reply.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::redis {

inline constexpr std::size_t cluster_slots = 16384;

/// CRC16 as the Redis Cluster specification defines it (XMODEM: polynomial 0x1021, initial value
/// 0, no reflection, no final xor): crc16("123456789") = 0x31C3.
std::uint16_t crc16(std::string_view bytes) noexcept;

/**
 * The part of `key` that decides its slot: the key's hash tag, i.e. what lies between its first
 * '{' and the first '}' after that, when that is at least one byte; otherwise the whole key.
 * ("{user}.a" and "{user}.b" share one slot; "a{}{b}" hashes whole; "a{{b}}c" hashes "{b".)
 */
std::string_view hashed_part(std::string_view key) noexcept;

/// The slot of `key`: crc16(hashed_part(key)) mod 16384, as `CLUSTER KEYSLOT` answers.
std::uint16_t key_slot(std::string_view key) noexcept;

/// The longest host a node may have: a DNS name's 253 bytes.
inline constexpr std::size_t max_node_host = 253;

/**
 * Whether `host`, as a Cluster node announced it (a slot map's primary, a MOVED or ASK), can be
 * a host to connect to: 1 to `max_node_host` bytes of letters, digits, '-', '.', '_' and ':'
 * (a host name, an IPv4 address, an unbracketed IPv6 address). Anything else (a space, a control
 * byte, a quote, a slash, a long text) is a bad reply: sluice would otherwise connect to it, log
 * it and make it a metric's label.
 */
bool is_node_host(std::string_view host) noexcept;

/**
 * The most primaries a slot map may name. Each worker keeps a connection to each, and the
 * descriptors sluice sets aside for a worker's Redis connections (app/connection_cap.hpp:
 * 64) reckon this many plus the 16 to nodes outside the map (`cluster_options::
 * max_other_nodes`). It also keeps short the steps that look at every primary (a map read
 * compares the old map's with the new one's).
 */
inline constexpr std::size_t max_cluster_primaries = 48;

/// A node of the cluster as the map names it.
struct cluster_node {
    std::string host;
    std::uint16_t port = 0;
    /// The node's id (40 hex characters), empty when the reply had none.
    std::string id;

    friend bool operator==(const cluster_node&, const cluster_node&) = default;
};

/// Which primary owns each slot. A slot no range covers has no owner.
struct slot_map {
    static constexpr std::uint16_t no_owner = 0xffff;

    /// Each primary once, in the order the reply first named it.
    std::vector<cluster_node> primaries;
    /// By slot: an index into `primaries`, or no_owner.
    std::array<std::uint16_t, cluster_slots> owner;

    slot_map() noexcept { owner.fill(no_owner); }

    /// The primary that owns `slot`; nullptr when none does (or slot >= 16384).
    const cluster_node* owner_of(std::size_t slot) const noexcept {
        return slot < cluster_slots && owner[slot] != no_owner ? &primaries[owner[slot]] : nullptr;
    }

    /// How many slots have an owner (16384 in a healthy cluster).
    std::size_t covered() const noexcept;
};

/// What reading a `CLUSTER SLOTS` reply came to: a map, or why the reply is not one.
struct slot_map_result {
    std::optional<slot_map> map;
    std::string error;
};

/**
 * Reads a `CLUSTER SLOTS` reply: an array of ranges, each [start, end, primary, replica...] with
 * each node [host, port, id?, ...]. A primary announced with an empty host is the node that was
 * asked (`asked_host`). Refused, naming the first fault: anything but that shape, a slot outside
 * 0..16383, start > end, two ranges sharing a slot, a port outside 1..65535, a primary whose host
 * is unknown ("?" or nil) or not `is_node_host`, more than `max_cluster_primaries` primaries (the
 * error names how many). Replicas are read for
 * their shape only (the map routes to primaries). Linear in the reply.
 */
slot_map_result parse_cluster_slots(const reply& r, std::string_view asked_host);

/// An error reply that sends a command elsewhere or again.
struct redirection {
    enum class kind {
        moved,    // "MOVED <slot> <host>:<port>": the slot lives there now
        ask,      // "ASK <slot> <host>:<port>": migrating; ASKING, then there, once
        tryagain, // "TRYAGAIN ...": the keys are split by a migration; again, shortly
    };

    kind type = kind::moved;
    std::uint16_t slot = 0;
    std::string host; // moved and ask only
    std::uint16_t port = 0;
};

/**
 * Reads an error reply's text as a redirection; nullopt for any other error, and for a MOVED or
 * ASK whose slot (0..16383) or address (`host:port`, port 1..65535, the host `is_node_host`; an
 * IPv6 host unbracketed, as Redis writes it) does not read. An empty host (a node that does not
 * know its own address) is `asked_host`.
 */
std::optional<redirection> parse_redirection(std::string_view error, std::string_view asked_host);

} // namespace sluice::redis
