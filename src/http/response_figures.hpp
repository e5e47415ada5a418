// SPDX-License-Identifier: Apache-2.0
#pragma once

// The `json:` figures of cost-weighted limits in a response body (issue 15), found while the body
// streams to the client: sluice keeps aside what it needs (the whole body of an application/json
// response, or one server-sent event at a time) and looks in it after passing each block on, so
// the client never waits for the search. Knows nothing of sockets or Beast: the relay feeds it.

#include "sluice/config/config.hpp"
#include "sluice/core/json_fields.hpp"

#include <boost/container/small_vector.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sluice::http::detail {

class response_figures {
public:
    /**
     * Looks for the `json:` sources among `sources` (the others are left to the caller) in a
     * body of `content_type`: application/json or any `+json` type is one document, searched
     * when it is over; text/event-stream is a stream of events, each searched as it ends, the last
     * event that carries a path giving its figure (OpenAI-style streams put the usage in the
     * final event). Any other type, and a body with a `content_encoding` other than identity
     * (sluice does not decompress), has no figures. `max_bytes` bounds what is kept aside: a
     * longer document, or a longer event, gives no figure.
     */
    response_figures(std::span<const config::cost_source* const> sources,
                     std::string_view content_type,
                     std::string_view content_encoding,
                     std::uint64_t max_bytes);

    /// Whether any figure can come of this body (a `json:` source and a type to search).
    bool active() const noexcept { return mode_ != mode::none; }

    /// The next block of the (de-chunked) body.
    void feed(std::string_view block);

    /**
     * After the whole body: the figure of `sources[i]` as written (a JSON number), or nullopt
     * (no `json:` source, no figure, or a field that is not a number). Call once.
     */
    std::optional<std::string> figure(std::size_t i);

private:
    enum class mode {
        none,
        document,
        events,
    };

    void end_line();
    void end_event();
    /// Records what `values_` hold for each path that was there (so that, in a stream, the last
    /// event carrying a path counts).
    void take_values();

    mode mode_ = mode::none;
    std::uint64_t max_bytes_;
    /// sources[i]'s index in paths_, or -1 for a source that is not `json:`.
    boost::container::small_vector<int, 1> path_of_;
    boost::container::small_vector<const json_path*, 1> paths_;
    boost::container::small_vector<json_scalar, 1> values_;
    boost::container::small_vector<std::optional<std::string>, 1> figures_;
    /// document: the body so far. events: the current event's data lines, joined by '\n'.
    std::string kept_;
    /// events: the current line, up to its end.
    std::string line_;
    /// events: the current line has a byte (an empty line ends the event).
    bool line_started_ = false;
    /// What was kept went past max_bytes: document, or the current event, has no figure.
    bool overflow_ = false;
    /// events: the last block ended in CR; an LF starting the next one belongs to it.
    bool after_cr_ = false;
    bool finished_ = false;
};

} // namespace sluice::http::detail
