// SPDX-License-Identifier: Apache-2.0
// Address parsing (trusted-proxies CIDRs from the config, X-Forwarded-For entries from peers).
// Properties: whatever parses prints canonically and parses back to itself; a block contains its
// own network; the client address of an X-Forwarded-For list is the peer or one of its entries.
#include "sluice/key/cidr.hpp"
#include "sluice/key/client_address.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

void fail(const char* what, std::string_view text) {
    std::fprintf(
        stderr, "address_fuzz: %s: \"%.*s\"\n", what, static_cast<int>(text.size()), text.data());
    std::abort();
}

void check_address(std::string_view text) {
    const auto ip = sluice::key::ip_address::parse(text);
    if (!ip) {
        return;
    }
    const auto printed = ip->to_string();
    const auto back = sluice::key::ip_address::parse(printed);
    if (!back || *back != *ip) {
        fail("an address does not survive printing", text);
    }
    // Both key spellings of it are pure functions of the address.
    if (sluice::key::client_key_part(*ip, 64) != sluice::key::client_key_part(*back, 64)) {
        fail("one address, two key parts", text);
    }
}

void check_cidr(std::string_view text) {
    const auto block = sluice::key::cidr::parse(text);
    if (!block) {
        return;
    }
    if (block->prefix < 0 || block->prefix > (block->network.v4 ? 32 : 128)) {
        fail("a prefix out of range", text);
    }
    if (!block->contains(block->network)) {
        fail("a block that does not contain its own network", text);
    }
    const auto back = sluice::key::cidr::parse(block->to_string());
    if (!back || *back != *block) {
        fail("a block does not survive printing", text);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    check_address(text);
    check_cidr(text);
    (void)sluice::key::parse_forwarded_entry(text);

    // The input as an X-Forwarded-For list behind a trusted proxy: the answer is the peer or an
    // address that appears in the list.
    const auto peer = *sluice::key::ip_address::parse("10.0.0.1");
    const std::array trusted{*sluice::key::cidr::parse("10.0.0.0/8"),
                             *sluice::key::cidr::parse("fd00::/8")};
    const auto client = sluice::key::client_address(peer, text, trusted);
    if (client != peer) {
        bool listed = false;
        std::size_t start = 0;
        while (!listed && start <= text.size()) {
            auto end = text.find(',', start);
            if (end == std::string_view::npos) {
                end = text.size();
            }
            const auto entry = sluice::key::parse_forwarded_entry(text.substr(start, end - start));
            listed = entry && *entry == client;
            start = end + 1;
        }
        if (!listed) {
            fail("a client address that is neither the peer nor listed", text);
        }
    }
    return 0;
}
