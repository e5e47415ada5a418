// SPDX-License-Identifier: Apache-2.0
#include "yaml_reader_detail.hpp"

#include <algorithm>
#include <array>
#include <limits>

namespace sluice::config::detail {
namespace {

std::string int_range(std::int64_t min, std::int64_t max) {
    if (max == std::numeric_limits<std::int64_t>::max()) {
        return "an integer >= " + std::to_string(min);
    }
    return "an integer between " + std::to_string(min) + " and " + std::to_string(max);
}

/// "16KiB", "1GiB", "300B": a size as the operator would write it.
std::string format_size(std::uint64_t bytes) {
    static constexpr std::array<std::pair<std::uint64_t, std::string_view>, 3> units{
        {{std::uint64_t{1} << 30, "GiB"}, {std::uint64_t{1} << 20, "MiB"}, {1024, "KiB"}}};
    for (const auto& [scale, unit] : units) {
        if (bytes != 0 && bytes % scale == 0) {
            return std::to_string(bytes / scale) + std::string(unit);
        }
    }
    return std::to_string(bytes) + "B";
}

std::string size_range(std::uint64_t min, std::uint64_t max) {
    const std::string forms =
        " (plain bytes, or with k, M, G, KiB, MiB, GiB: every unit 1024-based)";
    if (max == std::numeric_limits<std::uint64_t>::max()) {
        return "a size >= " + format_size(min) + forms;
    }
    return "a size between " + format_size(min) + " and " + format_size(max) + forms;
}

/**
 * Where a null list item's '-' is: yaml-cpp marks the item at the token after it, so the '-' is
 * the last thing written before that mark, past blank lines and comments. `at` itself when what
 * stands there is no '-' (an explicit null, `- ~`, is marked right: its '-' is on its line).
 */
YAML::Mark dash_before(std::string_view yaml, const YAML::Mark& at) {
    auto end = at.pos >= 0 ? std::min(static_cast<std::size_t>(at.pos), yaml.size()) : yaml.size();
    for (;;) {
        const auto newline = end == 0 ? std::string_view::npos : yaml.rfind('\n', end - 1);
        const auto begin = newline == std::string_view::npos ? 0 : newline + 1;
        auto text = yaml.substr(begin, end - begin);
        for (std::size_t i = 0; i < text.size(); ++i) {
            if (text[i] == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t')) {
                text = text.substr(0, i);
                break;
            }
        }
        while (!text.empty() &&
               (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) {
            text.remove_suffix(1);
        }
        if (!text.empty()) {
            if (text.back() != '-') {
                return at;
            }
            YAML::Mark dash;
            dash.pos = static_cast<int>(begin + text.size() - 1);
            dash.line = static_cast<int>(std::count(yaml.begin(), yaml.begin() + dash.pos, '\n'));
            dash.column = static_cast<int>(text.size() - 1);
            return dash;
        }
        if (begin == 0) {
            return at;
        }
        end = begin - 1;
    }
}

} // namespace

void problems::add(const YAML::Mark& at, std::string_view key, std::string_view what) {
    if (std::find(silenced_.begin(), silenced_.end(), key) != silenced_.end()) {
        return;
    }
    entries_.push_back(
        {line_of(at), where(at) + ": key '" + std::string(key) + "': " + std::string(what)});
}

void problems::add_plain(const YAML::Mark& at, std::string_view what) {
    entries_.push_back({line_of(at), where(at) + ": " + std::string(what)});
}

std::string problems::joined() const {
    auto sorted = entries_;
    std::stable_sort(sorted.begin(), sorted.end(), [](const entry& a, const entry& b) {
        return a.line < b.line;
    });
    std::string out;
    for (const auto& e : sorted) {
        if (!out.empty()) {
            out += '\n';
        }
        out += e.text;
    }
    return out;
}

std::string problems::where(const YAML::Mark& at) const {
    return source_ + ":" + std::to_string(line_of(at));
}

std::string must_be(std::string_view expected, const YAML::Node& got) {
    return "must be " + std::string(expected) + ", got " + describe(got);
}

int line_of(const YAML::Mark& at) noexcept {
    return at.line < 0 ? 1 : at.line + 1;
}

std::string describe(const YAML::Node& node) {
    if (!node.IsDefined() || node.IsNull()) {
        return "nothing";
    }
    if (node.IsSequence()) {
        return "a list";
    }
    if (node.IsMap()) {
        return "a mapping";
    }
    return quoted(node.Scalar(), echo_of(node), "the value of an environment variable (not shown)");
}

echo echo_of(const YAML::Node& node) {
    return node.Tag() == substituted_tag ? echo::hidden : echo::shown;
}

mapping::mapping(problems& report, const YAML::Node& node, const YAML::Mark& at, std::string path)
    : report_(report)
    , at_(at)
    , path_(std::move(path)) {
    if (!node.IsDefined() || node.IsNull()) {
        return;
    }
    if (!node.IsMap()) {
        if (path_.empty()) {
            report_.add_plain(node.Mark(),
                              "the document must be a mapping of sections, got " + describe(node));
        } else {
            report_.add(node.Mark(), path_, must_be("a mapping", node));
        }
        return;
    }
    for (const auto& item : node) {
        if (!item.first.IsScalar()) {
            report_.add(
                item.first.Mark(), path_, "keys must be plain words, got " + describe(item.first));
            continue;
        }
        const auto& name = item.first.Scalar();
        if (const auto* first = find(name)) {
            // yaml-cpp keeps both; silently taking either one could hide a changed limit.
            report_.add(item.first.Mark(),
                        path_of(name),
                        "appears twice in one mapping (first at line " +
                            std::to_string(line_of(first->key.Mark())) + ")");
            continue;
        }
        entries_.push_back({name, item.first, item.second});
        // Keys inside lists (rules, limits) are left out: their paths hold indexes that a later
        // message could not match across two files, and there may be thousands.
        if (path_.find('[') == std::string::npos) {
            report_.locate(path_of(name), line_of(item.first.Mark()));
        }
    }
}

const mapping::entry* mapping::find(std::string_view name) const {
    const auto it = std::find_if(
        entries_.begin(), entries_.end(), [&](const entry& e) { return e.name == name; });
    return it == entries_.end() ? nullptr : &*it;
}

bool mapping::has(std::string_view name) {
    known_.emplace_back(name);
    return find(name) != nullptr;
}

YAML::Node mapping::get(std::string_view name) {
    known_.emplace_back(name);
    const auto* e = find(name);
    return e ? e->value : YAML::Node(YAML::NodeType::Undefined);
}

YAML::Mark mapping::mark_of(std::string_view name) const {
    const auto* e = find(name);
    if (!e) {
        return at_;
    }
    if (e->value.IsNull() || e->value.Mark().line < 0) {
        return e->key.Mark();
    }
    return e->value.Mark();
}

YAML::Mark mapping::key_mark_of(std::string_view name) const {
    const auto* e = find(name);
    return e ? e->key.Mark() : at_;
}

std::string mapping::path_of(std::string_view name) const {
    return path_.empty() ? std::string(name) : path_ + "." + std::string(name);
}

void mapping::error(std::string_view name, std::string_view what) {
    report_.add(mark_of(name), path_of(name), what);
}

void mapping::require(std::string_view name, std::string_view hint) {
    std::string what = "is required";
    if (!hint.empty()) {
        what += " (" + std::string(hint) + ")";
    }
    report_.add(at_, path_of(name), what);
}

std::optional<std::string> mapping::scalar(std::string_view name, std::string_view expected) {
    const auto node = get(name);
    if (!node.IsDefined()) {
        return std::nullopt;
    }
    if (!node.IsScalar()) {
        error(name, must_be(expected, node));
        return std::nullopt;
    }
    return node.Scalar();
}

std::optional<std::string> mapping::plain_scalar(std::string_view name, std::string_view expected) {
    auto text = scalar(name, expected);
    // yaml-cpp tags every quoted scalar "!" and leaves plain ones "?".
    if (text && get(name).Tag() == "!") {
        error(name,
              "must be " + std::string(expected) + ", got a quoted string " + quoted(*text) +
                  " (write it without quotes)");
        return std::nullopt;
    }
    return text;
}

bool mapping::read(std::string_view name, bool& out) {
    const auto text = plain_scalar(name, "true or false");
    if (!text) {
        return false;
    }
    const auto value = parse_bool(*text);
    if (!value) {
        error(name, must_be("true or false", get(name)));
        return false;
    }
    out = *value;
    return true;
}

bool mapping::read(std::string_view name, std::string& out, bool allow_empty) {
    const auto expected = allow_empty ? "a string" : "a non-empty string";
    const auto text = scalar(name, expected);
    if (!text) {
        return false;
    }
    if (!allow_empty && text->empty()) {
        error(name, must_be(expected, get(name)));
        return false;
    }
    out = *text;
    return true;
}

bool mapping::read_int(std::string_view name,
                       std::int64_t& out,
                       std::int64_t min,
                       std::int64_t max) {
    const auto expected = int_range(min, max);
    const auto text = plain_scalar(name, expected);
    if (!text) {
        return false;
    }
    const auto value = parse_int(*text);
    if (!value || *value < min || *value > max) {
        error(name, must_be(expected, get(name)));
        return false;
    }
    out = *value;
    return true;
}

bool mapping::read_rate(std::string_view name, double& out) {
    const auto expected = "a rate > 0 such as 5 (per second), 10r/s, 600r/m or 100r/h";
    const auto text = plain_scalar(name, expected);
    if (!text) {
        return false;
    }
    const auto value = parse_rate(*text);
    if (!value || !(*value > 0)) {
        error(name, must_be(expected, get(name)));
        return false;
    }
    // One a nanosecond: beyond it a slot is shorter than the buckets' tolerance of 1e-6 ms, and
    // each leak would count a slot more than has passed. Far past any backend, so more is a typo
    // (zeros too many) that would switch the limit off unseen.
    if (*value > max_rate) {
        error(name,
              must_be("a rate of at most 1000000000 per second (one a nanosecond)", get(name)));
        return false;
    }
    out = *value;
    return true;
}

bool mapping::read_duration(std::string_view name,
                            std::chrono::milliseconds& out,
                            bool zero_allowed) {
    const std::string expected = std::string("a duration ") + (zero_allowed ? ">= 0" : "> 0") +
                                 " such as 500ms, 30s, 2m30s, 1h, 1d or 1.5 (seconds)";
    const auto text = scalar(name, expected);
    if (!text) {
        return false;
    }
    const auto value = parse_duration(*text);
    const bool in_range = value && (zero_allowed ? value->count() >= 0 : value->count() > 0);
    if (!in_range) {
        error(name, must_be(expected, get(name)));
        return false;
    }
    out = *value;
    return true;
}

bool mapping::read_size(std::string_view name,
                        std::uint64_t& out,
                        std::uint64_t min,
                        std::uint64_t max) {
    const auto expected = size_range(min, max);
    const auto text = scalar(name, expected);
    if (!text) {
        return false;
    }
    const auto value = parse_size(*text);
    if (!value || *value < min || *value > max) {
        error(name, must_be(expected, get(name)));
        return false;
    }
    out = *value;
    return true;
}

std::optional<std::size_t> mapping::read_choice(std::string_view name,
                                                const std::vector<std::string>& names) {
    std::string expected = "one of";
    for (std::size_t i = 0; i < names.size(); ++i) {
        expected += (i == 0 ? " " : ", ") + names[i];
    }
    const auto text = scalar(name, expected);
    if (!text) {
        return std::nullopt;
    }
    const auto it = std::find(names.begin(), names.end(), *text);
    if (it != names.end()) {
        return static_cast<std::size_t>(it - names.begin());
    }
    auto what = must_be(expected, get(name));
    if (const auto near = closest(*text, names); !near.empty()) {
        what += "; did you mean " + quoted(near) + "?";
    }
    error(name, what);
    return std::nullopt;
}

std::vector<list_item> mapping::read_list(std::string_view name, std::string_view expected) {
    const auto node = get(name);
    if (!node.IsDefined()) {
        return {};
    }
    if (!node.IsSequence()) {
        error(name, must_be(expected, node));
        return {};
    }
    std::vector<list_item> items;
    items.reserve(node.size());
    for (const auto& item : node) {
        items.push_back(
            {item, item.IsNull() ? dash_before(report_.yaml(), item.Mark()) : item.Mark()});
    }
    return items;
}

void mapping::finish() {
    for (const auto& e : entries_) {
        if (std::find(known_.begin(), known_.end(), e.name) != known_.end()) {
            continue;
        }
        std::string what = "unknown key";
        if (e.name == "<<") {
            // yaml-cpp 0.7 reads a merge key as a key like any other; "did you mean" would
            // suggest a key by the spelling of "<<".
            report_.add(e.key.Mark(),
                        path_of(e.name),
                        "a YAML merge key, which sluice does not apply: write the keys out here "
                        "(an alias as a whole value, such as 'fallback: *defaults', works)");
            continue;
        }
        if (const auto near = closest(e.name, known_); !near.empty()) {
            what += "; did you mean " + quoted(near) + "?";
        } else {
            std::vector<std::string> sorted(known_.begin(), known_.end());
            std::sort(sorted.begin(), sorted.end());
            sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
            what += " (known keys here:";
            for (std::size_t i = 0; i < sorted.size(); ++i) {
                what += (i == 0 ? " " : ", ") + sorted[i];
            }
            what += ")";
        }
        report_.add(e.key.Mark(), path_of(e.name), what);
    }
}

} // namespace sluice::config::detail
