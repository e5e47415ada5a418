// SPDX-License-Identifier: Apache-2.0
// Redis Cluster's slot map (issue 16): `CLUSTER SLOTS` replies of any shape, and key slots of any
// key. The input is decoded into a reply tree (a byte picks each node's type: integer, string,
// nil or array, nested at most 5 deep); the input as a whole is also a key. Properties: a reply
// is either a map or an error, never both; a map's owners are its primaries, each with a port in
// 1..65535; a key's hashed part holds no further tag, and its slot is below 16384. The input as
// a whole is also an error reply's text: a redirection read from it has a slot below 16384 and,
// for MOVED and ASK, a port in 1..65535 and a host (the asked one when the text names none). Every
// host a map's primary or a redirection names is a host name or an IP address (is_node_host).
#include "sluice/redis/cluster_slots.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

using sluice::redis::reply;

struct input {
    const std::uint8_t* data;
    std::size_t size;

    std::uint8_t byte() noexcept {
        if (size == 0) {
            return 0;
        }
        --size;
        return *data++;
    }
};

void fail(const char* what) {
    std::fprintf(stderr, "cluster_slots_fuzz: %s\n", what);
    std::abort();
}

reply decode(input& in, int depth) {
    reply r;
    const auto type = in.byte();
    switch (type % 4) {
    case 0: {
        r.type = reply::kind::integer;
        // Around the bounds that matter: slots (0..16383) and ports (1..65535).
        const auto high = in.byte();
        const auto low = in.byte();
        r.integer = (static_cast<std::int64_t>(high) << 8 | low) - 1000;
        if ((type & 4) != 0) {
            r.integer += 16000;
        }
        break;
    }
    case 1: {
        r.type = reply::kind::string;
        for (auto n = in.byte() % 6; n > 0; --n) {
            r.str.push_back(static_cast<char>(in.byte()));
        }
        break;
    }
    case 2:
        break; // nil
    default:
        r.type = reply::kind::array;
        if (depth < 5) {
            for (auto n = in.byte() % 6; n > 0 && in.size > 0; --n) {
                r.elements.push_back(decode(in, depth + 1));
            }
        }
        break;
    }
    return r;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view key(reinterpret_cast<const char*>(data), size);
    const auto part = sluice::redis::hashed_part(key);
    if (sluice::redis::hashed_part(part) != part) {
        fail("a hashed part holds a tag of its own");
    }
    if (sluice::redis::key_slot(key) >= sluice::redis::cluster_slots) {
        fail("a slot past 16383");
    }
    if (const auto to = sluice::redis::parse_redirection(key, "asked")) {
        if (to->slot >= sluice::redis::cluster_slots) {
            fail("a redirection to a slot past 16383");
        }
        if (to->type != sluice::redis::redirection::kind::tryagain &&
            (to->port == 0 || to->host.empty())) {
            fail("a redirection without an address");
        }
        if (to->type != sluice::redis::redirection::kind::tryagain &&
            !sluice::redis::is_node_host(to->host)) {
            fail("a redirection to a host that is no name or address");
        }
    }
    input in{data, size};
    const auto r = decode(in, 0);
    const auto result = sluice::redis::parse_cluster_slots(r, "asked");
    if (result.map.has_value() == !result.error.empty()) {
        fail("a reply is both a map and an error, or neither");
    }
    if (result.map) {
        const auto& map = *result.map;
        for (const auto owner : map.owner) {
            if (owner != sluice::redis::slot_map::no_owner && owner >= map.primaries.size()) {
                fail("an owner that is no primary");
            }
        }
        for (const auto& p : map.primaries) {
            if (p.port == 0 || p.host.empty() || p.host == "?") {
                fail("a primary without an address");
            }
            if (!sluice::redis::is_node_host(p.host)) {
                fail("a primary whose host is no name or address");
            }
        }
    }
    return 0;
}
