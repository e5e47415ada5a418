// SPDX-License-Identifier: Apache-2.0
#include "sluice/redis/scripts.hpp"

#include "sluice/redis/reply.hpp"

namespace sluice::redis {

std::pair<std::string_view, std::string_view> script_call_head(script_call how, const script& s) {
    switch (how) {
    case script_call::fcall:
        return {"FCALL", s.function_name};
    case script_call::evalsha:
        return {"EVALSHA", s.sha1};
    case script_call::eval:
        break;
    }
    return {"EVAL", s.text};
}

script_refusal refusal_of(script_call how, const reply& r) {
    if (!r.is_error()) {
        return script_refusal::none;
    }
    const std::string_view text = r.str;
    switch (how) {
    case script_call::fcall:
        // Redis 7 says "ERR Function not found"; Redis 6 "ERR unknown command 'FCALL'..." (or
        // with backquotes), as does a Redis that renamed the command away.
        if (text.starts_with("ERR Function not found")) {
            return script_refusal::function_missing;
        }
        if (text.starts_with("ERR unknown command") || text.starts_with("NOPERM")) {
            return script_refusal::functions_unusable;
        }
        break;
    case script_call::evalsha:
        if (text.starts_with("NOSCRIPT")) {
            return script_refusal::noscript;
        }
        break;
    case script_call::eval:
        break;
    }
    return script_refusal::none;
}

} // namespace sluice::redis
