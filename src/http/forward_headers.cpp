// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/forward_headers.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/container/small_vector.hpp>

#include <array>
#include <string>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;

constexpr std::array fixed_hop_by_hop{
    bhttp::field::keep_alive,
    bhttp::field::proxy_connection,
    bhttp::field::te,
    bhttp::field::trailer,
    bhttp::field::upgrade,
};

bool is_framing(std::string_view name) {
    return boost::beast::iequals(name, "content-length") ||
           boost::beast::iequals(name, "transfer-encoding") || boost::beast::iequals(name, "host");
}

} // namespace

void strip_hop_by_hop(bhttp::fields& fields) {
    // Collect the names listed in every Connection line before erasing anything: the views point
    // into the fields' storage.
    boost::container::small_vector<std::string, 4> named;
    for (const auto& f : fields) {
        if (f.name() != bhttp::field::connection) {
            continue;
        }
        for (auto token : bhttp::token_list{f.value()}) {
            const std::string_view name{token.data(), token.size()};
            if (!is_framing(name)) {
                named.emplace_back(name);
            }
        }
    }
    fields.erase(bhttp::field::connection);
    for (const auto& name : named) {
        fields.erase(name);
    }
    for (auto f : fixed_hop_by_hop) {
        fields.erase(f);
    }
}

void add_forwarding_headers(bhttp::fields& fields, std::string_view peer) {
    std::string chain;
    for (const auto& f : fields) {
        if (!boost::beast::iequals(f.name_string(), "x-forwarded-for")) {
            continue;
        }
        const std::string_view value{f.value().data(), f.value().size()};
        if (value.find_first_not_of(" \t") == std::string_view::npos) {
            continue;
        }
        if (!chain.empty()) {
            chain += ", ";
        }
        chain += value;
    }
    if (!chain.empty()) {
        chain += ", ";
    }
    chain += peer;
    fields.set("X-Forwarded-For", chain);
    fields.set("X-Forwarded-Proto", "http");
}

} // namespace sluice::http
