// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/json_fields.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

namespace sluice {
namespace {

/// Whether `segment`, all digits, names array element `index`.
bool names_index(std::string_view segment, std::size_t index) noexcept {
    std::size_t value = 0;
    const auto* end = segment.data() + segment.size();
    const auto [ptr, ec] = std::from_chars(segment.data(), end, value);
    return ec == std::errc{} && ptr == end && value == index;
}

/**
 * Follows one path through the reader's events. `inside` holds the containers the reader is in
 * that lie on the path (the root first); below a container off the path only the depth is
 * counted (`off`), so the state is bounded by the path's length whatever the document's depth.
 */
class path_follower {
public:
    explicit path_follower(const json_path& path) noexcept
        : segments_(path.segments) {}

    /// A scalar value starts; `what` and `text` are what it is.
    void scalar(json_scalar::kind what, std::string_view text, json_scalar& out) {
        if (!value_hits()) {
            return;
        }
        if (inside_.size() == segments_.size()) {
            out.what = what;
            out.text.assign(text);
        } else {
            out = {}; // a later step of the path repeated as a scalar: the path leads nowhere now
        }
    }

    /// An object or array starts.
    void open(bool array, json_scalar& out) {
        if (off_ > 0) {
            ++off_;
            return;
        }
        if (inside_.empty() && !started_) {
            started_ = true; // the root: on every path
            inside_.push_back({array, 0, false});
            return;
        }
        const bool hit = value_hits();
        if (hit && inside_.size() < segments_.size()) {
            // A step of the path, perhaps repeated ({"p":{"n":1},"p":{}}): the last occurrence
            // counts as a whole, so what an earlier one held is gone unless this one holds it too.
            out = {};
            inside_.push_back({array, 0, false});
            return;
        }
        if (hit) {
            out.what = json_scalar::kind::other; // the path ends at a container
            out.text.clear();
        }
        off_ = 1;
    }

    void close() noexcept {
        if (off_ > 0) {
            --off_;
        } else if (!inside_.empty()) {
            inside_.pop_back();
        }
    }

    void key(std::string_view name) noexcept {
        if (off_ == 0 && !inside_.empty()) {
            inside_.back().key_hit = name == segments_[inside_.size() - 1];
        }
    }

private:
    struct frame {
        bool array;
        std::size_t next_index;
        bool key_hit;
    };

    // Whether the value starting now, in the innermost container on the path, is the path's
    // next step; counts it among an array's elements.
    bool value_hits() noexcept {
        if (off_ > 0 || inside_.empty()) {
            return false;
        }
        auto& f = inside_.back();
        if (!f.array) {
            return f.key_hit;
        }
        return names_index(segments_[inside_.size() - 1], f.next_index++);
    }

    std::span<const std::string> segments_;
    std::vector<frame> inside_;
    std::size_t off_ = 0;
    bool started_ = false;
};

/// The reader's handler: every event goes to every path's follower.
class fields_handler : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, fields_handler> {
public:
    fields_handler(std::span<const json_path* const> paths, std::span<json_scalar> out)
        : out_(out) {
        followers_.reserve(paths.size());
        for (const auto* p : paths) {
            followers_.emplace_back(*p);
        }
    }

    bool Null() { return scalar(json_scalar::kind::other, {}); }

    bool Bool(bool) { return scalar(json_scalar::kind::other, {}); }

    bool RawNumber(const char* text, rapidjson::SizeType length, bool) {
        return scalar(json_scalar::kind::number, {text, length});
    }

    bool String(const char* text, rapidjson::SizeType length, bool) {
        // The reader pairs a high surrogate escape with its low one, but lets a lone low one
        // ("\udc00") through as ED B0 80, which is not UTF-8: refused, as a raw one would be.
        const std::string_view value(text, length);
        for (auto at = value.find('\xED'); at != std::string_view::npos;
             at = value.find('\xED', at + 1)) {
            if (at + 1 < value.size() && static_cast<unsigned char>(value[at + 1]) >= 0xA0) {
                return false;
            }
        }
        return scalar(json_scalar::kind::string, value);
    }

    bool Key(const char* text, rapidjson::SizeType length, bool) {
        for (auto& f : followers_) {
            f.key({text, length});
        }
        return true;
    }

    bool StartObject() { return open(false); }

    bool EndObject(rapidjson::SizeType) { return close(); }

    bool StartArray() { return open(true); }

    bool EndArray(rapidjson::SizeType) { return close(); }

    // With kParseNumbersAsStringsFlag the reader calls RawNumber for every number; these would
    // be its typed forms.
    bool Int(int) { return scalar(json_scalar::kind::other, {}); }

    bool Uint(unsigned) { return scalar(json_scalar::kind::other, {}); }

    bool Int64(std::int64_t) { return scalar(json_scalar::kind::other, {}); }

    bool Uint64(std::uint64_t) { return scalar(json_scalar::kind::other, {}); }

    bool Double(double) { return scalar(json_scalar::kind::other, {}); }

private:
    bool scalar(json_scalar::kind what, std::string_view text) {
        for (std::size_t i = 0; i < followers_.size(); ++i) {
            followers_[i].scalar(what, text, out_[i]);
        }
        return true;
    }

    bool open(bool array) {
        if (++depth_ > max_json_depth) {
            return false; // stops the reader: a parse error
        }
        for (std::size_t i = 0; i < followers_.size(); ++i) {
            followers_[i].open(array, out_[i]);
        }
        return true;
    }

    bool close() {
        --depth_;
        for (auto& f : followers_) {
            f.close();
        }
        return true;
    }

    std::span<json_scalar> out_;
    std::vector<path_follower> followers_;
    std::size_t depth_ = 0;
};

} // namespace

std::optional<json_path> parse_json_path(std::string_view text) {
    json_path path;
    path.text = std::string(text);
    for (;;) {
        const auto dot = text.find('.');
        const auto segment = text.substr(0, dot);
        if (segment.empty() || path.segments.size() == max_json_path_segments) {
            return std::nullopt;
        }
        path.segments.emplace_back(segment);
        if (dot == std::string_view::npos) {
            return path;
        }
        text.remove_prefix(dot + 1);
    }
}

bool find_json_fields(std::string_view document,
                      std::span<const json_path* const> paths,
                      std::span<json_scalar> out) {
    for (auto& o : out) {
        o = {};
    }
    // Iterative: a hostile document nested a million deep costs heap, bounded by its size, not
    // stack. Encoding validated: a string value may become part of a store key. Numbers as
    // written: the caller decides what a number it can use looks like. (Not all of them: the
    // reader still refuses an exponent beyond a double's, 1e309 or even 0e309, and with it the
    // whole document.)
    constexpr unsigned flags = rapidjson::kParseIterativeFlag |
                               rapidjson::kParseValidateEncodingFlag |
                               rapidjson::kParseNumbersAsStringsFlag;
    fields_handler handler(paths, out);
    rapidjson::MemoryStream stream(document.data(), document.size());
    rapidjson::Reader reader;
    const auto result = reader.Parse<flags>(stream, handler);
    // MemoryStream reads a NUL byte as its end: one inside the document must not cut it short.
    if (result.IsError() || stream.Tell() != document.size()) {
        for (auto& o : out) {
            o = {};
        }
        return false;
    }
    return true;
}

} // namespace sluice
