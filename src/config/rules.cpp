// SPDX-License-Identifier: Apache-2.0
// Reading `rate-limit.rules`: each rule's name, path pattern and methods (`match`), and its
// limits (parse_limit, limits.cpp); a name given twice is reported at its second line.
#include "loader_detail.hpp"
#include "sluice/core/text.hpp"
#include "sluice/key/path.hpp"

#include <map>

namespace sluice::config::detail {
namespace {

/// A rule's name is in every key of its limits and labels its metrics: short, like a label.
constexpr std::size_t max_rule_name_bytes = 128;

/// Sets the rule's path and its kind: exact, prefix ("/v1/*", "/v1*") or glob.
void read_path(mapping& m, rule& r) {
    if (!m.has("path")) {
        m.require("path", "e.g. path: /v1/completions, or /v1/* for a prefix");
        return;
    }
    if (!m.read("path", r.path, false)) {
        return;
    }
    const auto node = m.get("path");
    if (r.path.front() != '/') {
        m.error("path", "must start with '/', got " + describe(node));
        return;
    }
    if (r.path.find_first_of(" \t?#") != std::string::npos) {
        m.error("path",
                "must be a path only (no spaces, query or fragment), got " + describe(node));
        return;
    }
    // Requests are matched by their normalized path, so a pattern that normalization would change
    // ("/v1//x", "/a/../b") could never match anything.
    const auto normal = key::normalize_path(r.path);
    if (normal != r.path) {
        m.error("path",
                "would never match: request paths are normalized first" +
                    (normal && echo_of(node) == echo::shown ? "; write " + quoted(*normal)
                                                            : std::string()));
        return;
    }
    const auto stars = std::count(r.path.begin(), r.path.end(), '*');
    if (stars == 0) {
        r.kind = rule::match_kind::exact;
    } else if (stars == 1 && r.path.back() == '*') {
        r.kind = rule::match_kind::prefix;
    } else {
        r.kind = rule::match_kind::glob;
    }
}

/// A method name: a token that starts with a letter ("1" is a token, but no method).
bool is_method(const YAML::Node& item) {
    return item.IsScalar() && is_token(item.Scalar()) &&
           std::isalpha(static_cast<unsigned char>(item.Scalar().front()));
}

/**
 * Methods are case-sensitive, so "post" would never match: that is reported, not accepted. An
 * empty or null list is an error too: "any method" is written by leaving `methods` out, so a
 * truncated `methods:` on an exempt rule cannot exempt every method.
 */
void read_methods(mapping& m, rule& r) {
    const auto items = m.read_list("methods");
    if (m.get("methods").IsSequence() && items.empty()) {
        m.error("methods", "must not be empty; leave it out to match any method");
    }
    for (std::size_t i = 0; i < items.size(); ++i) {
        const auto path = m.path_of("methods") + "[" + std::to_string(i) + "]";
        const auto& item = items[i].node;
        if (!is_method(item)) {
            m.report().add(items[i].mark, path, must_be("an HTTP method such as GET", item));
            continue;
        }
        auto upper = item.Scalar();
        std::transform(upper.begin(), upper.end(), upper.begin(), [](char c) {
            return static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        });
        if (upper != item.Scalar()) {
            // The suggestion would show a hidden value too, in upper case.
            m.report().add(items[i].mark,
                           path,
                           "HTTP methods are case-sensitive, got " + describe(item) +
                               (echo_of(item) == echo::shown
                                    ? "; did you mean " + quoted(upper) + "?"
                                    : std::string("; write it in upper case")));
            continue;
        }
        r.methods.push_back(upper);
    }
}

void read_match(mapping& parent, rule& r) {
    const auto node = parent.get("match");
    if (!node.IsMap()) {
        parent.error("match", must_be("a mapping such as { path: /v1/*, methods: [POST] }", node));
        return;
    }
    mapping m(parent.report(), node, parent.key_mark_of("match"), parent.path_of("match"));
    read_path(m, r);
    read_methods(m, r);
    m.finish();
}

rule parse_rule(problems& report, const list_item& item, const std::string& path) {
    const auto& node = item.node;
    rule r;
    r.line = line_of(item.mark);
    if (!node.IsMap()) {
        report.add(item.mark, path, must_be("a mapping with name, match and limits", node));
        return r;
    }
    mapping m(report, node, item.mark, path);
    if (!m.has("name")) {
        m.require("name");
    } else if (m.read("name", r.name, false)) {
        // A rule's name scopes its limits' keys (`rate-limit:<name>#<n>:...`) and labels its
        // metrics: the fallback's own name would share both with it, and a '#' would let two
        // names make one scope. It goes into the keys as written, so a '{' would start a Redis
        // Cluster hash tag ahead of the key's own (`hash-tag: ip`): "{api}" would put every
        // client's keys of the rule in one slot. Header and JSON parts are percent-encoded for
        // this reason; a name is refused instead, '}' with '{' so that one rule covers both.
        if (r.name == "fallback") {
            m.error("name", "'fallback' is the fallback limit's own name (in keys and metrics)");
        } else if (r.name.find('#') != std::string::npos) {
            m.error("name", "must not contain '#', which ends the name in its limits' keys");
        } else if (r.name.find_first_of("{}") != std::string::npos) {
            m.error("name",
                    "must not contain '{' or '}', which would make a Redis Cluster hash tag in its "
                    "limits' keys");
        } else if (r.name.size() > max_rule_name_bytes) {
            // It is in every key of its limits (the memory store counts a key's length in 16
            // bits: src/store/key_table.hpp).
            m.error("name",
                    "is " + std::to_string(r.name.size()) + " bytes long; at most " +
                        std::to_string(max_rule_name_bytes) +
                        " (it is part of every key of its limits)");
        }
    }
    if (!m.has("match")) {
        m.require("match", "e.g. match: { path: /v1/* }");
    } else {
        read_match(m, r);
    }
    // Required, so that a misspelt `limits` cannot quietly exempt a path from limiting.
    if (!m.has("limits")) {
        m.require("limits", "a list of limits; [] exempts the path");
    }
    const auto items = m.read_list("limits", "a list of limits ([] exempts the path)");
    for (std::size_t i = 0; i < items.size(); ++i) {
        const auto item_path = m.path_of("limits") + "[" + std::to_string(i) + "]";
        r.limits.push_back(parse_limit(report, items[i].node, items[i].mark, item_path));
    }
    m.finish();
    return r;
}

} // namespace

std::vector<rule> parse_rules(mapping& rate_limit) {
    std::vector<rule> out;
    std::map<std::string, int> first_line; // rule name -> line
    const auto items = rate_limit.read_list("rules");
    for (std::size_t i = 0; i < items.size(); ++i) {
        const auto path = rate_limit.path_of("rules") + "[" + std::to_string(i) + "]";
        auto r = parse_rule(rate_limit.report(), items[i], path);
        if (!r.name.empty()) {
            const auto [it, fresh] = first_line.emplace(r.name, r.line);
            if (!fresh) {
                const auto name = items[i].node["name"];
                rate_limit.report().add(name.Mark(),
                                        path + ".name",
                                        "duplicate rule name " + describe(name) +
                                            " (first at line " + std::to_string(it->second) + ")");
            }
        }
        out.push_back(std::move(r));
    }
    return out;
}

} // namespace sluice::config::detail
