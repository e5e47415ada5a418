// SPDX-License-Identifier: Apache-2.0
// Checks on the text of every scalar in the document, wherever it is read later: yaml-cpp accepts
// a quoted value that runs to the end of the file, a NUL escape and bytes that are not UTF-8, and
// each of these would otherwise reach a rule name, a password or a path unnoticed.
#include "yaml_reader_detail.hpp"

namespace sluice::config::detail {
namespace {

/// Deeper than any configuration needs; yaml-cpp itself parsed the document with recursion.
constexpr int max_depth = 64;

/// More values than any configuration needs; aliases of aliases could otherwise make a short
/// file expand into billions of values to visit.
constexpr std::size_t max_values = 100'000;

/// The byte after a well-formed UTF-8 sequence starting at `i`, or npos when it is not one
/// (overlong forms, surrogates and code points above U+10FFFF are not UTF-8).
std::size_t next_code_point(std::string_view text, std::size_t i) noexcept {
    const auto byte = [&](std::size_t at) {
        return static_cast<unsigned char>(text[at]);
    };
    const unsigned char lead = byte(i);
    if (lead < 0x80) {
        return i + 1;
    }
    std::size_t length = 0;
    unsigned char low = 0x80;
    unsigned char high = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
        length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
        length = 3;
        low = lead == 0xe0 ? 0xa0 : 0x80;  // overlong
        high = lead == 0xed ? 0x9f : 0xbf; // surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
        length = 4;
        low = lead == 0xf0 ? 0x90 : 0x80;  // overlong
        high = lead == 0xf4 ? 0x8f : 0xbf; // above U+10FFFF
    } else {
        return std::string_view::npos;
    }
    if (i + length > text.size() || byte(i + 1) < low || byte(i + 1) > high) {
        return std::string_view::npos;
    }
    for (std::size_t k = 2; k < length; ++k) {
        if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) {
            return std::string_view::npos;
        }
    }
    return i + length;
}

bool is_utf8(std::string_view text) noexcept {
    for (std::size_t i = 0; i < text.size();) {
        i = next_code_point(text, i);
        if (i == std::string_view::npos) {
            return false;
        }
    }
    return true;
}

/**
 * Whether the quoted scalar that opens at `at` in `yaml` is closed before the end of the text.
 * A scalar that is not quoted there (a block scalar, or a mark that does not point at a quote)
 * counts as closed.
 */
bool quote_closed(std::string_view yaml, std::size_t at) noexcept {
    if (at >= yaml.size() || (yaml[at] != '"' && yaml[at] != '\'')) {
        return true;
    }
    const char quote = yaml[at];
    for (std::size_t i = at + 1; i < yaml.size(); ++i) {
        if (quote == '"' && yaml[i] == '\\') {
            ++i; // the escaped character, whatever it is
        } else if (yaml[i] == quote) {
            if (quote == '\'' && i + 1 < yaml.size() && yaml[i + 1] == '\'') {
                ++i; // '' is an escaped quote
                continue;
            }
            return true;
        }
    }
    return false;
}

class text_checker {
public:
    text_checker(problems& report, std::string_view yaml)
        : report_(report)
        , yaml_(yaml) {}

    void check(const YAML::Node& node, const std::string& path, int depth) {
        if (depth > max_depth) {
            report_.add(node.Mark(), path, "nested deeper than " + std::to_string(max_depth));
            return;
        }
        if (++visited_ > max_values) {
            if (visited_ == max_values + 1) {
                report_.add(node.Mark(),
                            path,
                            "the document holds more than " + std::to_string(max_values) +
                                " values (aliases expanding?)");
            }
            return;
        }
        if (node.IsScalar()) {
            check_scalar(node, path);
        } else if (node.IsSequence()) {
            for (std::size_t i = 0; i < node.size(); ++i) {
                check(node[i], path + "[" + std::to_string(i) + "]", depth + 1);
            }
        } else if (node.IsMap()) {
            for (const auto& item : node) {
                const auto name = item.first.IsScalar() ? item.first.Scalar() : std::string("?");
                const auto child = path.empty() ? name : path + "." + name;
                if (item.first.IsScalar()) {
                    check_scalar(item.first, child);
                } else {
                    check(item.first, child, depth + 1);
                }
                check(item.second, child, depth + 1);
            }
        }
    }

private:
    void check_scalar(const YAML::Node& node, const std::string& path) {
        const auto& text = node.Scalar();
        const auto pos = node.Mark().pos;
        if (node.Tag() == "!" && pos >= 0 && !quote_closed(yaml_, static_cast<std::size_t>(pos))) {
            report_.add(node.Mark(), path, "the quoted value has no closing quote");
        } else if (text.find('\0') != std::string::npos) {
            report_.add(node.Mark(), path, "must not contain NUL");
        } else if (!is_utf8(text)) {
            report_.add(node.Mark(), path, "must be valid UTF-8 text");
        }
    }

    problems& report_;
    std::string_view yaml_;
    std::size_t visited_ = 0;
};

} // namespace

void check_text(problems& report, std::string_view yaml, const YAML::Node& document) {
    text_checker(report, yaml).check(document, "", 0);
}

} // namespace sluice::config::detail
